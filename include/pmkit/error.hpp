#pragma once
// pmkit::Error: the one exception type of the library. Every message names the
// argument and the rejected value; code() gives a stable number for any
// C boundary or binding built on top.
#include <sstream>
#include <stdexcept>
#include <string>

namespace pmkit {

// Stable numbers: never renumber, only append.
enum class ErrorCode : int {
  Ok = 0,
  InvalidArgument = 1,   // a value out of its range (cells, spacing, order, ...)
  SizeMismatch = 2,      // array lengths that do not agree
  NonFinitePosition = 3, // NaN or inf in a particle position
  OutOfBounds = 4,       // particle outside a bounded grid
  NotReady = 5,          // plan used before set_points
  OutOfMemory = 6,       // an allocation that could not be served
  Unsupported = 7,       // valid request this build or device cannot do
  Device = 8,            // an error reported by the GPU runtime
};

const char* to_string(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error("pmkit: " + message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

namespace detail {
// Builds a message from streamable pieces: fail(ErrorCode::X, "cells[", d, "] = ", n, ...).
template <class... Parts>
[[noreturn]] void fail(ErrorCode code, const Parts&... parts) {
  std::ostringstream os;
  os.precision(17);
  (os << ... << parts);
  throw Error(code, os.str());
}
}  // namespace detail

}  // namespace pmkit
