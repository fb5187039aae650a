#pragma once
// What pmkit.jax's XLA FFI handlers share (jax_ffi.cpp, the mesh operations; jax_pme.cpp,
// PME): errors, shapes under vmap's batch axes, attributes, cache keys, the handlers'
// bindings.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>

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

// A binding completed with `count` buffers (one or more: a binding does not move).
template <int count, class Binding>
auto with_arguments(Binding&& binding) {
  static_assert(count >= 1, "with_arguments adds at least one buffer");
  if constexpr (count == 1) {
    return std::move(binding).template Arg<ffi::AnyBuffer>();
  } else {
    return with_arguments<count - 1>(std::move(binding).template Arg<ffi::AnyBuffer>());
  }
}

// What an operation's calls take: the attributes, `count` buffers, with `more` any
// further ones, then its results.
template <int count, bool more>
struct BufferBinding {
  template <class Binding>
  static auto bind(Binding&& binding) {
    auto arguments = with_arguments<count>(std::move(binding).template Attrs<ffi::Dictionary>());
    if constexpr (more) {
      return std::move(arguments).RemainingArgs().RemainingRets();
    } else {
      return std::move(arguments).RemainingRets();
    }
  }
};

// An operation's handlers: `cpu` and `cuda` its functions, Buffers::bind(binding) (a
// BufferBinding) the binding completed with its attributes and buffers. The CUDA function
// takes first the stream XLA gives, the device ordinal and XLA's scratch allocator.
template <class Buffers, auto cpu>
XLA_FFI_Error* cpu_handler(XLA_FFI_CallFrame* frame) {
  static auto* handler = Buffers::bind(ffi::Ffi::Bind()).To(cpu).release();
  return handler->Call(frame);
}

template <class Buffers, auto cuda>
XLA_FFI_Error* cuda_handler(XLA_FFI_CallFrame* frame) {
  static auto* handler =
      Buffers::bind(
          ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::DeviceOrdinal>().Ctx<ffi::ScratchAllocator>())
          .To(cuda)
          .release();
  return handler->Call(frame);
}

// (CPU handler, CUDA handler) as PyCapsules for jax.ffi.register_ffi_target.
template <class Buffers, auto cpu, auto cuda>
nanobind::tuple capsules() {
  return nanobind::make_tuple(nanobind::capsule(reinterpret_cast<void*>(&cpu_handler<Buffers, cpu>)),
                              nanobind::capsule(reinterpret_cast<void*>(&cuda_handler<Buffers, cuda>)));
}

}  // namespace pmkit::python::jax_ffi
