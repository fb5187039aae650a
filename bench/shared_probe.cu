// What the spread tile kernel's shared-memory work costs alone on this GPU: 2^24
// particles, 1024 a block of 256 threads, each adding 64 values (M'4 in 3D: 4 x 4 rows of
// 4 nodes, compile-time offsets in an 11^3 window of 32-bit words) with the native
// shared integer add, or reading them (interp), or neither (the same arithmetic into a
// register). The question: is the tile kernel's time without its flush the rate of its
// 2^30 shared atomics?
//
// Origins: "distinct banks" gives the 32 lanes of a warp 32 different banks (what the
// interleaved order gives); "random" draws each particle's first node anywhere it fits.
//
//   shared_probe [--log2n K]
#include <cuda_runtime.h>

#include "bench/cuda_check.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using pmkit::bench::ck;
using pmkit::bench::probe_median_ms;

constexpr int kWidth = 11, kNodes = kWidth * kWidth * kWidth, kThreads = 256, kPerThread = 4;
constexpr int kLastOrigin = kNodes - 1 - 3 * (kWidth * kWidth + kWidth + 1);  // stencil stays inside

enum Mode { kAtomicAdd, kRead, kRegister };

__device__ std::uint32_t mix(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

template <Mode kMode, bool kDistinctBanks>
__global__ void __launch_bounds__(kThreads) probe(int* out) {
  __shared__ int window[kNodes];
  for (int k = threadIdx.x; k < kNodes; k += kThreads) window[k] = 0;
  __syncthreads();
  int sum = 0;
#pragma unroll 1
  for (int r = 0; r < kPerThread; ++r) {
    const std::uint32_t particle = (blockIdx.x * kPerThread + r) * kThreads + threadIdx.x;
    const std::uint32_t h = mix(particle);
    const int origin = kDistinctBanks ? static_cast<int>((threadIdx.x & 31) + 32 * (h % ((kLastOrigin - 31) / 32)))
                                      : static_cast<int>(h % (kLastOrigin + 1));
    const float q = static_cast<float>(h & 1023);
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int b = 0; b < 4; ++b)
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          const int node = origin + (c * kWidth + b) * kWidth + a;
          const int v = __float2int_rn(q * static_cast<float>(a + 4 * b + 16 * c + 1));
          if constexpr (kMode == kAtomicAdd) atomicAdd(window + node, v);
          else if constexpr (kMode == kRead) sum += window[node] * v;
          else sum += v ^ node;
        }
  }
  __syncthreads();
  out[blockIdx.x * kThreads + threadIdx.x] = window[threadIdx.x] + sum;
}

}  // namespace

int main(int argc, char** argv) {
  const int log2n = pmkit::bench::probe_log2n(argc, argv, "shared_probe");
  const std::uint32_t n = 1u << log2n;
  const unsigned blocks = n / (kThreads * kPerThread);
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "device");
  int clock_khz = 0;
  ck(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "clock");
  int* out = nullptr;
  ck(cudaMalloc(&out, std::size_t(blocks) * kThreads * sizeof(int)), "malloc");
  pmkit::cuda::EventTimer timer;
  // Warp instructions of the 64-node loop an SM issues per cycle at the SM's max clock.
  const double warp_ops = double(n) * 64 / 32;
  auto per_cycle = [&](double ms) { return warp_ops / prop.multiProcessorCount / (ms * 1e-3 * clock_khz * 1e3); };
  std::printf("%s, %d SMs at up to %.0f MHz; 2^%d particles x 64 nodes, %u blocks of %d threads\n", prop.name,
              prop.multiProcessorCount, clock_khz * 1e-3, log2n, blocks, kThreads);
  std::printf("%-34s %10s %22s\n", "operation", "ms", "warp ops / SM / cycle");
  auto row = [&](const char* what, double ms) { std::printf("%-34s %10.3f %22.2f\n", what, ms, per_cycle(ms)); };
  row("shared atomicAdd, distinct banks", probe_median_ms(timer, [&] { probe<kAtomicAdd, true><<<blocks, kThreads>>>(out); }));
  row("shared atomicAdd, random origins", probe_median_ms(timer, [&] { probe<kAtomicAdd, false><<<blocks, kThreads>>>(out); }));
  row("shared read, distinct banks", probe_median_ms(timer, [&] { probe<kRead, true><<<blocks, kThreads>>>(out); }));
  row("shared read, random origins", probe_median_ms(timer, [&] { probe<kRead, false><<<blocks, kThreads>>>(out); }));
  row("registers only", probe_median_ms(timer, [&] { probe<kRegister, true><<<blocks, kThreads>>>(out); }));
  cudaFree(out);
  return 0;
}
