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

// Full unrolling of the small stencil loops keeps the weight and index arrays in
// registers on the GPU (a run-time index would move them to local memory).
#if defined(__CUDA_ARCH__)
#define PMKIT_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define PMKIT_UNROLL  // host pass of a .cu file: host code there needs no unrolling
#elif defined(__GNUC__) && !defined(__clang__)
#define PMKIT_UNROLL _Pragma("GCC unroll 16")
#else
#define PMKIT_UNROLL
#endif
