#pragma once
// Python arrays as pmkit views, without copies.
//
// An argument of a binding is a Python list of arrays (the Python layer wraps a single
// array); each array is imported through DLPack, the buffer protocol or, failing both,
// __cuda_array_interface__, and cut into the views the plan takes by its shape:
//  - particle arrays: (N,) is one field, (F, N) F fields;
//  - component arrays: (N,) is one component, (N, K) K components (positions, gradients,
//    pair outputs: one particle's components side by side), (F, N, K) F groups of K;
//  - mesh arrays: the plan's mesh shape in C order (the last axis is x) is one field, a
//    leading axis F fields; each field contiguous.
// Strides pass through as the views' strides, so a strided array costs no copy; what a
// view cannot express, or a wrong dtype or memory, is a TypeError or ValueError naming
// the argument.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <complex>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "pmkit/view.hpp"

namespace pmkit::python {

namespace nb = nanobind;

// The memory a plan's views point to: host memory, or the device memory of one GPU.
struct Placement {
  bool device = false;
  int device_id = 0;
};

enum class Layout { Particles, Components, Mesh };

using Array = nb::ndarray<nb::ro>;

// "what" for the only array of an argument, "what[i]" for one of several.
std::string element_name(const char* what, std::size_t i, std::size_t count);

// Imports an array without copying and checks its dtype and memory. `dtype` is the
// element type the plan takes; `writable` asks for an array pmkit may write.
Array import_array(nb::handle object, const std::string& name, nb::dlpack::dtype dtype, const char* dtype_name,
                   bool writable, const Placement& where);

// Checks an array's shape for the layout and returns where each of its views starts
// (in elements from its data), their length and stride.
struct Cut {
  std::vector<std::int64_t> offsets;
  std::size_t size = 0;
  std::int64_t stride = 1;
};
Cut cut_array(const Array& array, const std::string& name, Layout layout, const std::vector<std::int64_t>& mesh_shape);

template <class T>
constexpr const char* dtype_name() {
  if constexpr (std::is_same<T, float>::value) return "float32";
  if constexpr (std::is_same<T, double>::value) return "float64";
  if constexpr (std::is_same<T, std::complex<float>>::value) return "complex64";
  if constexpr (std::is_same<T, std::complex<double>>::value) return "complex128";
  return "uint32";
}

// One argument's views, with the imported arrays that keep their memory alive for the
// call. E is the element type of the views: T for outputs, const T for inputs.
template <class E>
class Views {
  using T = std::remove_const_t<E>;

 public:
  Views(const nb::list& arrays, const char* what, Layout layout, const Placement& where,
        const std::vector<std::int64_t>& mesh_shape = {}) {
    const std::size_t count = arrays.size();
    arrays_.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      const std::string name = element_name(what, i, count);
      arrays_.push_back(import_array(arrays[i], name, nb::dtype<T>(), dtype_name<T>(), !std::is_const<E>::value, where));
      const Cut cut = cut_array(arrays_.back(), name, layout, mesh_shape);
      E* data = static_cast<E*>(const_cast<void*>(static_cast<const void*>(arrays_.back().data())));
      for (std::int64_t offset : cut.offsets) views_.emplace_back(data + offset, cut.size, cut.stride);
    }
  }
  Span<View<E>> span() const { return Span<View<E>>(views_.data(), views_.size()); }
  std::size_t size() const { return views_.size(); }
  const View<E>& operator[](std::size_t i) const { return views_[i]; }

 private:
  std::vector<Array> arrays_;
  std::vector<View<E>> views_;
};

// A ValueError unless `have` views make `want`; `what` names the argument, `unit` what
// one view is ("fields", "components").
void require_count(const char* what, std::size_t have, std::size_t want, const char* unit, const char* because);

}  // namespace pmkit::python
