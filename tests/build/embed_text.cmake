# Writes a C++ header holding a text file's contents, so that a test reads
# a source file it checks from its own binary, never from the source tree
# at run time (test programs travel without it, e.g. to a GPU machine):
#
#   cmake -DIN=FILE -DOUT=HEADER -DNAME=kIdentifier -P embed_text.cmake
#
# gives `inline constexpr char kIdentifier[] = R"octet_embed(...)";`.
file(READ "${IN}" text)
string(FIND "${text}" ")octet_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} holds the raw string's delimiter")
endif()
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by tests/build/embed_text.cmake.\n"
  "#pragma once\n"
  "inline constexpr char ${NAME}[] = R\"octet_embed(${text})octet_embed\";\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
