// CUDA white box: device arrays where the matrix does not reach. Gradients beyond L2
// and after update_points on a caller's stream against a float64 reference of their own;
// host memory passed where device memory is expected; a mesh larger than the device.
#include "pmkit/detail/layout.hpp"
#include "cuda/plan/peak_weight.hpp"
#include "cuda/tuning/method_choice.hpp"
#include "cuda_cases.hpp"

namespace pmkit::test {
namespace {

// ---------------------------------------------------------------------------------
// interp_gradient and spread_gradient on device arrays.

// The gradient and its adjoint in float64 from the closed-form kernels
// (reference::weight, reference::weight_derivative), node by node where the layout
// stores it: a folded ghost reads and receives at its mirror, a kept one at its own
// place. The linear kernel's derivative is the one from above (r + 1e-12, where it is
// constant): the backends' pieces hold s in [0, 1), so at its kinks (the nodes) they take
// the right-hand slope. The other kernels' derivatives are continuous: taken at r.
template <int D>
class GradientReference {
 public:
  GradientReference(const Grid<D>& grid, const Kernel& kernel, const std::array<std::vector<double>, D>& pos)
      : layout_(detail::make_layout(grid, kernel.ghost_width())), kernel_(kernel), pos_(pos) {}

  // gradients[d][p]: component d at particle p.
  std::array<std::vector<double>, D> interp(const std::vector<double>& mesh) const {
    std::array<std::vector<double>, D> g;
    for (auto& c : g) c.assign(pos_[0].size(), 0.0);
    for (std::size_t p = 0; p < pos_[0].size(); ++p)
      each_node(p, [&](std::int64_t node, const double (&grad)[D]) {
        for (int d = 0; d < D; ++d) g[d][p] += grad[d] * mesh[static_cast<std::size_t>(node)];
      });
    return g;
  }
  std::vector<double> spread(const std::array<std::vector<double>, D>& v) const {
    std::vector<double> mesh(static_cast<std::size_t>(layout_.size), 0.0);
    for (std::size_t p = 0; p < pos_[0].size(); ++p)
      each_node(p, [&](std::int64_t node, const double (&grad)[D]) {
        for (int d = 0; d < D; ++d) mesh[static_cast<std::size_t>(node)] += v[d][p] * grad[d];
      });
    return mesh;
  }

 private:
  template <class F>
  void each_node(std::size_t p, F&& f) const {
    const int S = kernel_.support();
    const double from_above = kernel_ == Kernel::linear() ? 1e-12 : 0.0;
    double w[D][Kernel::kMaxSupport], dw[D][Kernel::kMaxSupport];
    std::int64_t index[D][Kernel::kMaxSupport];
    for (int d = 0; d < D; ++d) {
      double u, s;
      int base;
      ASSERT_TRUE(layout_.axis[d].coordinate(pos_[d][p], u));
      kernels::locate(S, u, base, s);
      for (int k = 0; k < S; ++k) {
        const double r = u - (base + k);
        w[d][k] = reference::weight(kernel_, r);
        dw[d][k] = reference::weight_derivative(kernel_, r + from_above) / layout_.axis[d].spacing;
        index[d][k] = static_cast<std::int64_t>(layout_.axis[d].node(base + k)) * layout_.stride[d];
      }
    }
    int k[D] = {};
    for (;;) {
      std::int64_t node = 0;
      double grad[D];
      for (int d = 0; d < D; ++d) {
        node += index[d][k[d]];
        grad[d] = 1;
        for (int e = 0; e < D; ++e) grad[d] *= e == d ? dw[e][k[e]] : w[e][k[e]];
      }
      f(node, grad);
      int d = 0;
      while (d < D && ++k[d] == S) k[d++] = 0;
      if (d == D) return;
    }
  }
  detail::Layout<D> layout_;
  Kernel kernel_;
  const std::array<std::vector<double>, D>& pos_;
};

// One plan's particles on the device, the float64 reference on them, and the gradient
// calls of each form checked against it.
template <class T, int D>
struct GradientCase {
  Grid<D> grid;
  std::size_t n;
  Positions<T, D> pos;
  std::array<std::vector<double>, D> posd;
  std::vector<std::unique_ptr<DeviceBuffer<T>>> dpos;
  std::unique_ptr<Plan<T, D>> plan;
  cudaStream_t stream = nullptr;  // the plan's, where it has one: waited for before a read back

