# Fails if a source file includes a floor it may not reach (docs/design.md,
# "Floors and arrows"), or, given PROGRAM, if that program carries code of a
# library it must not link.
#
#   cmake -DSOURCE_DIR=. -P check_layers.cmake
#   cmake -DSOURCE_DIR=. -DNM=nm -DPROGRAM=bin/coordinator
#         -DFORBIDDEN="octet::LlamaModel;gloo::" -P check_layers.cmake
#
# Floors, lowest first; each may include its own folder and what its row
# lists ("octet/" is the generated proto code of proto/). An arrow never
# points up: base/ knows nothing above it, kernels/ nothing of ranks or
# models, the coordinator reaches the workers only through proto/.
set(allowed_base        base/)
set(allowed_jinja       jinja/)
set(allowed_rpc         rpc/ base/ octet/)
set(allowed_kernels     kernels/ base/)
set(allowed_parallel    parallel/ kernels/ rpc/ base/ octet/)
set(allowed_model       model/ jinja/ base/)
set(allowed_worker      worker/ model/ parallel/ kernels/ rpc/ base/ octet/)
set(allowed_coordinator coordinator/ model/ jinja/ rpc/ base/ octet/)
set(allowed_tools       tools/ worker/ model/ jinja/ parallel/ kernels/ rpc/
                        base/ octet/)
set(floors base jinja rpc kernels parallel model worker coordinator tools)

# The folders an #include "..." can name: the project's and proto's.
set(project_prefixes base/ jinja/ rpc/ kernels/ parallel/ model/ worker/
                     coordinator/ tools/ octet/ tests/)

# OUT is TRUE when TEXT starts with one of the strings in the list PREFIXES.
function(starts_with_any text prefixes out)
  foreach(prefix IN LISTS ${prefixes})
    string(FIND "${text}" "${prefix}" at)
    if(at EQUAL 0)
      set(${out} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

if(NOT SOURCE_DIR)
  message(FATAL_ERROR "check_layers: SOURCE_DIR is required")
endif()

set(bad "")
set(checked 0)
foreach(floor IN LISTS floors)
  file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}
       ${SOURCE_DIR}/${floor}/*.h ${SOURCE_DIR}/${floor}/*.cc
       ${SOURCE_DIR}/${floor}/*.cu ${SOURCE_DIR}/${floor}/*.cuh)
  foreach(source IN LISTS sources)
    math(EXPR checked "${checked} + 1")
    file(STRINGS ${SOURCE_DIR}/${source} includes
         REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" target "${line}")
      # Only the project's own headers take part (absl/, nlohmann/, ... and
      # same-folder names without a slash are not floors).
      starts_with_any("${target}" project_prefixes ours)
      if(NOT ours)
        continue()
      endif()
      starts_with_any("${target}" allowed_${floor} ok)
      if(NOT ok)
        string(APPEND bad "  ${source} includes \"${target}\" "
                          "(${floor}/ may include: ${allowed_${floor}})\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "check_layers: no sources under ${SOURCE_DIR}")
endif()
if(bad)
  message(FATAL_ERROR "includes that point up or sideways:\n${bad}")
endif()
message(STATUS "${checked} source files include only the floors they may")

# The program's defined symbols must name none of FORBIDDEN (what linking a
# forbidden library would bring in).
if(PROGRAM)
  execute_process(COMMAND ${NM} --defined-only -C ${PROGRAM}
                  OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm failed on ${PROGRAM}")
  endif()
  string(LENGTH "${symbols}" size)
  if(size LESS 1000)
    message(FATAL_ERROR "nm listed almost nothing for ${PROGRAM}")
  endif()
  string(REPLACE "\n" ";" lines "${symbols}")
  set(found "")
  foreach(line IN LISTS lines)
    foreach(pattern IN LISTS FORBIDDEN)
      string(FIND "${line}" "${pattern}" at)
      if(NOT at EQUAL -1)
        string(APPEND found "  ${line}\n")
        break()
      endif()
    endforeach()
  endforeach()
  if(found)
    message(FATAL_ERROR "${PROGRAM} carries code it must not link:\n${found}")
  endif()
  message(STATUS "${PROGRAM} carries none of: ${FORBIDDEN}")
endif()
