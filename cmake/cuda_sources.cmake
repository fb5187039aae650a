# The CUDA backend's sources, longest compile first (the order in which a target's
# objects start; docs/history/build-time.md). The mesh plan is one translation unit per
# precision and dimension (backend_<T>_<D>d.cu), the 3D ones split further by phase
# (backend_<T>_3d_spread.cu, _interp.cu; src/cuda/plan/instantiate.cuh), so that the cores
# compile it in parallel and no unit takes more than a fraction of the whole.
set(PMKIT_CUDA_SOURCES
  src/cuda/backend_double_3d_spread.cu
  src/cuda/backend_float_3d_spread.cu
  src/cuda/backend_double_3d_interp.cu
  src/cuda/backend_float_3d_interp.cu
  src/cuda/backend_double_2d.cu
  src/cuda/backend_float_2d.cu
  src/cuda/backend_double_3d.cu
  src/cuda/backend_float_3d.cu
  src/cuda/pairs/builtin_float.cu
  src/cuda/pairs/cells.cu
  src/cuda/pairs/builtin_double.cu
  src/cuda/pairs/backend.cu
  src/cuda/fft.cu
  src/cuda/pme.cu
  src/cuda/particles.cu)
