# first_program.cmake — test_readme (tests/CMakeLists.txt), run as `cmake -P`: README.md's first
# ```c block must compile as a user's program would, without a warning (-Wall -Wextra -Werror,
# the public headers alone), link against libweft and run. The compile check is of the README's
# own text; the run is of the same text with its 4000 x 4000 products made 200 x 200, so that it
# takes a moment on a CPU (weft_try_gpu falls back to the CPU where there is no GPU).
#
#   -DREADME=README.md  -DCC=compiler  -DINCLUDE=include dir  -DLIB=libweft's file
#   -DSANITIZE=WEFT_SANITIZE's value  -DWORK=a scratch directory
foreach(var README CC INCLUDE LIB WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "first_program.cmake needs -D${var}=")
  endif()
endforeach()

# The first ```c block, verbatim.
file(READ "${README}" text)
string(FIND "${text}" "```c\n" begin)
if(begin EQUAL -1)
  message(FATAL_ERROR "${README} has no ```c block")
endif()
math(EXPR begin "${begin} + 5")
string(SUBSTRING "${text}" ${begin} -1 text)
string(FIND "${text}" "```" end)
string(SUBSTRING "${text}" 0 ${end} program)

# The same program at a size a CPU runs in a moment; the README must still say 4000 x 4000, or
# this test must learn what it says now.
string(REPLACE "(int64_t[]){4000, 4000}" "(int64_t[]){200, 200}" small "${program}")
if(small STREQUAL program)
  message(FATAL_ERROR "README.md's first program no longer makes a (int64_t[]){4000, 4000} "
                      "tensor: update the substitution in ${CMAKE_CURRENT_LIST_FILE}")
endif()

set(flags -std=c11 -Wall -Wextra -Werror -I${INCLUDE})
if(SANITIZE STREQUAL "address")
  list(APPEND flags -fsanitize=address,undefined -fno-sanitize-recover=all)
elseif(SANITIZE STREQUAL "thread")
  list(APPEND flags -fsanitize=thread)
endif()
get_filename_component(libdir "${LIB}" DIRECTORY)

file(MAKE_DIRECTORY "${WORK}")
foreach(name first_program first_program_small)
  if(name STREQUAL "first_program")
    file(WRITE "${WORK}/${name}.c" "${program}")
  else()
    file(WRITE "${WORK}/${name}.c" "${small}")
  endif()
  execute_process(
    COMMAND "${CC}" ${flags} "${WORK}/${name}.c" -o "${WORK}/${name}" "${LIB}" "-Wl,-rpath,${libdir}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "README.md's first program (${WORK}/${name}.c) does not build cleanly:\n${out}")
  endif()
endforeach()

execute_process(COMMAND "${WORK}/first_program_small" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE out TIMEOUT 240)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "README.md's first program (200 x 200) failed: ${rc}\n${out}")
endif()
message(STATUS "README.md's first program compiles without a warning, links and runs")
