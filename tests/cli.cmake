# tests/cli.cmake — the weft command and the libuv adapter (included by tests/CMakeLists.txt).
#   test_uv      weft/uv.h against real loops (links libweft_uv's static twin and libuv);
#   test_cli     every subcommand end to end: runs the built `weft` as a subprocess;
#   test_serve   weft serve / weft submit over loopback TCP and Unix sockets (the HTTP API), and the
#                query-string and address parsers.
# The subprocess tests find the binary through WEFT_BIN, else the path baked in at build
# time, else a `weft` beside the test executable (as on the GPU machine's staged copy).
if(TARGET weft_uv_static)
  weft_add_test(test_uv LABELS unit TIMEOUT 120)
  target_link_libraries(test_uv PRIVATE weft_uv_static)
  target_compile_definitions(test_uv PRIVATE _GNU_SOURCE)
endif()
if(NOT TARGET weft_cli)
  return()
endif()

foreach(t test_cli test_serve)
  weft_add_test(${t} LABELS cli TIMEOUT 300 SOURCES cli_proc.c)
  target_compile_definitions(${t} PRIVATE _GNU_SOURCE
    WEFT_CLI_PATH="$<TARGET_FILE:weft_cli>"
    WEFT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    WEFT_TEST_PTHREAD_BLAS="${WEFT_PTHREAD_BLAS_DEF}" WEFT_TEST_BLAS_SERIAL=${WEFT_BLAS_SERIAL})
  add_dependencies(${t} weft_cli)
endforeach()
target_link_libraries(test_serve PRIVATE weft_cli_http)
