#pragma once
// Host/device annotations: the weight functors and index maps are shared by the
// CPU backend and CUDA kernels, so they are written once with these markers.
#if defined(__CUDACC__)
#define PMKIT_HD __host__ __device__
#define PMKIT_FORCEINLINE __forceinline__
#else
#define PMKIT_HD
#define PMKIT_FORCEINLINE inline __attribute__((always_inline))
#endif
