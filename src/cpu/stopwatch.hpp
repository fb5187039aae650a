#pragma once
// The CPU backends' per-call timing: a Stopwatch writes the wall time from its
// construction to its destruction into a plan's last_timings() field, on every way out of
// the call, an exception included.
#include <chrono>

namespace pmkit::detail {

struct Stopwatch {
  double& seconds;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~Stopwatch() { seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

}  // namespace pmkit::detail
