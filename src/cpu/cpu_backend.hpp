#pragma once
// Over 600 lines: one class whose spread, interp and split share its binning's private members.
// The OpenMP backend. set_points bins (binning.hpp); spread walks slabs of planes in
// two colours, so each mesh node is written by one thread at a time and no atomics are
// needed, or gives each thread a private mesh; interp is a parallel gather over the
// sorted particles. A spread sums in the accumulator type A (double for float meshes
// too), so a node's error does not grow with the number of particles that reach it.
// spread and spread_gradient differ only in what a particle adds at a node (a Deposit
// policy), interp and interp_gradient only in what a particle sums (a Gather policy):
// each pair shares one slab, private-mesh or gather loop.
#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include "core/backend.hpp"
#include "core/checks.hpp"
#include "pmkit/detail/layout.hpp"
#include "core/split.hpp"
#include "pmkit/detail/stencil.hpp"
#include "cpu/binning.hpp"
#include "cpu/counting_sort.hpp"
#include "cpu/openmp.hpp"
#include "cpu/stopwatch.hpp"
#include "pmkit/error.hpp"

namespace pmkit::cpu {

using detail::fail;
using detail::Stopwatch;

// Properties per pass over the stencil: weights computed once per group, against the
// registers and CpuSlabs windows a group holds (docs/tuning.md#mesh-plan-cpu).
constexpr int kPropGroup = 4;

// A: the type a spread sums in. A = T adds each contribution straight to the mesh:
// double plans do, and float ones only as `pmkit bench`'s baseline for the cost of
// summing in double.
template <class T, int D, class A = double>
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
    const Stopwatch stopwatch{compute_s_};
    // The spread method for these points, with its memory, is decided first and
    // committed only with the binning, so a failed call changes nothing.
    std::vector<A> private_meshes;
    const bool use_private = choose_private_meshes(n, private_meshes);
    try {
      kernels::dispatch(kernel_, [&](auto k) { bin<decltype(k)>(n, positions); });
    } catch (const std::bad_alloc&) {
      fail(ErrorCode::OutOfMemory, "set_points: could not allocate the binning of ", n,
           " particles (about ", n * (4 + D * (4 + sizeof(T))) * 2 / 1048576.0, " MiB)");
    }
    private_meshes_ = use_private;
    if (!use_private)
      std::vector<A>().swap(private_);
    else if (!private_meshes.empty())
      private_.swap(private_meshes);
  }

  void spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode) override {
    const Stopwatch stopwatch{compute_s_};
    spread_with(ValueDeposit{}, props, meshes, mode);
  }

  void interp(Span<View<const T>> meshes, Span<View<T>> values) override {
    const Stopwatch stopwatch{compute_s_};
    gather_with(ValueGather{}, meshes, values);
  }

  void interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients) override {
    const Stopwatch stopwatch{compute_s_};
    gather_with(GradientGather(layout_), meshes, gradients);
  }

  void spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes, Accumulate mode) override {
    const Stopwatch stopwatch{compute_s_};
    spread_with(GradientDeposit(layout_), vectors, meshes, mode);
  }

  // The split is made with every binning: a flag per particle and the parts of each
  // chunk, one pass over the particles.
  bool set_interior(const detail::NodeBox<D>& interior) override {
    interior_ = interior;
    split_ = true;
    kernels::dispatch(kernel_, [&](auto k) { mark_parts<decltype(k)>(current_); });
    return true;
  }
  void select(detail::Part part) override { part_ = part; }

  Timings last_timings() const override { return {0.0, compute_s_}; }
  std::string spread_method_name() const override { return private_meshes_ ? "cpu-private-meshes" : "cpu-slabs"; }

  void binned_order(View<std::uint32_t> order) const override {
    for (std::size_t k = 0; k < current_.n; ++k) order[k] = current_.perm[k];
  }

  // The stable sort of positions already in binned order leaves them in place: the
  // permutation becomes the identity; stencils and slabs stay.
  void adopt_binned_order() override {
    const auto n = static_cast<std::int64_t>(current_.n);
    std::uint32_t* perm = current_.perm.data();
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads_)
#endif
    for (std::int64_t k = 0; k < n; ++k) perm[k] = static_cast<std::uint32_t>(k);
  }

  void permute_to_binned(Span<View<const T>> from, Span<View<T>> to) override {
    const auto n = static_cast<std::int64_t>(current_.n);
    std::vector<T> moved;  // the in-place arrays' scratch
    try {
      for (std::size_t i = 0; i < to.size(); ++i)
        if (from[i].data == to[i].data) moved.resize(current_.n);  // before any write
    } catch (const std::bad_alloc&) {
      fail(ErrorCode::OutOfMemory, "permute_to_binned: could not allocate ", current_.n, " values of scratch");
    }
    const std::uint32_t* perm = current_.perm.data();
    for (std::size_t i = 0; i < to.size(); ++i) {
      const View<const T> in = from[i];
      const View<T> out = to[i];
      if (in.data != out.data) {
#pragma omp parallel for num_threads(threads_) schedule(static)
        for (std::int64_t k = 0; k < n; ++k) out[k] = in[perm[k]];
        continue;
      }
#pragma omp parallel num_threads(threads_)
      {
#pragma omp for schedule(static)
        for (std::int64_t k = 0; k < n; ++k) moved[k] = in[perm[k]];
#pragma omp for schedule(static)
        for (std::int64_t k = 0; k < n; ++k) out[k] = moved[k];
      }
    }
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
  // Deposit policies: what a particle adds to meshes m[0..count) at the nodes L maps its
  // stencil (base, s) to, from its values in inputs[kInputs * j + c][p] for mesh j. The
  // weights and products are computed in the meshes' type M (T, or the accumulators A).

  // spread: each mesh receives its property's value times the node weights.
  struct ValueDeposit {
    static constexpr int kInputs = 1;
    static constexpr const char* kName = "spread";

    template <class K, class M>
    void add(const detail::Layout<D>& L, const int (&base)[D], const T (&s)[D], const View<const T>* props,
             std::size_t p, M* const (&m)[kPropGroup], int count) const {
      M sm[D];
      for (int d = 0; d < D; ++d) sm[d] = static_cast<M>(s[d]);
      if (count == 1) {
        const M q = static_cast<M>(props[0][p]);
        M* m0 = m[0];
        detail::for_each_node<K, D>(L, base, sm, [&](std::int64_t idx, M w) { m0[idx] += q * w; });
        return;
      }
      M q[kPropGroup];
      for (int j = 0; j < count; ++j) q[j] = static_cast<M>(props[j][p]);
      detail::for_each_node<K, D>(L, base, sm, [&](std::int64_t idx, M w) {
        for (int j = 0; j < count; ++j) m[j][idx] += q[j] * w;
      });
    }
  };

  // spread_gradient: each mesh receives sum_d v_d dW/dx_d from its particle's D-vector v
  // (the weights' derivatives with respect to the grid coordinate, divided by the
  // spacing: v_d / h_d is formed once per particle).
  struct GradientDeposit {
    static constexpr int kInputs = D;
    static constexpr const char* kName = "spread_gradient";
    double spacing[D];

    explicit GradientDeposit(const detail::Layout<D>& L) {
      for (int d = 0; d < D; ++d) spacing[d] = L.axis[d].spacing;
    }

    template <class K, class M>
    void add(const detail::Layout<D>& L, const int (&base)[D], const T (&s)[D], const View<const T>* vectors,
             std::size_t p, M* const (&m)[kPropGroup], int count) const {
      M sm[D];
      for (int d = 0; d < D; ++d) sm[d] = static_cast<M>(s[d]);
      M v[kPropGroup][D];
      for (int j = 0; j < count; ++j)
        for (int d = 0; d < D; ++d) v[j][d] = static_cast<M>(vectors[D * j + d][p]) / static_cast<M>(spacing[d]);
      detail::for_each_node_gradient<K, D>(L, base, sm, [&](std::int64_t idx, const M (&dw)[D]) {
        for (int j = 0; j < count; ++j) {
          M sum = v[j][0] * dw[0];
          for (int d = 1; d < D; ++d) sum += v[j][d] * dw[d];
          m[j][idx] += sum;
        }
      });
    }
  };

  // Gather policies: what a particle sums from meshes m[0..count) at its stencil's nodes
  // into acc[j][0..kOutputs), and the result written to output kOutputs * j + o.

  // interp: the weighted sum of each mesh.
  struct ValueGather {
    static constexpr int kOutputs = 1;

    template <class K>
    void add(const detail::Layout<D>& L, const int (&base)[D], const T (&s)[D], const T* const (&m)[kPropGroup],
             int count, T (&acc)[kPropGroup][kOutputs]) const {
      detail::for_each_node<K, D>(L, base, s, [&](std::int64_t idx, T w) {
        for (int j = 0; j < count; ++j) acc[j][0] += w * m[j][idx];
      });
    }
    T result(T sum, int) const { return sum; }
  };

  // interp_gradient: per mesh the D sums of the weights' derivatives times the mesh,
  // divided by the spacing of their axis.
  struct GradientGather {
    static constexpr int kOutputs = D;
    T spacing[D];

    explicit GradientGather(const detail::Layout<D>& L) {
      for (int d = 0; d < D; ++d) spacing[d] = static_cast<T>(L.axis[d].spacing);
    }

    template <class K>
    void add(const detail::Layout<D>& L, const int (&base)[D], const T (&s)[D], const T* const (&m)[kPropGroup],
             int count, T (&acc)[kPropGroup][kOutputs]) const {
      detail::for_each_node_gradient<K, D>(L, base, s, [&](std::int64_t idx, const T (&dw)[D]) {
        for (int j = 0; j < count; ++j) {
          const T f = m[j][idx];
          for (int d = 0; d < D; ++d) acc[j][d] += dw[d] * f;
        }
      });
    }
    T result(T sum, int d) const { return sum / spacing[d]; }
  };

  template <class Deposit>
  void spread_with(const Deposit& deposit, Span<View<const T>> inputs, Span<View<T>> meshes, Accumulate mode) {
    kernels::dispatch(kernel_, [&](auto k) {
      // Private meshes sum every thread's whole mesh once a call: the boundary part
      // takes every particle, so that the interior part costs nothing.
      if (private_meshes_ && part_ == detail::Part::Interior) return;
      if (private_meshes_)
        spread_private<decltype(k)>(deposit, inputs, meshes, mode);
      else
        spread_slabs<decltype(k)>(deposit, inputs, meshes, mode);
    });
  }

  template <class Gather>
  void gather_with(const Gather& reader, Span<View<const T>> meshes, Span<View<T>> outputs) {
    kernels::dispatch(kernel_, [&](auto k) { gather<decltype(k)>(reader, meshes, outputs); });
  }

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
    const std::size_t bad = counting_sort(n, kg.keys, nt, key_of, place, keys_, counts_, &key_start_);
    if (bad < n) {
      double x[D];
      for (int d = 0; d < D; ++d) x[d] = positions[d][bad];
      detail::reject_particle<D>(L, x, bad);
    }
    const int planes = static_cast<int>(kg.rows ? kg.keys / kg.keys_per_plane : kg.keys);
    std::vector<std::size_t> plane_start(planes + 1);
    for (int p = 0; p < planes; ++p) plane_start[p] = key_start_[p * kg.keys_per_plane];
    plane_start[planes] = n;
    // Chunks at least S-1 planes wide keep same-colour chunks off each other's planes;
    // at least 2, as a folding bounded axis maps node cells+1 of the linear kernel onto
    // cells-1, outside a one-plane chunk that holds plane cells.
    B.chunk_begin = balanced_slabs(plane_start, std::max(K::support - 1, 2), 4 * nt);
    B.window_planes = 0;
    for (std::size_t c = 0; c < B.num_chunks(); ++c)
      if (B.chunk_begin[c] < B.chunk_begin[c + 1])
        B.window_planes = std::max(B.window_planes, window_of<K>(B, static_cast<int>(c)).planes);
    if (split_) mark_parts<K>(B);
    std::swap(current_, spare_);
  }

  // Slabs: even chunks in parallel, then odd ones (binning.hpp); each mesh node is
  // written by one thread at a time. Mesh j takes inputs [kInputs j, kInputs (j + 1)).
  template <class K, class Deposit>
  void spread_slabs(const Deposit& deposit, Span<View<const T>> inputs, Span<View<T>> meshes, Accumulate mode) {
    const Binning<T, D>& B = current_;
    const detail::Layout<D> L = layout_;
    const int nprops = static_cast<int>(meshes.size());
    const int chunks = static_cast<int>(B.num_chunks());
    const std::int64_t size = L.size;
    const std::size_t window = window_nodes();
    const std::size_t per_thread = window * static_cast<std::size_t>(std::min(nprops, kPropGroup));
    reserve_scratch(Deposit::kName, per_thread * static_cast<std::size_t>(threads_));
#pragma omp parallel num_threads(threads_)
    {
      if (mode == Accumulate::Overwrite) {
        for (int j = 0; j < nprops; ++j) {
          T* m = meshes[j].data;
#pragma omp for schedule(static)
          for (std::int64_t i = 0; i < size; ++i) m[i] = T(0);
        }
      }
      A* mine = scratch_.data() + per_thread * static_cast<std::size_t>(thread_id());
      for (int colour = 0; colour < 2; ++colour) {
#pragma omp for schedule(dynamic, 1)
        for (int c = colour; c < chunks; c += 2)
          for (int g = 0; g < nprops && chunk_in_part(B, c); g += kPropGroup)
            spread_chunk<K>(deposit, L, B, c, &inputs[Deposit::kInputs * g], &meshes[g],
                            std::min(kPropGroup, nprops - g), window, mine);
      }
    }
  }

  // The planes of the last axis a chunk reaches: its particles' home planes run from
  // `first` to `last` (sorted), and a particle at home plane h reaches logical planes
  // h - (S-1)/2 ... h + S/2.
  struct Window {
    int first;   // home plane of the chunk's first particle
    int planes;  // logical planes reached: last - first + S
  };

  // Home plane of sorted particle i: the key plane set_points sorted it by.
  template <class K>
  int home_plane(const Binning<T, D>& B, std::size_t i) const {
    const detail::Axis& a = layout_.axis[D - 1];
    int h = B.base[D - 1][i] + (K::support - 1) / 2;
    if (a.kind == detail::AxisKind::Periodic && h >= a.cells) h -= a.cells;
    return h;
  }

  template <class K>
  Window window_of(const Binning<T, D>& B, int c) const {
    const int first = home_plane<K>(B, B.chunk_begin[c]);
    const int last = home_plane<K>(B, B.chunk_begin[c + 1] - 1);
    return {first, last - first + K::support};
  }

  // Nodes of the largest chunk window (0 when A is T: no windows).
  std::size_t window_nodes() const {
    if (std::is_same<A, T>::value) return 0;
    return static_cast<std::size_t>(current_.window_planes) * static_cast<std::size_t>(layout_.stride[D - 1]);
  }

  // Grows the accumulators of spread_slabs before any mesh is written, so that a failed
  // allocation leaves the caller's meshes as they were.
  void reserve_scratch(const char* operation, std::size_t count) {
    if (scratch_.size() >= count) return;
    try {
      scratch_.resize(count);
    } catch (const std::bad_alloc&) {
      fail(ErrorCode::OutOfMemory, operation, ": could not allocate ", count * sizeof(A), " bytes of accumulators");
    }
  }

  // Meshes meshes[0..count) of chunk c, from the particles' inputs (the deposit's
  // kInputs arrays per mesh). When A is T, each particle adds straight into the meshes. Otherwise it adds into `scratch`, count windows of `window` nodes that
  // cover the planes the chunk reaches, and each window node is added to the mesh once,
  // rounded to T once: the rounding error per node stays that of a few additions
  // however many particles reach the node.
  template <class K, class Deposit>
  void spread_chunk(const Deposit& deposit, const detail::Layout<D>& L, const Binning<T, D>& B, int c,
                    const View<const T>* inputs, const View<T>* meshes, int count, std::size_t window,
                    A* scratch) const {
    const std::size_t begin = B.chunk_begin[c], end = B.chunk_begin[c + 1];
    if (begin == end) return;
    if constexpr (std::is_same<A, T>::value) {
      T* m[kPropGroup];
      for (int j = 0; j < count; ++j) m[j] = meshes[j].data;
      for (std::size_t i = begin; i < end; ++i) {
        if (!takes(B, i)) continue;
        int base[D];
        T s[D];
        B.load(i, base, s);
        deposit.template add<K>(L, base, s, inputs, B.perm[i], m, count);
      }
    } else {
      // The window as a layout: the last axis keeps logical plane first - (S-1)/2 at
      // index 0, the others are the mesh's.
      const Window w = window_of<K>(B, c);
      const int lowest = w.first - (K::support - 1) / 2;
      detail::Layout<D> local = L;
      local.axis[D - 1].kind = detail::AxisKind::Keep;
      local.axis[D - 1].ghost = -lowest;
      const std::size_t nodes = static_cast<std::size_t>(w.planes) * static_cast<std::size_t>(L.stride[D - 1]);
      A* m[kPropGroup];
      for (int j = 0; j < count; ++j) {
        m[j] = scratch + static_cast<std::size_t>(j) * window;
        std::fill(m[j], m[j] + nodes, A(0));
      }
      for (std::size_t i = begin; i < end; ++i) {
        if (!takes(B, i)) continue;
        int base[D];
        T s[D];
        B.load(i, base, s);
        base[D - 1] = home_plane<K>(B, i) - (K::support - 1) / 2;  // unwrapped at a periodic seam
        deposit.template add<K>(local, base, s, inputs, B.perm[i], m, count);
      }
      const std::int64_t plane = L.stride[D - 1];
      for (int j = 0; j < count; ++j)
        for (int k = 0; k < w.planes; ++k) {
          T* out = meshes[j].data + L.axis[D - 1].node(lowest + k) * plane;
          const A* in = m[j] + k * plane;
          for (std::int64_t r = 0; r < plane; ++r) out[r] = static_cast<T>(static_cast<A>(out[r]) + in[r]);
        }
    }
  }

  // Auto: private meshes when zeroing and summing one mesh of accumulators per thread
  // costs little next to the deposits (threads x mesh nodes <= 4 x particles) and the
  // copies fit in 2 GiB; slabs otherwise (docs/tuning.md#mesh-plan-cpu). Allocated in
  // set_points, never in spread. Returns whether to use private meshes; allocates them
  // into `meshes` unless the current ones have the right size.
  bool choose_private_meshes(std::size_t n, std::vector<A>& meshes) const {
    const double copies = static_cast<double>(threads_) * static_cast<double>(layout_.size);
    const bool fits = copies * sizeof(A) <= 2.0 * (1 << 30);
    bool wanted = method_ == SpreadMethod::CpuPrivateMeshes ||
                  (method_ == SpreadMethod::Auto && threads_ > 1 && fits && copies <= 4.0 * n);
    if (!wanted) return false;
    if (private_.size() == static_cast<std::size_t>(copies)) return true;  // reuse the current ones
    try {
      meshes.resize(static_cast<std::size_t>(copies));
    } catch (const std::bad_alloc&) {
      if (method_ == SpreadMethod::CpuPrivateMeshes)
        fail(ErrorCode::OutOfMemory, "CpuPrivateMeshes: ", threads_, " private meshes need ", copies * sizeof(A),
             " bytes");
      return false;  // Auto falls back to slabs
    }
    return true;
  }

  // One mesh at a time: each thread deposits a static share of the sorted particles into
  // its own mesh of accumulators, then every node sums the copies in thread order
  // (deterministic) and is rounded to T once.
  template <class K, class Deposit>
  void spread_private(const Deposit& deposit, Span<View<const T>> inputs, Span<View<T>> meshes, Accumulate mode) {
    const Binning<T, D>& B = current_;
    const detail::Layout<D> L = layout_;
    const std::int64_t size = L.size;
    const int nt = threads_;
    for (std::size_t j = 0; j < meshes.size(); ++j) {
#pragma omp parallel num_threads(nt)
      {
        const int t = thread_id();
        A* mine[kPropGroup] = {private_.data() + static_cast<std::size_t>(t) * size};
        std::fill(mine[0], mine[0] + size, A(0));
        for (std::size_t i = B.n * t / nt; i < B.n * (t + 1) / nt; ++i) {
          int base[D];
          T s[D];
          B.load(i, base, s);
          deposit.template add<K>(L, base, s, &inputs[Deposit::kInputs * j], B.perm[i], mine, 1);
        }
#pragma omp barrier
        T* out = meshes[j].data;
#pragma omp for schedule(static)
        for (std::int64_t i = 0; i < size; ++i) {
          A sum = mode == Accumulate::Overwrite ? A(0) : static_cast<A>(out[i]);
          for (int u = 0; u < nt; ++u) sum += private_[static_cast<std::size_t>(u) * size + i];
          out[i] = static_cast<T>(sum);
        }
      }
    }
  }

  // A parallel gather over the sorted particles, kPropGroup meshes per stencil pass;
  // mesh j's results go to outputs [kOutputs j, kOutputs (j + 1)).
  template <class K, class Gather>
  void gather(const Gather& reader, Span<View<const T>> meshes, Span<View<T>> outputs) {
    constexpr int R = Gather::kOutputs;
    const Binning<T, D>& B = current_;
    const detail::Layout<D> L = layout_;
    const int nprops = static_cast<int>(meshes.size());
    const std::int64_t n = static_cast<std::int64_t>(B.n);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      if (!takes(B, static_cast<std::size_t>(i))) continue;
      int base[D];
      T s[D];
      B.load(static_cast<std::size_t>(i), base, s);
      const std::size_t p = B.perm[i];
      for (int g = 0; g < nprops; g += kPropGroup) {
        const int count = std::min(kPropGroup, nprops - g);
        T acc[kPropGroup][R] = {};
        const T* m[kPropGroup];
        for (int j = 0; j < count; ++j) m[j] = meshes[g + j].data;
        reader.template add<K>(L, base, s, m, count, acc);
        for (int j = 0; j < count; ++j)
          for (int o = 0; o < R; ++o) outputs[R * (g + j) + o][p] = reader.result(acc[j][o], o);
      }
    }
  }

  // Each particle's side of the interior box and each chunk's parts (Binning::inside).
  template <class K>
  void mark_parts(Binning<T, D>& B) const {
    const std::int64_t n = static_cast<std::int64_t>(B.n);
    B.inside.resize(B.n);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      int base[D];
      T s[D];
      B.load(static_cast<std::size_t>(i), base, s);
      B.inside[i] = detail::stencil_inside<D>(interior_, layout_, base, K::support) ? 1 : 0;
    }
    B.chunk_parts.assign(B.num_chunks(), 0);
    for (std::size_t c = 0; c < B.num_chunks(); ++c)
      for (std::size_t i = B.chunk_begin[c]; i < B.chunk_begin[c + 1] && B.chunk_parts[c] != 3; ++i)
        B.chunk_parts[c] |= B.inside[i] ? 2 : 1;
  }

  // Whether the selected part takes sorted particle i, or has a particle in chunk c.
  bool takes(const Binning<T, D>& B, std::size_t i) const {
    return detail::in_part(part_, B.inside.empty() || B.inside[i] != 0);
  }
  bool chunk_in_part(const Binning<T, D>& B, int c) const {
    if (part_ == detail::Part::All) return true;
    return (B.chunk_parts[c] & (part_ == detail::Part::Boundary ? 1 : 2)) != 0;
  }

  detail::Layout<D> layout_;
  Kernel kernel_;
  int threads_;
  double compute_s_ = 0;  // wall time of the last call (last_timings)
  Binning<T, D> current_, spare_;
  std::vector<std::uint32_t> keys_;    // scratch of set_points
  std::vector<std::uint32_t> counts_;  // per-thread key histograms
  std::vector<std::uint32_t> key_start_;  // each key's first sorted slot
  SpreadMethod method_;                // as asked: Auto, CpuSlabs or CpuPrivateMeshes
  bool private_meshes_ = false;        // resolved at set_points: private meshes or slabs
  std::vector<A> private_;             // CpuPrivateMeshes: one mesh per thread
  std::vector<A> scratch_;             // CpuSlabs with A != T: each thread's chunk windows
  bool split_ = false;                 // set_interior: each binning marks its parts
  detail::NodeBox<D> interior_{};
  detail::Part part_ = detail::Part::All;  // what spread and interp take (select)
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
