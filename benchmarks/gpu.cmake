# benchmarks/gpu.cmake — the GPU benchmarks (bench_gpu_*.c), built where the CUDA backend is.
# benchmarks/run_gpu.sh runs them beside benchmarks/torch_reference.py and prints one table.
if(WEFT_HAVE_CUDA)
  foreach(b overlap multi_gpu small_ops dispatch sync_logging gemm_rate memory costs)
    add_executable(bench_gpu_${b} bench_gpu_${b}.c)
    target_link_libraries(bench_gpu_${b} PRIVATE weft_static weft_warnings)
  endforeach()
endif()
if(WEFT_HAVE_CUDA)
  # The CUDA and cuBLAS calls behind a node, timed without weft.
  add_executable(bench_cuda_calls bench_cuda_calls.c)
  target_link_libraries(bench_cuda_calls PRIVATE CUDA::cudart_static CUDA::cublas CUDA::cublasLt CUDA::cuda_driver Threads::Threads weft_warnings)
endif()
