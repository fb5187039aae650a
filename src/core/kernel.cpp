#include <algorithm>
#include <cctype>

#include "pmkit/error.hpp"
#include "pmkit/kernels.hpp"
#include "pmkit/version.hpp"

namespace pmkit {

Kernel Kernel::bspline(int order) {
  if (order < 2 || order > kMaxSupport)
    detail::fail(ErrorCode::InvalidArgument, "B-spline order = ", order,
                 ": supported orders are 2 to ", kMaxSupport);
  return Kernel(KernelFamily::BSpline, order);
}

Kernel Kernel::from_name(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "linear" || s == "cic") return linear();
  if (s == "tsc") return tsc();
  if (s == "mp4" || s == "m4'" || s == "m4p") return mp4();
  if (s.rfind("bspline", 0) == 0 && s.size() == 8 && std::isdigit(static_cast<unsigned char>(s[7])))
    return bspline(s[7] - '0');
  detail::fail(ErrorCode::InvalidArgument, "kernel name = '", name,
               "': expected linear, cic, tsc, mp4 or bspline2 .. bspline8");
}

std::string Kernel::name() const {
  if (family_ == KernelFamily::MP4) return "mp4";
  if (order_ == 2) return "linear";
  if (order_ == 3) return "tsc";
  return "bspline" + std::to_string(order_);
}

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::Ok: return "ok";
    case ErrorCode::InvalidArgument: return "invalid argument";
    case ErrorCode::SizeMismatch: return "size mismatch";
    case ErrorCode::NonFinitePosition: return "non-finite position";
    case ErrorCode::OutOfBounds: return "particle out of bounds";
    case ErrorCode::NotReady: return "plan not ready";
    case ErrorCode::OutOfMemory: return "out of memory";
    case ErrorCode::Unsupported: return "unsupported";
    case ErrorCode::Device: return "device error";
  }
  return "unknown";
}

bool built_with_cuda() noexcept {
#if defined(PMKIT_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

}  // namespace pmkit
