#pragma once
// Benchmark programs stop at the first CUDA error, naming the call; the probes time by
// pmkit's one event timer.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "cuda/runtime.hpp"

namespace pmkit::bench {
inline void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median milliseconds of f() over reps calls, each timed by CUDA events on the default
// stream, after `warm` untimed calls (the event timer makes the last of them): the PME
// benchmarks' timing.
template <class F>
double median_ms(F&& f, int reps, int warm = 3) {
  for (int i = 1; i < warm; ++i) f();
  cuda::EventTimer timer;
  return 1e3 * timer.median_seconds(nullptr, reps, f);
}

// The hardware probes' timing (store_probe, shared_probe): the median of 7 launches
// after one untimed, in ms, by the one event timer.
template <class F>
double probe_median_ms(cuda::EventTimer& timer, F&& launch) {
  const double seconds = timer.median_seconds(nullptr, 7, launch);
  ck(cudaGetLastError(), "launch");
  return seconds * 1e3;
}

// Milliseconds a call of `call` in loops of `reps` calls queued back to back on
// `stream` between two events (the median of 5 loops), after `warm_up` untimed calls.
inline double loop_ms(cudaStream_t stream, int reps, const std::function<void()>& call, int warm_up = 1) {
  cuda::EventTimer timer;
  std::vector<double> t;
  for (int w = 0; w < warm_up; ++w) call();
  ck(cudaStreamSynchronize(stream), "warm-up");
  for (int k = 0; k < 5; ++k) {
    timer.start(stream);
    for (int r = 0; r < reps; ++r) call();
    timer.stop(stream);
    t.push_back(1e3 * timer.seconds() / reps);
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

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
