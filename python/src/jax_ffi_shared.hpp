#pragma once
// What pmkit.jax's XLA FFI handlers share (jax_ffi.cpp, the mesh operations; jax_pme.cpp,
// PME): errors, shapes under vmap's batch axes, attributes, cache keys.
#include <cstdint>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace pmkit::python::jax_ffi {

namespace ffi = xla::ffi;

inline ffi::Error invalid(const std::string& message) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, message);
}

inline std::string shape_text(ffi::Span<const std::int64_t> dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

inline std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t p = 1;
  for (auto e : shape) p *= e;
  return p;
}

template <class T>
void append_bytes(std::string& key, const T* data, std::size_t count) {
  key.append(reinterpret_cast<const char*>(data), count * sizeof(T));
}

// A buffer's batch axes against the result's: the element offset of each batch entry
// (0 along an axis of extent 1, which broadcasts).
inline std::vector<std::int64_t> batch_offsets(ffi::Span<const std::int64_t> dims,
                                               ffi::Span<const std::int64_t> batch, std::int64_t entry_size) {
  const std::size_t k = batch.size();
  std::int64_t entries = 1;
  for (std::size_t j = 0; j < k; ++j) entries *= batch[j];
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(entries), 0);
  for (std::int64_t b = 0; b < entries; ++b) {
    std::int64_t rest = b, stride = entry_size, offset = 0;
    for (std::size_t j = k; j-- > 0;) {
      const std::int64_t index = rest % batch[j];
      rest /= batch[j];
      if (dims[j] != 1) offset += index * stride;
      stride *= dims[j];
    }
    offsets[static_cast<std::size_t>(b)] = offset;
  }
  return offsets;
}

// The shape a buffer has past its batch axes, checked against the one it must have.
inline ffi::Error check_tail(const char* name, ffi::Span<const std::int64_t> dims, std::size_t k,
                             const std::vector<std::int64_t>& tail, ffi::Span<const std::int64_t> batch) {
  bool ok = dims.size() == k + tail.size();
  for (std::size_t j = 0; ok && j < k; ++j) ok = dims[j] == 1 || dims[j] == batch[j];
  for (std::size_t j = 0; ok && j < tail.size(); ++j) ok = dims[k + j] == tail[j];
  if (ok) return ffi::Error::Success();
  return invalid(std::string("pmkit.jax: ") + name + " has shape " + shape_text(dims) + "; expected " +
                 std::to_string(k) + " batch axes (extent 1 or the result's) then " +
                 shape_text(ffi::Span<const std::int64_t>(tail.data(), tail.size())));
}

// One attribute into `into`; the first missing or mistyped one is kept in `error`.
template <class T>
void take(const ffi::Dictionary& attrs, const char* name, T& into, ffi::Error& error) {
  auto value = attrs.get<T>(name);
  if (value.has_value()) {
    into = *value;
  } else if (error.success()) {
    error = invalid(std::string("pmkit.jax: attribute ") + name + ": " + value.error().message());
  }
}

}  // namespace pmkit::python::jax_ffi
