# tests/sim.cmake — the simulated machine (issue 6): profiles, virtual devices and the
# scheduling properties checked in virtual time on the shipped profiles. No GPU needed.
weft_add_test(test_sim LABELS unit sim SOURCES oracle_gen.c TIMEOUT 900)