  GradientCase(const Grid<D>& g, const Kernel& kernel, Options opt, Distribution dist, std::size_t count,
               std::mt19937_64& rng)
      : grid(g), n(count), pos(make_positions<T, D>(g, dist, count, rng)) {
    plan.reset(new Plan<T, D>(grid, kernel, opt));
    typename Plan<T, D>::Positions views;
    for (int d = 0; d < D; ++d) {
      dpos.emplace_back(new DeviceBuffer<T>(pos[d]));
      views[d] = device_cview(*dpos.back());
    }
    plan->set_points(views);
    refresh_reference();
  }
  void refresh_reference() { posd = positions_as_double<T, D>(views_of<T, D>(pos)); }
  void wait() const {
    if (stream) {
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    }
  }
  // DeviceBuffer's uploads (cudaMemcpy from pageable memory may return before its copy
  // lands) complete before work on a non-blocking stream of the plan's reads them.
  void uploads_done() const {
    if (stream) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
  std::size_t mesh_size() const { return static_cast<std::size_t>(plan->mesh_size()); }
  GradientReference<D> reference() const { return GradientReference<D>(grid, plan->kernel(), posd); }
  std::string what() const {
    return plan->kernel().name() + ", " + std::to_string(D) + "D, n = " + std::to_string(n) + ", " +
           plan->spread_method_name();
  }
};

// interp_gradient into D arrays and into one interleaved array (the same values, bit for
// bit) against the reference; spread_gradient against it, then added onto itself; and
// the adjointness <spread_gradient(v), f> = <v, interp_gradient(f)> across the two.
template <class T, int D>
void check_gradients(GradientCase<T, D>& c, std::mt19937_64& rng, double tol) {
  SCOPED_TRACE(c.what());
  const std::size_t n = c.n, size = c.mesh_size();
  const GradientReference<D> ref = c.reference();
  const std::vector<T> field = random_values<T>(size, rng);
  const DeviceBuffer<T> dfield(field);
  std::vector<std::unique_ptr<DeviceBuffer<T>>> separate;
  std::vector<View<T>> separate_views, interleaved_views;
  DeviceBuffer<T> interleaved(D * n);
  for (int d = 0; d < D; ++d) {
    separate.emplace_back(new DeviceBuffer<T>(std::vector<T>(n, T(7))));
    separate_views.push_back(device_view(*separate.back()));
    interleaved_views.emplace_back(interleaved.get() + d, n, D);
  }
  c.uploads_done();
  c.plan->interp_gradient({device_cview(dfield)}, separate_views);
  c.plan->interp_gradient({device_cview(dfield)}, interleaved_views);
  c.wait();
  const auto want = ref.interp(std::vector<double>(field.begin(), field.end()));
  const std::vector<T> packed = interleaved.download();
  std::vector<std::vector<T>> got(D);
  for (int d = 0; d < D; ++d) {
    got[d] = separate[d]->download();
    EXPECT_LE(rel_l2<T>(View<const T>(got[d]), want[d]), tol) << "interp_gradient, component " << d;
    std::vector<T> strided(n);
    for (std::size_t p = 0; p < n; ++p) strided[p] = packed[p * D + d];
    EXPECT_TRUE(same_bytes(strided, got[d])) << "interleaved output differs from separate arrays, component " << d;
  }

  std::array<std::vector<double>, D> v;
  std::vector<std::unique_ptr<DeviceBuffer<T>>> dv;
  std::vector<View<const T>> v_views;
  for (int d = 0; d < D; ++d) {
    const std::vector<T> vd = random_values<T>(n, rng);
    v[d].assign(vd.begin(), vd.end());
    dv.emplace_back(new DeviceBuffer<T>(vd));
    v_views.push_back(device_cview(*dv.back()));
  }
  DeviceBuffer<T> dmesh(std::vector<T>(size, T(3)));
  c.uploads_done();
  c.plan->spread_gradient(v_views, {device_view(dmesh)});
  c.wait();
  const std::vector<double> mesh_want = ref.spread(v);
  const std::vector<T> mesh = dmesh.download();
  EXPECT_LE(rel_l2<T>(View<const T>(mesh), mesh_want), tol) << "spread_gradient";
  c.plan->spread_gradient(v_views, {device_view(dmesh)}, Accumulate::Add);
  c.wait();
  std::vector<double> twice(mesh_want);
  for (double& x : twice) x *= 2;
  EXPECT_LE(rel_l2<T>(View<const T>(dmesh.download()), twice), tol) << "spread_gradient, Accumulate::Add";

  double lhs = 0, rhs = 0, scale = 0;
  for (std::size_t i = 0; i < size; ++i) {
    lhs += static_cast<double>(mesh[i]) * field[i];
    scale += std::fabs(static_cast<double>(mesh[i]) * field[i]);
  }
  for (int d = 0; d < D; ++d)
    for (std::size_t p = 0; p < n; ++p) rhs += v[d][p] * static_cast<double>(got[d][p]);
  EXPECT_LE(std::fabs(lhs - rhs), tol * scale) << "adjointness: " << lhs << " against " << rhs;
}

// Outputs past L2 (interp writes binned slots, then unbin_kernel) and vectors moved to
// binned order by the tile spread: a sample of the particles against the reference.
TEST(Cuda, GradientsBeyondL2) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const std::size_t n = scaled(std::size_t(1) << 22);
  GradientCase<float, 3> c(make_grid<3>({64, 64, 64}, BoundaryKind::Periodic), Kernel::mp4(), cuda_options(),
                           Distribution::Uniform, n, rng);
  const std::vector<float> field = random_values<float>(c.mesh_size(), rng);
  const DeviceBuffer<float> dfield(field);
  DeviceBuffer<float> g(3 * n);
  c.plan->interp_gradient({device_cview(dfield)}, {View<float>(g.get(), n, 3), View<float>(g.get() + 1, n, 3),
                                                   View<float>(g.get() + 2, n, 3)});
  const std::vector<float> got = g.download();
  // The reference on every 61st particle.
  Positions<float, 3> sample;
  for (std::size_t p = 0; p < n; p += 61)
    for (int d = 0; d < 3; ++d) sample[d].push_back(c.pos[d][p]);
  const auto sampled = positions_as_double<float, 3>(views_of<float, 3>(sample));
  const auto want = GradientReference<3>(c.grid, c.plan->kernel(), sampled)
                        .interp(std::vector<double>(field.begin(), field.end()));
  for (int d = 0; d < 3; ++d) {
    std::vector<float> mine;
    for (std::size_t p = 0; p < n; p += 61) mine.push_back(got[p * 3 + d]);
    EXPECT_LE(rel_l2<float>(View<const float>(mine), want[d]), 4 * tolerance<float>()) << "component " << d;
  }
  // spread_gradient of every particle against the reference on all of them.
  std::array<std::vector<double>, 3> v;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dv;
  for (int d = 0; d < 3; ++d) {
    const std::vector<float> vd = random_values<float>(n, rng);
    v[d].assign(vd.begin(), vd.end());
    dv.emplace_back(new DeviceBuffer<float>(vd));
  }
  DeviceBuffer<float> mesh(c.mesh_size());
  c.plan->spread_gradient({device_cview(*dv[0]), device_cview(*dv[1]), device_cview(*dv[2])}, {device_view(mesh)});
  EXPECT_LE(rel_l2<float>(View<const float>(mesh.download()), c.reference().spread(v)), 4 * tolerance<float>());
}

// After update_points the particles that left their tiles (the away list) are
// included, on a stream of the caller's that other work waits on.
TEST(Cuda, GradientsAfterUpdatePointsOnAStream) {
  PMKIT_REQUIRE_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Stream stream;
  for (SpreadMethod method : {SpreadMethod::Auto, SpreadMethod::CudaGlobalAtomics}) {
    Options opt = cuda_options();
    opt.stream = cuda::stream_handle(stream.s);
    opt.max_away_fraction = 0.2;
    opt.spread_method = method;
    GradientCase<float, 3> c(make_grid<3>({20, 24, 18}, BoundaryKind::Periodic), Kernel::mp4(), opt,
                             Distribution::Uniform, scaled(20 * 24 * 18 * 6), rng);
    c.stream = stream.s;
    std::uniform_real_distribution<double> step(-0.3, 0.3);
    typename Plan<float, 3>::Positions moved;
    for (int d = 0; d < 3; ++d) {
      for (auto& x : c.pos[d]) {
        const double len = box_length(c.grid, d);
        double u = x + step(rng) * c.grid.spacing[d];
        u = u < c.grid.origin[d] ? u + len : u >= c.grid.origin[d] + len ? u - len : u;
        x = static_cast<float>(u);
      }
      c.dpos[d]->upload(c.pos[d]);
      moved[d] = device_cview(*c.dpos[d]);
    }
    c.plan->update_points(moved);
    c.refresh_reference();
    EXPECT_GT(c.plan->num_away(), 0u) << "no particle left its tile: the away path is not tested";
    check_gradients(c, rng, 4 * tolerance<float>());
  }
}

// Host memory where device memory is expected: a clear error before anything is written.
TEST(Cuda, GradientErrorsFromHostPointers) {
  PMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  GradientCase<float, 3> c(make_grid<3>({8, 8, 8}, BoundaryKind::Periodic), Kernel::mp4(), cuda_options(),
                           Distribution::Uniform, 1000, rng);
  const DeviceBuffer<float> field(random_values<float>(c.mesh_size(), rng));
  DeviceBuffer<float> gx(std::vector<float>(c.n, 5.0f)), gy(std::vector<float>(c.n, 5.0f));
  std::vector<float> host(c.n, 5.0f);
  expect_pmkit_error(ErrorCode::InvalidArgument, "gradients",
                     [&] { c.plan->interp_gradient({device_cview(field)}, {device_view(gx), device_view(gy), View<float>(host)}); },
                     "interp_gradient into a host array");
  EXPECT_EQ(gx.download(), std::vector<float>(c.n, 5.0f));
  EXPECT_EQ(host, std::vector<float>(c.n, 5.0f));
  DeviceBuffer<float> mesh(std::vector<float>(c.mesh_size(), 5.0f));
  const DeviceBuffer<float> v(std::vector<float>(c.n, 1.0f));
  expect_pmkit_error(ErrorCode::InvalidArgument, "vectors",
                     [&] { c.plan->spread_gradient({device_cview(v), device_cview(v), View<const float>(host)}, {device_view(mesh)}); },
                     "spread_gradient from a host array");
  EXPECT_EQ(mesh.download(), std::vector<float>(c.mesh_size(), 5.0f));
}

// Host memory where device memory is expected: a clear error, nothing written. (Bad
// positions in device memory: ErrorTest on the CudaDevice variant.)
TEST(Cuda, HostMeshWhereDeviceMemoryIsExpected) {
  PMKIT_REQUIRE_GPU();
  Plan<float, 3> plan(Grid<3>::bounded({8, 8, 8}), Kernel::mp4(), cuda_options());
  std::vector<float> x(100, 1.5f), y(100, 2.0f), z(100, 3.0f);
  DeviceBuffer<float> dx(x), dy(y), dz(z);
  plan.set_points({device_cview(dx), device_cview(dy), device_cview(dz)});
  const DeviceBuffer<float> dq(std::vector<float>(100, 1.0f));
  std::vector<float> host_mesh(static_cast<std::size_t>(plan.mesh_size()), 3.0f);
  EXPECT_THROW(plan.spread({device_cview(dq)}, {View<float>(host_mesh)}), Error);
  EXPECT_TRUE(std::all_of(host_mesh.begin(), host_mesh.end(), [](float v) { return v == 3.0f; }));
}

// A mesh larger than the device: refused at plan creation, naming the size.
TEST(Cuda, MeshLargerThanTheDeviceIsRefused) {
  PMKIT_REQUIRE_GPU();
  try {
    Plan<double, 3> huge(Grid<3>::periodic({4000, 4000, 4000}), Kernel::linear(), cuda_options());
    ADD_FAILURE() << "no error for a 4000^3 double mesh";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::OutOfMemory || e.code() == ErrorCode::Unsupported) << e.what();
  }
}

}  // namespace
}  // namespace pmkit::test
