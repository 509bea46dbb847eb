# tests/report.cmake — run statistics, overlap accounting, traces, timelines and progress
# (src/sched/report). The JSON outputs are checked with jansson (which libweft links, found
# in the top-level CMakeLists) and the SVG with libxml2 where it is installed
# (scripts/setup.sh --tests installs it); without libxml2 those cases skip.
find_package(LibXml2 QUIET)

weft_add_test(test_report LABELS unit report SOURCES report_util.c)
if(WEFT_JANSSON_LIB AND WEFT_JANSSON_INCLUDE)
  target_include_directories(test_report PRIVATE ${WEFT_JANSSON_INCLUDE})
  target_link_libraries(test_report PRIVATE ${WEFT_JANSSON_LIB})
  target_compile_definitions(test_report PRIVATE WEFT_TEST_JANSSON=1)
else()
  message(STATUS "weft: jansson not found; test_report skips its JSON checks")
endif()
if(LibXml2_FOUND)
  target_link_libraries(test_report PRIVATE LibXml2::LibXml2)
  target_compile_definitions(test_report PRIVATE WEFT_TEST_LIBXML2=1)
else()
  message(STATUS "weft: libxml2 not found; test_report skips its SVG checks")
endif()
target_link_libraries(test_report PRIVATE m)

# The timeline rendered in headless Chromium and decoded with libpng (skips without Chromium).
find_package(PNG QUIET)
if(PNG_FOUND)
  weft_add_test(test_report_render LABELS report render TIMEOUT 300)
  target_link_libraries(test_report_render PRIVATE PNG::PNG)
else()
  message(STATUS "weft: libpng not found; test_report_render is not built")
endif()

# What `weft run` reports (--json stats, --trace, --timeline, the summary), end to end.
if(TARGET weft_cli AND WEFT_JANSSON_LIB AND WEFT_JANSSON_INCLUDE)
  weft_add_test(test_report_cli LABELS report cli TIMEOUT 300 SOURCES cli_proc.c)
  target_include_directories(test_report_cli PRIVATE ${WEFT_JANSSON_INCLUDE})
  target_link_libraries(test_report_cli PRIVATE ${WEFT_JANSSON_LIB})
  target_compile_definitions(test_report_cli PRIVATE _GNU_SOURCE
    WEFT_CLI_PATH="$<TARGET_FILE:weft_cli>" WEFT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_dependencies(test_report_cli weft_cli)
endif()

# The accounting on the simulated machine (issue 6's backend), in virtual time.
weft_add_test(test_report_sim LABELS report sim SOURCES report_util.c)
target_link_libraries(test_report_sim PRIVATE m)
