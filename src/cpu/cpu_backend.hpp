#pragma once
// The OpenMP backend. set_points bins (binning.hpp); spread walks slabs of planes in
// two colours, so each mesh node is written by one thread at a time and no atomics are
// needed; interp is a parallel gather over the sorted particles.
#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <vector>

#include "core/backend.hpp"
#include "core/checks.hpp"
#include "core/layout.hpp"
#include "core/stencil.hpp"
#include "cpu/binning.hpp"
#include "cpu/counting_sort.hpp"
#include "cpu/openmp.hpp"
#include "pmkit/error.hpp"

namespace pmkit::cpu {

using detail::fail;

// Properties handled together per pass over the stencil (weights computed once per group).
constexpr int kPropGroup = 4;

template <class T, int D>
class CpuBackend final : public detail::Backend<T, D> {
 public:
  CpuBackend(const Grid<D>& grid, const Kernel& kernel, const Options& options)
      : layout_(detail::make_layout(grid, kernel.ghost_width())),
        kernel_(kernel),
        threads_(options.num_threads > 0 ? options.num_threads : default_threads()),
        method_(options.spread_method) {
    if (method_ != SpreadMethod::Auto && method_ != SpreadMethod::CpuSlabs && method_ != SpreadMethod::CpuPrivateMeshes)
      fail(ErrorCode::Unsupported, "options.spread_method: the CPU backend has CpuSlabs and CpuPrivateMeshes");
  }

  void set_points(std::size_t n, const std::array<View<const T>, D>& positions) override {
    // The spread method for these points, with its memory, is decided first and
    // committed only with the binning, so a failed call changes nothing.
    std::vector<T> private_meshes;
    const bool use_private = choose_private_meshes(n, private_meshes);
    try {
      kernels::dispatch(kernel_, [&](auto k) { bin<decltype(k)>(n, positions); });
    } catch (const std::bad_alloc&) {
      fail(ErrorCode::OutOfMemory, "set_points: could not allocate the binning of ", n,
           " particles (about ", n * (4 + D * (4 + sizeof(T))) * 2 / 1048576.0, " MiB)");
    }
    private_meshes_ = use_private;
    if (!use_private)
      std::vector<T>().swap(private_);
    else if (!private_meshes.empty())
      private_.swap(private_meshes);
  }

  void spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) override {
    kernels::dispatch(kernel_, [&](auto k) {
      if (private_meshes_)
        spread_private<decltype(k)>(props, meshes, mode);
      else
        spread_slabs<decltype(k)>(props, meshes, mode);
    });
  }

  void interp(Span<View<const T>> meshes, Span<View<T>> values) override {
    kernels::dispatch(kernel_, [&](auto k) { gather<decltype(k)>(meshes, values); });
  }

  std::string spread_method_name() const override { return private_meshes_ ? "cpu-private-meshes" : "cpu-slabs"; }

  void binned_order(View<std::uint32_t> order) const override {
    for (std::size_t k = 0; k < current_.n; ++k) order[k] = current_.perm[k];
  }

