#pragma once
// Benchmark programs stop at the first CUDA error, naming the call.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace pmkit::bench {
inline void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// The hardware probes' timing (store_probe, shared_probe): the median of 7 launches
// after one untimed, in ms, by CUDA events.
struct ProbeTimer {
  cudaEvent_t a, b;
  ProbeTimer() {
    ck(cudaEventCreate(&a), "event");
    ck(cudaEventCreate(&b), "event");
  }
  template <class F>
  double median_ms(F&& launch) {
    launch();
    std::vector<float> t;
    for (int r = 0; r < 7; ++r) {
      ck(cudaEventRecord(a), "record");
      launch();
      ck(cudaEventRecord(b), "record");
      ck(cudaEventSynchronize(b), "sync");
      float ms = 0;
      ck(cudaEventElapsedTime(&ms, a, b), "elapsed");
      t.push_back(ms);
    }
    ck(cudaGetLastError(), "launch");
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

// The hardware probes' one option, --log2n K (2^K particles, default 24); exits with the
// usage on anything else.
inline int probe_log2n(int argc, char** argv, const char* program) {
  int log2n = 24;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--log2n") && i + 1 < argc) {
      log2n = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--log2n K]\n", program);
      std::exit(2);
    }
  }
  return log2n;
}
}  // namespace pmkit::bench
