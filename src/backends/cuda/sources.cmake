# src/backends/cuda — the CUDA backend, built where the toolkit is found (WEFT_HAVE_CUDA).
if(WEFT_HAVE_CUDA)
  list(APPEND WEFT_SOURCES
    src/backends/cuda/cuda_backend.c
    src/backends/cuda/cuda_plan.c
    src/backends/cuda/cuda_launch.c
    src/backends/cuda/cuda_complete.c
    src/backends/cuda/cuda_replay.c
    src/backends/cuda/cuda_timing.c
    src/backends/cuda/cuda_kernels.cu
  )
  # Kernels: optimised, no fused multiply-add contraction in the fills' explicit roundings
  # (they use __dmul_rn/__dadd_rn), and a resource report on demand (-Xptxas -v).
  set_source_files_properties(src/backends/cuda/cuda_kernels.cu PROPERTIES
    COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CUDA>:-O3;--expt-relaxed-constexpr>")
endif()
