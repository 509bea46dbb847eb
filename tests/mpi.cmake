# tests/mpi.cmake — the MPI transport's tests, each run under mpirun with 2, 3 and 4 ranks
# (oversubscribed: the CI machine has 2 cores). Where weft is built without MPI, none.
# Under AddressSanitizer their leak check is off: Open MPI keeps allocations to the end of the
# process and unloads the components that made them, so LeakSanitizer can neither attribute
# nor suppress them (weft's own code is leak-checked by every other test). Under
# ThreadSanitizer, mpi_tsan.supp silences Open MPI's internal synchronisation, which it cannot
# see in an uninstrumented library.
if(WEFT_HAVE_MPI AND MPIEXEC_EXECUTABLE)
  weft_add_test(test_mpi LABELS unit mpi)
  target_link_libraries(test_mpi PRIVATE MPI::MPI_C ${WEFT_JANSSON_LIB}) # a message of its own; the trace read back
  target_include_directories(test_mpi PRIVATE ${WEFT_JANSSON_INCLUDE})
  # The differential oracle across ranks: test_oracle.c with every input on a random rank.
  weft_add_test(test_mpi_oracle LABELS unit mpi SOURCES oracle_gen.c)
  set_tests_properties(test_mpi test_mpi_oracle PROPERTIES DISABLED TRUE) # run through the rank counts below
  foreach(n 2 3 4)
    add_test(NAME test_mpi_${n} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} --oversubscribe
      --allow-run-as-root --mca btl self,vader $<TARGET_FILE:test_mpi>)
    add_test(NAME test_mpi_oracle_${n} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} --oversubscribe
      --allow-run-as-root --mca btl self,vader $<TARGET_FILE:test_mpi_oracle>)
    set_tests_properties(test_mpi_${n} test_mpi_oracle_${n} PROPERTIES TIMEOUT 600 LABELS "unit;mpi"
      ENVIRONMENT "CMOCKA_MESSAGE_OUTPUT=STDOUT;WEFT_ORACLE_PROGRAMS=200;ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1;TSAN_OPTIONS=halt_on_error=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/mpi_tsan.supp")
  endforeach()
  # The command as users run it: examples/mpi/distributed.weft on 2 ranks against one process.
  add_test(NAME test_mpi_run COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi_run.sh ${MPIEXEC_EXECUTABLE} 2
    $<TARGET_FILE:weft_cli> ${CMAKE_CURRENT_SOURCE_DIR}/../examples/mpi/distributed.weft)
  # The distributed tiled Cholesky on 2 x 1 and 2 x 2 ranks, against one process.
  add_test(NAME test_mpi_cholesky_2 COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi_run.sh ${MPIEXEC_EXECUTABLE} 2
    $<TARGET_FILE:weft_cli> ${CMAKE_CURRENT_SOURCE_DIR}/../examples/mpi/cholesky.weft -D N=300 -D B=64)
  add_test(NAME test_mpi_cholesky_4 COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi_run.sh ${MPIEXEC_EXECUTABLE} 4
    $<TARGET_FILE:weft_cli> ${CMAKE_CURRENT_SOURCE_DIR}/../examples/mpi/cholesky.weft -D N=300 -D B=64 -D Q=2)
  # A program on auto, placed across 3 ranks, against one process.
  add_test(NAME test_mpi_auto_cholesky_3 COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi_run.sh ${MPIEXEC_EXECUTABLE} 3
    $<TARGET_FILE:weft_cli> ${CMAKE_CURRENT_SOURCE_DIR}/../examples/cholesky.weft -D N=300 -D B=64)
  # The same with rank 2 told it is alone on its host: the ranks still place alike.
  add_test(NAME test_mpi_auto_uneven_hosts COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi_run.sh ${MPIEXEC_EXECUTABLE} 3
    ${CMAKE_CURRENT_SOURCE_DIR}/uneven_hosts.sh ${CMAKE_CURRENT_SOURCE_DIR}/../examples/cholesky.weft -D N=1024 -D B=128)
  set_tests_properties(test_mpi_auto_uneven_hosts PROPERTIES TIMEOUT 300 LABELS "cli;mpi"
    ENVIRONMENT "WEFT_BIN=$<TARGET_FILE:weft_cli>;ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1;TSAN_OPTIONS=halt_on_error=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/mpi_tsan.supp")
  # A rank that dies mid-run ends the job, named, within a bounded time.
  add_executable(mpi_rank_dies mpi_rank_dies.c)
  target_link_libraries(mpi_rank_dies PRIVATE weft_static weft_warnings weft_sanitize)
  add_test(NAME test_mpi_rank_dies COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi_dies.sh ${MPIEXEC_EXECUTABLE}
    $<TARGET_FILE:mpi_rank_dies>)
  set_tests_properties(test_mpi_rank_dies PROPERTIES TIMEOUT 120 LABELS "unit;mpi"
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1;TSAN_OPTIONS=halt_on_error=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/mpi_tsan.supp")
  set_tests_properties(test_mpi_run test_mpi_cholesky_2 test_mpi_cholesky_4 test_mpi_auto_cholesky_3 PROPERTIES TIMEOUT 300 LABELS "cli;mpi"
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1;TSAN_OPTIONS=halt_on_error=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/mpi_tsan.supp")
endif()
