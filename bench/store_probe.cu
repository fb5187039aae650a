// What scattered stores cost on this GPU, as set_points' scatter makes them: 2^24
// particles, each sent to a random one of F buckets ("write fronts"), in the order of its
// index, so that each bucket's slots fill front to back as the kernel sweeps the
// particles. Timed for several F: a 16-byte record (as Packed<float>), a 4-byte index (as
// perm), both, and, for comparison, the random 4-byte gather (as interp's unbin) and a
// coalesced copy. The question it answers (docs/tuning.md#kpartitionthreads): does a
// scatter get cheap when its open fronts fit in L2, and how few fronts must that be?
//
//   store_probe [--log2n K]
#include <cuda_runtime.h>

#include "bench/cuda_check.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

using pmkit::bench::ck;
using pmkit::bench::probe_median_ms;

__global__ void store_records(const std::uint32_t* __restrict__ dst, std::uint32_t n, float4* __restrict__ records) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) records[dst[i]] = make_float4(float(i), 1.f, 2.f, __uint_as_float(i));
}

__global__ void store_indices(const std::uint32_t* __restrict__ dst, std::uint32_t n, std::uint32_t* __restrict__ perm) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) perm[dst[i]] = i;
}

__global__ void store_both(const std::uint32_t* __restrict__ dst, std::uint32_t n, float4* __restrict__ records,
                           std::uint32_t* __restrict__ perm) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t d = dst[i];
  records[d] = make_float4(float(i), 1.f, 2.f, __uint_as_float(i));
  perm[d] = i;
}

__global__ void gather_indices(const std::uint32_t* __restrict__ dst, std::uint32_t n,
                               const std::uint32_t* __restrict__ from, std::uint32_t* __restrict__ out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = from[dst[i]];
}

__global__ void copy_records(const float4* __restrict__ in, std::uint32_t n, float4* __restrict__ out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}


// dst[i]: particle i's slot when each particle goes to a uniformly random one of
// `fronts` buckets and takes the next free slot of it in index order.
std::vector<std::uint32_t> bucket_slots(std::uint32_t n, std::uint32_t fronts, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::uint32_t> pick(0, fronts - 1);
  std::vector<std::uint32_t> bucket(n), next(fronts + 1, 0), dst(n);
  for (std::uint32_t i = 0; i < n; ++i) ++next[(bucket[i] = pick(rng)) + 1];
  for (std::uint32_t b = 0; b < fronts; ++b) next[b + 1] += next[b];
  for (std::uint32_t i = 0; i < n; ++i) dst[i] = next[bucket[i]]++;
  return dst;
}

}  // namespace

int main(int argc, char** argv) {
  const int log2n = pmkit::bench::probe_log2n(argc, argv, "store_probe");
  const std::uint32_t n = 1u << log2n;
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "device");
  std::uint32_t *dst = nullptr, *perm = nullptr, *out = nullptr;
  float4 *records = nullptr, *copy = nullptr;
  ck(cudaMalloc(&dst, n * sizeof(std::uint32_t)), "malloc");
  ck(cudaMalloc(&perm, n * sizeof(std::uint32_t)), "malloc");
  ck(cudaMalloc(&out, n * sizeof(std::uint32_t)), "malloc");
  ck(cudaMalloc(&records, n * sizeof(float4)), "malloc");
  ck(cudaMalloc(&copy, n * sizeof(float4)), "malloc");
  ck(cudaMemset(records, 0, n * sizeof(float4)), "memset");
  const unsigned blocks = (n + 255) / 256;
  pmkit::cuda::EventTimer timer;
  const double copy_ms = probe_median_ms(timer, [&] { copy_records<<<blocks, 256>>>(records, n, copy); });
  std::printf("%s, L2 %d MB; 2^%d particles; coalesced 16-byte copy %.3f ms (%.0f GB/s read+write)\n", prop.name,
              prop.l2CacheSize >> 20, log2n, copy_ms, 2.0 * n * sizeof(float4) / copy_ms * 1e-6);
  std::printf("stores in bucket order within random buckets (as set_points' scatter); ms, and GB/s of the bytes "
              "stored (gather: read)\n");
  std::printf("%10s %12s | %10s %8s | %10s %8s | %10s %8s | %10s %8s\n", "fronts", "front bytes", "16-B store",
              "GB/s", "4-B store", "GB/s", "both", "GB/s", "4-B gather", "GB/s");
  std::mt19937_64 rng(7);
  for (std::uint32_t fronts : {1u << 9, 1u << 12, 1u << 14, 1u << 15, 1u << 16, 1u << 17, 1u << 18, 1u << 20, n}) {
    if (fronts > n) continue;
    const std::vector<std::uint32_t> host = fronts == n ? [&] {
      std::vector<std::uint32_t> p(n);
      for (std::uint32_t i = 0; i < n; ++i) p[i] = i;
      std::shuffle(p.begin(), p.end(), rng);
      return p;
    }() : bucket_slots(n, fronts, rng);
    ck(cudaMemcpy(dst, host.data(), n * sizeof(std::uint32_t), cudaMemcpyHostToDevice), "upload");
    const double rec = probe_median_ms(timer, [&] { store_records<<<blocks, 256>>>(dst, n, records); });
    const double idx = probe_median_ms(timer, [&] { store_indices<<<blocks, 256>>>(dst, n, perm); });
    const double both = probe_median_ms(timer, [&] { store_both<<<blocks, 256>>>(dst, n, records, perm); });
    const double gather = probe_median_ms(timer, [&] { gather_indices<<<blocks, 256>>>(dst, n, perm, out); });
    const double gb = double(n) * 1e-6;
    std::printf("%10u %9.1f MB | %10.3f %8.0f | %10.3f %8.0f | %10.3f %8.0f | %10.3f %8.0f\n", fronts,
                fronts * 128.0 / (1 << 20), rec, 16 * gb / rec, idx, 4 * gb / idx, both, 20 * gb / both, gather,
                4 * gb / gather);
  }
  cudaFree(dst);
  cudaFree(perm);
  cudaFree(out);
  cudaFree(records);
  cudaFree(copy);
  return 0;
}
