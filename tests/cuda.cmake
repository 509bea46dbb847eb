# tests/cuda.cmake — the CUDA backend's tests (label `gpu`). Each test skips itself (cmocka's
# skip()) where the runtime finds no GPU, and the program then exits 77, which CTest reports as
# "Skipped", so a CPU-only run passes honestly and says what it did not run.
set(WEFT_CUDA_TESTS test_cuda_backend test_cuda_memory test_cuda_replay test_cuda_oracle test_cuda_errors test_cuda_linalg
    test_cuda_timing)
foreach(t ${WEFT_CUDA_TESTS})
  set(extra gpu_test.c)
  if(t STREQUAL "test_cuda_timing")
    list(APPEND extra report_util.c)
  endif()
  if(t STREQUAL "test_cuda_errors" AND WEFT_HAVE_CUDA)
    list(APPEND extra cuda_fault.cu)
  endif()
  weft_add_test(${t} LABELS gpu SOURCES ${extra} TIMEOUT 900)
  set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77)
  if(t STREQUAL "test_cuda_errors" AND WEFT_HAVE_CUDA)
    target_compile_definitions(${t} PRIVATE WEFT_TEST_FAULT_KERNEL=1)
  endif()
endforeach()
