#pragma once
// Non-owning array views. A View is a pointer, a length and a stride (in elements),
// so a component of an array of structures (x0 y0 z0 x1 ...) is a View with stride 3.
// Views never allocate or copy; which memory (host or device) they point to is the
// backend's contract (see Options).
#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "pmkit/config.hpp"

namespace pmkit {

template <class T>
struct View {
  T* data = nullptr;
  std::size_t size = 0;
  std::ptrdiff_t stride = 1;

  View() = default;
  View(T* d, std::size_t n, std::ptrdiff_t s = 1) : data(d), size(n), stride(s) {}
  // From a std::vector (const vectors only give views of const elements).
  template <class U, class A,
            class = std::enable_if_t<std::is_convertible<U*, T*>::value>>
  View(std::vector<U, A>& v) : data(v.data()), size(v.size()) {}  // NOLINT: implicit by design
  template <class U, class A,
            class = std::enable_if_t<std::is_convertible<const U*, T*>::value>>
  View(const std::vector<U, A>& v) : data(v.data()), size(v.size()) {}  // NOLINT
  // A view of const elements from a view of mutable ones.
  template <class U, class = std::enable_if_t<std::is_convertible<U*, T*>::value &&
                                              !std::is_same<U, T>::value>>
  View(const View<U>& o) : data(o.data), size(o.size), stride(o.stride) {}  // NOLINT

  PMKIT_HD T& operator[](std::size_t i) const {
    return data[static_cast<std::ptrdiff_t>(i) * stride];
  }
};

// A read-only list of items, made from a braced list or a std::vector, valid for the
// duration of the call it is passed to: plan.spread({q}, {rho}).
template <class T>
class Span {
 public:
  Span() = default;
  // The braced list lives until the end of the full expression that contains the call,
  // which is as long as a Span passed to a pmkit function is used.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  Span(std::initializer_list<T> list) : data_(list.begin()), size_(list.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  Span(const std::vector<T>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT
  Span(const T* data, std::size_t size) : data_(data), size_(size) {}
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  const T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace pmkit
