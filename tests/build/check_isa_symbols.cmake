# Fails if an instruction-set translation unit (kernels/cpu/*_avx*.cc)
# defines code that the linker could share with the rest of the program.
#
# Those units are compiled with -mavx2 / -mavx512*. An inline function they
# instantiate with external linkage (a header helper, a template) becomes a
# weak symbol; the linker keeps one copy for the whole program, possibly the
# AVX-512 one, and a CPU without AVX-512 then crashes in code that was meant
# to be portable. Only the kernel tables (data) may be visible.
#
#   cmake -DNM=nm -DOBJECTS="a.o;b.o" -P check_isa_symbols.cmake
set(bad "")
foreach(obj IN LISTS OBJECTS)
  if(NOT obj MATCHES "_avx[0-9]+\\.cc\\.o$")
    continue()
  endif()
  execute_process(COMMAND ${NM} --defined-only -C ${obj}
                  OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm failed on ${obj}")
  endif()
  string(REPLACE "\n" ";" lines "${symbols}")
  foreach(line IN LISTS lines)
    # Global (T) or weak (W) code, outside anonymous namespaces.
    if(line MATCHES " [TW] " AND NOT line MATCHES "anonymous namespace")
      string(APPEND bad "  ${obj}: ${line}\n")
    endif()
  endforeach()
  set(checked TRUE)
endforeach()
if(NOT checked)
  message(FATAL_ERROR "no instruction-set object files were given")
endif()
if(bad)
  message(FATAL_ERROR "instruction-set units define shareable code:\n${bad}")
endif()
message(STATUS "instruction-set units define no shareable code")