  void binned_positions(const std::array<View<T>, D>& offsets) const override {
    const int support = kernel_.support();
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(current_.n); ++k)
      for (int d = 0; d < D; ++d)
        offsets[d][k] = static_cast<T>(
            layout_.axis[d].offset(kernels::unlocate(support, current_.base[d][k], current_.frac[d][k])));
  }

 private:
  // Row key of a particle: its home node (floor(u + shift), wrapped) in every
  // dimension but x; or only its plane when the row histogram would be too large.
  struct KeyGeometry {
    int dims[D];               // key extent per dimension (index 0 unused)
    std::size_t keys;          // number of distinct keys
    std::size_t keys_per_plane;
    bool rows;
  };

  KeyGeometry key_geometry() const {
    KeyGeometry g{};
    g.keys = 1;
    for (int d = 1; d < D; ++d) {
      const detail::Axis& a = layout_.axis[d];
      g.dims[d] = a.kind == detail::AxisKind::Periodic ? a.cells : a.cells + 1;
      g.keys *= g.dims[d];
    }
    // One histogram per thread: keep them within a few tens of MB.
    g.rows = g.keys * threads_ <= (std::size_t(1) << 23);
    g.keys_per_plane = g.rows ? g.keys / g.dims[D - 1] : 1;
    if (!g.rows) g.keys = g.dims[D - 1];
    return g;
  }

  template <class K>
  void bin(std::size_t n, const std::array<View<const T>, D>& positions) {
    constexpr double shift = (K::support % 2 == 1) ? 0.5 : 0.0;
    const detail::Layout<D> L = layout_;
    const KeyGeometry kg = key_geometry();
    const int nt = threads_;
    auto home = [&](const double* u, int d) {
      int f = static_cast<int>(std::floor(u[d] + shift));
      if (L.axis[d].kind == detail::AxisKind::Periodic && f >= L.axis[d].cells) f -= L.axis[d].cells;
      return f;
    };
    auto key_of_u = [&](const double* u) -> std::uint32_t {
      if (!kg.rows) return static_cast<std::uint32_t>(home(u, D - 1));
      std::size_t key = 0;
      for (int d = D - 1; d >= 1; --d) key = key * kg.dims[d] + home(u, d);
      return static_cast<std::uint32_t>(key);
    };
    Binning<T, D>& B = spare_;
    B.resize(n);
    // Validate and key each particle; scatter it into the spare binning, which becomes
    // current only when complete. The sort is stable, so the order is reproducible.
    auto key_of = [&](std::size_t i, std::uint32_t& key) {
      double u[D];
      bool ok = true;
      for (int d = 0; d < D; ++d) ok = L.axis[d].coordinate(positions[d][i], u[d]) && ok;
      if (ok) key = key_of_u(u);
      return ok;
    };
    auto place = [&](std::size_t i, std::uint32_t dst) {
      double u[D];
      for (int d = 0; d < D; ++d) L.axis[d].coordinate(positions[d][i], u[d]);
      int base[D];
      T s[D];
      detail::locate_particle<K, D>(u, base, s);
      B.perm[dst] = static_cast<std::uint32_t>(i);
      for (int d = 0; d < D; ++d) {
        B.base[d][dst] = base[d];
        B.frac[d][dst] = s[d];
      }
    };
    std::vector<std::uint32_t> key_start;
    const std::size_t bad = counting_sort(n, kg.keys, nt, key_of, place, keys_, counts_, &key_start);
    if (bad < n) {
      double x[D];
      for (int d = 0; d < D; ++d) x[d] = positions[d][bad];
      detail::reject_particle<D>(L, x, bad);
    }
    const int planes = static_cast<int>(kg.rows ? kg.keys / kg.keys_per_plane : kg.keys);
    std::vector<std::size_t> plane_start(planes + 1);
    for (int p = 0; p < planes; ++p) plane_start[p] = key_start[p * kg.keys_per_plane];
    plane_start[planes] = n;
    // Chunks at least S-1 planes wide keep same-colour chunks off each other's planes;
    // at least 2, as a folding bounded axis maps node cells+1 of the linear kernel onto
    // cells-1, outside a one-plane chunk that holds plane cells.
    B.chunk_begin = balanced_slabs(plane_start, std::max(K::support - 1, 2), 4 * nt);
    std::swap(current_, spare_);
  }

  template <class K>
  void spread_slabs(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) {
    const Binning<T, D>& B = current_;
    const detail::Layout<D> L = layout_;
    const int nprops = static_cast<int>(props.size());
    const int chunks = static_cast<int>(B.num_chunks());
    const std::int64_t size = L.size;
#pragma omp parallel num_threads(threads_)
    {
      if (mode == Accumulate::Overwrite) {
        for (int j = 0; j < nprops; ++j) {
          T* m = meshes[j].data;
#pragma omp for schedule(static)
          for (std::int64_t i = 0; i < size; ++i) m[i] = T(0);
        }
      }
      for (int colour = 0; colour < 2; ++colour) {
#pragma omp for schedule(dynamic, 1)
        for (int c = colour; c < chunks; c += 2)
          for (std::size_t i = B.chunk_begin[c]; i < B.chunk_begin[c + 1]; ++i)
            deposit<K>(L, B, i, props, meshes, nprops);
      }
    }
  }

  // Auto: private meshes when zeroing and summing one mesh per thread costs little next
  // to the deposits (threads x mesh nodes <= 4 x particles) and fits in 2 GiB; slabs
  // otherwise. From pmkit bench on 16 cores (bench/results/2026-11-22-h100-3e20446.txt):
  // private 2.0x faster at 8 particles per cell (threads x mesh = 2n), slabs 1.3-1.6x
  // faster at 1 per cell (16n). Allocated in set_points, never in spread.
  // Returns whether to use private meshes; allocates them into `meshes` unless the
  // current ones have the right size.
  bool choose_private_meshes(std::size_t n, std::vector<T>& meshes) const {
    const double copies = static_cast<double>(threads_) * static_cast<double>(layout_.size);
    const bool fits = copies * sizeof(T) <= 2.0 * (1 << 30);
    bool wanted = method_ == SpreadMethod::CpuPrivateMeshes ||
                  (method_ == SpreadMethod::Auto && threads_ > 1 && fits && copies <= 4.0 * n);
    if (!wanted) return false;
    if (private_.size() == static_cast<std::size_t>(copies)) return true;  // reuse the current ones
    try {
      meshes.resize(static_cast<std::size_t>(copies));
    } catch (const std::bad_alloc&) {
      if (method_ == SpreadMethod::CpuPrivateMeshes)
        fail(ErrorCode::OutOfMemory, "CpuPrivateMeshes: ", threads_, " private meshes need ", copies * sizeof(T),
             " bytes");
      return false;  // Auto falls back to slabs
    }
    return true;
  }

  // One property at a time: each thread deposits a static share of the sorted particles
  // into its own mesh, then every node sums the copies in thread order (deterministic).
  template <class K>
  void spread_private(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) {
    const Binning<T, D>& B = current_;
    const detail::Layout<D> L = layout_;
    const std::int64_t size = L.size;
    const int nt = threads_;
    for (std::size_t j = 0; j < props.size(); ++j) {
#pragma omp parallel num_threads(nt)
      {
        const int t = thread_id();
        View<T> mine(private_.data() + static_cast<std::size_t>(t) * size, static_cast<std::size_t>(size));
        std::fill(mine.data, mine.data + size, T(0));
        const Span<View<const T>> prop(&props[j], 1);
        const Span<View<T>> target(&mine, 1);
        for (std::size_t i = B.n * t / nt; i < B.n * (t + 1) / nt; ++i) deposit<K>(L, B, i, prop, target, 1);
#pragma omp barrier
        T* out = meshes[j].data;
#pragma omp for schedule(static)
        for (std::int64_t i = 0; i < size; ++i) {
          T sum = mode == Accumulate::Overwrite ? T(0) : out[i];
          for (int u = 0; u < nt; ++u) sum += private_[static_cast<std::size_t>(u) * size + i];
          out[i] = sum;
        }
      }
    }
  }

  template <class K>
  static void deposit(const detail::Layout<D>& L, const Binning<T, D>& B, std::size_t i,
                      const Span<View<const T>>& props, const Span<View<T>>& meshes, int nprops) {
    int base[D];
    T s[D];
    B.load(i, base, s);
    const std::size_t p = B.perm[i];
    if (nprops == 1) {
      const T q = props[0][p];
      T* m = meshes[0].data;
      detail::for_each_node<K, D>(L, base, s, [&](std::int64_t idx, T w) { m[idx] += q * w; });
      return;
    }
    for (int g = 0; g < nprops; g += kPropGroup) {
      const int count = std::min(kPropGroup, nprops - g);
      T q[kPropGroup];
      T* m[kPropGroup];
      for (int j = 0; j < count; ++j) {
        q[j] = props[g + j][p];
        m[j] = meshes[g + j].data;
      }
      detail::for_each_node<K, D>(L, base, s, [&](std::int64_t idx, T w) {
        for (int j = 0; j < count; ++j) m[j][idx] += q[j] * w;
      });
    }
  }

  template <class K>
  void gather(Span<View<const T>> meshes, Span<View<T>> values) {
    const Binning<T, D>& B = current_;
    const detail::Layout<D> L = layout_;
    const int nprops = static_cast<int>(meshes.size());
    const std::int64_t n = static_cast<std::int64_t>(B.n);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      int base[D];
      T s[D];
      B.load(static_cast<std::size_t>(i), base, s);
      const std::size_t p = B.perm[i];
      for (int g = 0; g < nprops; g += kPropGroup) {
        const int count = std::min(kPropGroup, nprops - g);
        T acc[kPropGroup] = {};
        const T* m[kPropGroup];
        for (int j = 0; j < count; ++j) m[j] = meshes[g + j].data;
        detail::for_each_node<K, D>(L, base, s, [&](std::int64_t idx, T w) {
          for (int j = 0; j < count; ++j) acc[j] += w * m[j][idx];
        });
        for (int j = 0; j < count; ++j) values[g + j][p] = acc[j];
      }
    }
  }

  detail::Layout<D> layout_;
  Kernel kernel_;
  int threads_;
  Binning<T, D> current_, spare_;
  std::vector<std::uint32_t> keys_;    // scratch of set_points
  std::vector<std::uint32_t> counts_;  // per-thread key histograms
  SpreadMethod method_;                // as asked: Auto, CpuSlabs or CpuPrivateMeshes
  bool private_meshes_ = false;        // resolved at set_points: private meshes or slabs
  std::vector<T> private_;             // CpuPrivateMeshes: one mesh per thread
};

}  // namespace pmkit::cpu

#define PMKIT_INSTANTIATE_CPU_BACKEND(T)                                                    \
  namespace pmkit::detail {                                                                 \
  template <>                                                                               \
  std::unique_ptr<Backend<T, 2>> make_cpu_backend<T, 2>(const Grid<2>& g, const Kernel& k,  \
                                                        const Options& o) {                 \
    return std::make_unique<cpu::CpuBackend<T, 2>>(g, k, o);                                \
  }                                                                                         \
  template <>                                                                               \
  std::unique_ptr<Backend<T, 3>> make_cpu_backend<T, 3>(const Grid<3>& g, const Kernel& k,  \
                                                        const Options& o) {                 \
    return std::make_unique<cpu::CpuBackend<T, 3>>(g, k, o);                                \
  }                                                                                         \
  }
