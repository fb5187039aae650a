#pragma once
// The one place where a plan's ExecutionOptions choose its backend: every plan's front
// end checks its execution options here and builds the CPU or the CUDA implementation of
// its backend interface. A build without the CUDA backend answers Backend::Cuda with
// ErrorCode::Unsupported; the CUDA factory is then never called (nor linked).
#include "pmkit/backend.hpp"
#include "pmkit/error.hpp"

namespace pmkit::detail {

// Rejects execution options no backend can take; `name` is how the caller calls the
// options struct in messages ("options", "PmeOptions").
inline void check_execution_options(const ExecutionOptions& options, const char* name) {
  if (options.backend != pmkit::Backend::Cpu && options.backend != pmkit::Backend::Cuda)
    fail(ErrorCode::InvalidArgument, name, ".backend = ", static_cast<int>(options.backend),
         ": use Backend::Cpu or Backend::Cuda");
  if (options.num_threads < 0)
    fail(ErrorCode::InvalidArgument, name, ".num_threads = ", options.num_threads,
         ": use 0 for the OpenMP default or a positive count");
  if (options.device < 0)
    fail(ErrorCode::InvalidArgument, name, ".device = ", options.device, ": a CUDA device ordinal, 0 or more");
}

// make_cpu() or make_cuda(), as options.backend asks, after check_execution_options.
template <class MakeCpu, class MakeCuda>
auto make_backend(const ExecutionOptions& options, const char* name, MakeCpu&& make_cpu, MakeCuda&& make_cuda)
    -> decltype(make_cpu()) {
  check_execution_options(options, name);
  if (options.backend == pmkit::Backend::Cpu) return make_cpu();
#if defined(PMKIT_WITH_CUDA)
  return make_cuda();
#else
  (void)make_cuda;
  fail(ErrorCode::Unsupported, name,
       ".backend = Cuda: this build of pmkit has no CUDA backend (configure with PMKIT_CUDA=ON and a CUDA "
       "compiler)");
#endif
}

}  // namespace pmkit::detail
