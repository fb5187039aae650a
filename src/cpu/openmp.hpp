#pragma once
#include "pmkit/detail/openmp.hpp"

namespace pmkit::cpu {
inline int default_threads() { return detail::openmp_threads(); }
inline int thread_id() { return detail::openmp_thread_id(); }
}  // namespace pmkit::cpu
