# CUDA backend sources, one translation unit per (precision, dimension) so that a
# 2-core machine compiles them in parallel and no unit grows too large.
target_sources(pmkit PRIVATE
  src/cuda/backend_float_2d.cu
  src/cuda/backend_float_3d.cu
  src/cuda/backend_double_2d.cu
  src/cuda/backend_double_3d.cu
  src/cuda/fft.cu
  src/cuda/pairs/backend.cu
  src/cuda/pairs/cells.cu
  src/cuda/pairs/builtin_float.cu
  src/cuda/pairs/builtin_double.cu
  src/cuda/pme.cu)
target_compile_definitions(pmkit PRIVATE PMKIT_WITH_CUDA)
target_compile_options(pmkit PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra>)
set_target_properties(pmkit PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
