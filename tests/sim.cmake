# tests/sim.cmake — the simulated machine (issue 6): profiles, virtual devices and the
# scheduling properties checked in virtual time on the shipped profiles. No GPU needed.
weft_add_test(test_sim LABELS unit sim SOURCES oracle_gen.c TIMEOUT 900)
# test_calibrate_roundtrip runs the calibration tool (src/tools/calibrate) on a simulated machine.
target_link_libraries(test_sim PRIVATE weft_calibrate_tool)
