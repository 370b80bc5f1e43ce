# Writes OUT: ATTNC_BUILD_ID, a hash of the compiler's sources (FILES, a
# |-separated list). The kernel cache keys on it, so a rebuilt compiler
# whose code generation changed never reuses kernels of the old one.
string(REPLACE "|" ";" files "${FILES}")
set(all "")
foreach(f IN LISTS files)
  file(SHA256 "${f}" h)
  string(APPEND all "${h}")
endforeach()
string(SHA256 id "${all}")
string(SUBSTRING "${id}" 0 16 id)
set(text "#define ATTNC_BUILD_ID \"${id}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
