// Bad input: every rejected call throws pmkit::Error with the right code and a message
// that names the argument, and leaves the caller's arrays and the plan as they were.
// Also the valid corner cases next to them (zero particles, zero properties).
#include "matrix_plan.hpp"
#include "test_support.hpp"

namespace pmkit::test {
namespace {

constexpr double kSentinel = -12345.678;

class ErrorTest : public VariantTest {};

// ---------------------------------------------------------------------------------
// Positions.

TEST_P(ErrorTest, NonFinitePositionsAreRejected) {
  const double bad[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity()};
  for (BoundaryKind kind : {BoundaryKind::Periodic, BoundaryKind::Fold, BoundaryKind::MixedKeep}) {
    SCOPED_TRACE(name(kind));
    const Grid<3> grid = make_grid<3>({8, 6, 7}, kind);
    MatrixPlan<double, 3> plan(grid, Kernel::tsc(), bc_);
    for (int d = 0; d < 3; ++d)
      for (double x : bad) {
        auto pos = make_positions<double, 3>(grid, Distribution::Uniform, 50, rng_);
        pos[d][17] = x;
        EXPECT_PMKIT_ERROR(plan.set_points(views_of<double, 3>(pos)), ErrorCode::NonFinitePosition,
                           "positions[" + std::to_string(d) + "][17]");
        EXPECT_FALSE(plan.has_points());
      }
  }
  // Float positions too, in 2D.
  MatrixPlan<float, 2> plan(make_grid<2>({9, 9}, BoundaryKind::Periodic), Kernel::linear(), bc_);
  std::vector<float> x(10, 0.5f), y(10, 0.5f);
  y[9] = std::numeric_limits<float>::infinity();
  EXPECT_PMKIT_ERROR(plan.set_points({View<const float>(x), View<const float>(y)}),
                     ErrorCode::NonFinitePosition, "positions[1][9]");
}

// A finite coordinate on a periodic axis so far from the origin that its distance in
// cells overflows: an error that says so, not one about a bounded grid.
TEST_P(ErrorTest, CoordinatesTooFarToWrapAreNamed) {
  const Grid<3> grid = make_grid<3>({8, 6, 7}, BoundaryKind::Periodic);
  MatrixPlan<double, 3> plan(grid, Kernel::tsc(), bc_);
  for (double x : {1e308, -std::numeric_limits<double>::max()}) {
    auto pos = make_positions<double, 3>(grid, Distribution::Uniform, 50, rng_);
    pos[1][23] = x;
    EXPECT_PMKIT_ERROR(plan.set_points(views_of<double, 3>(pos)), ErrorCode::OutOfBounds, "positions[1][23]");
    EXPECT_PMKIT_ERROR(plan.set_points(views_of<double, 3>(pos)), ErrorCode::OutOfBounds, "periodic grid");
    EXPECT_FALSE(plan.has_points());
  }
}

TEST_P(ErrorTest, ParticlesOutsideABoundedGridAreRejected) {
  for (BoundaryKind kind : {BoundaryKind::Fold, BoundaryKind::Keep, BoundaryKind::MixedFold}) {
    SCOPED_TRACE(name(kind));
    const Grid<2> grid = make_grid<2>({10, 12}, kind);  // x in [-2, 3], y in [1.5, 4.5]
    MatrixPlan<double, 2> plan(grid, Kernel::mp4(), bc_);
    const double hi_y = grid.origin[1] + box_length(grid, 1);
    for (double y : {hi_y + 0.01, std::nextafter(hi_y, 10.0), std::nextafter(grid.origin[1], 0.0), -100.0}) {
      auto pos = make_positions<double, 2>(grid, Distribution::Uniform, 40, rng_);
      pos[1][33] = y;
      EXPECT_PMKIT_ERROR(plan.set_points(views_of<double, 2>(pos)), ErrorCode::OutOfBounds, "positions[1][33]");
    }
    // x is bounded too, except in MixedFold where it is periodic and wraps.
    auto pos = make_positions<double, 2>(grid, Distribution::Uniform, 40, rng_);
    pos[0][0] = grid.origin[0] - 0.75;
    if (kind == BoundaryKind::MixedFold) {
      EXPECT_NO_THROW(plan.set_points(views_of<double, 2>(pos)));
    } else {
      EXPECT_PMKIT_ERROR(plan.set_points(views_of<double, 2>(pos)), ErrorCode::OutOfBounds, "positions[0][0]");
    }
  }
}

// Finite but huge positions on a periodic axis wrap like any other.
TEST_P(ErrorTest, HugeFinitePositionsWrapOnPeriodicAxes) {
  const Grid<2> grid = make_grid<2>({16, 11}, BoundaryKind::MixedFold);  // x periodic
  MatrixPlan<double, 2> plan(grid, Kernel::tsc(), bc_);
  std::vector<double> x = {1e300, -1e300, 1e20, -3e9, 1e17 + 0.3, -7.3e15}, y(x.size(), 2.0);
  plan.set_points({View<const double>(x), View<const double>(y)});
  std::vector<double> q(x.size(), 1.0), m(static_cast<std::size_t>(plan.mesh_size()));
  plan.spread({View<const double>(q)}, {View<double>(m)});
  const std::vector<double> ref = reference_spread<2>(grid, plan.kernel(), {x.data(), y.data()}, q);
  EXPECT_LE(rel_l2<double>(View<const double>(m), ref), 1e-12);
}

// ---------------------------------------------------------------------------------
// Lengths and views.

TEST_P(ErrorTest, MismatchedLengthsAreRejectedAndOutputsUntouched) {
  const Grid<3> grid = make_grid<3>({7, 9, 8}, BoundaryKind::Periodic);
  MatrixPlan<double, 3> plan(grid, Kernel::bspline(4), bc_);
  const std::size_t n = 100, size = static_cast<std::size_t>(plan.mesh_size());
  auto pos = make_positions<double, 3>(grid, Distribution::Uniform, n, rng_);

  auto short_pos = views_of<double, 3>(pos);
  short_pos[2].size = n - 1;
  EXPECT_PMKIT_ERROR(plan.set_points(short_pos), ErrorCode::SizeMismatch, "positions[2]");
  EXPECT_FALSE(plan.has_points());
  plan.set_points(views_of<double, 3>(pos));

  const std::vector<double> q = random_values<double>(n, rng_), q_short(n - 1, 1.0);
  const std::vector<double> sentinel_mesh(size, kSentinel), sentinel_values(n, kSentinel);
  std::vector<double> m0 = sentinel_mesh, m1 = sentinel_mesh, v0 = sentinel_values, v1 = sentinel_values;
  std::vector<double> m_short(size - 1, kSentinel), v_short(n + 1, kSentinel);
  const std::vector<double> f = random_values<double>(size, rng_), f_short(size + 3, 1.0);

  // spread
  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(q_short)}, {View<double>(m0)}), ErrorCode::SizeMismatch,
                     "props[0]");
  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(q), View<const double>(q_short)},
                                 {View<double>(m0), View<double>(m1)}),
                     ErrorCode::SizeMismatch, "props[1]");
  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(q), View<const double>(q)}, {View<double>(m0), View<double>(m_short)}),
                     ErrorCode::SizeMismatch, "meshes[1]");
  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(q), View<const double>(q)}, {View<double>(m0)}),
                     ErrorCode::SizeMismatch, "meshes");
  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(q)}, {View<double>(m0), View<double>(m1)}),
                     ErrorCode::SizeMismatch, "properties");
  std::vector<double> wide(2 * size, kSentinel);
  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(q)}, {View<double>(wide.data(), size, 2)}),
                     ErrorCode::InvalidArgument, "meshes[0].stride");
  EXPECT_TRUE(std::all_of(wide.begin(), wide.end(), [](double x) { return x == kSentinel; }));
  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(q)}, {View<double>(nullptr, size)}),
                     ErrorCode::InvalidArgument, "meshes[0].data");
  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(nullptr, n)}, {View<double>(m0)}), ErrorCode::InvalidArgument,
                     "props[0].data");
  EXPECT_TRUE(same_bytes(m0, sentinel_mesh) && same_bytes(m1, sentinel_mesh)) << "a failed spread wrote a mesh";
  EXPECT_TRUE(std::all_of(m_short.begin(), m_short.end(), [](double x) { return x == kSentinel; }));

  // interp
  EXPECT_PMKIT_ERROR(plan.interp({View<const double>(f_short)}, {View<double>(v0)}), ErrorCode::SizeMismatch,
                     "meshes[0]");
  EXPECT_PMKIT_ERROR(plan.interp({View<const double>(f), View<const double>(f)}, {View<double>(v0), View<double>(v_short)}),
                     ErrorCode::SizeMismatch, "values[1]");
  EXPECT_PMKIT_ERROR(plan.interp({View<const double>(f), View<const double>(f)}, {View<double>(v0)}),
                     ErrorCode::SizeMismatch, "output");
  EXPECT_PMKIT_ERROR(plan.interp({View<const double>(f)}, {View<double>(v0), View<double>(v1)}),
                     ErrorCode::SizeMismatch, "meshes");
  EXPECT_PMKIT_ERROR(plan.interp({View<const double>(f)}, {View<double>(v0.data(), n, 0)}),
                     ErrorCode::InvalidArgument, "values[0].stride");
  EXPECT_TRUE(same_bytes(v0, sentinel_values) && same_bytes(v1, sentinel_values)) << "a failed interp wrote values";
  EXPECT_TRUE(std::all_of(v_short.begin(), v_short.end(), [](double x) { return x == kSentinel; }));

  // The plan still works after all that.
  plan.spread({View<const double>(q)}, {View<double>(m0)});
  plan.interp({View<const double>(f)}, {View<double>(v0)});
  EXPECT_FALSE(same_bytes(m0, sentinel_mesh));
  EXPECT_FALSE(same_bytes(v0, sentinel_values));
}

// The gradients take D arrays per mesh (gradients[D*i + d], vectors[D*i + d]); they are
// checked as interp's outputs and spread's inputs are, before anything is written.
TEST_P(ErrorTest, GradientArgumentsAreCheckedAndOutputsUntouched) {
  const Grid<3> grid = make_grid<3>({7, 9, 8}, BoundaryKind::Fold);
  MatrixPlan<double, 3> plan(grid, Kernel::mp4(), bc_);
  const std::size_t n = 100, size = static_cast<std::size_t>(plan.mesh_size());
  const std::vector<double> sentinel_mesh(size, kSentinel), sentinel_values(n, kSentinel);
  std::vector<double> m0 = sentinel_mesh, m1 = sentinel_mesh, m_short(size - 1, kSentinel);
  std::vector<std::vector<double>> g(6, sentinel_values);
  std::vector<double> g_short(n - 1, kSentinel), interleaved(3 * n, kSentinel);
  const std::vector<double> f = random_values<double>(size, rng_), f_short(size + 1, 1.0);
  std::vector<std::vector<double>> v(6);
  for (auto& c : v) c = random_values<double>(n, rng_);
  const std::vector<double> v_short(n + 2, 1.0);
  auto outputs = [&](int count) {
    std::vector<View<double>> out;
    for (int k = 0; k < count; ++k) out.emplace_back(g[k]);
    return out;
  };
  auto vectors = [&](int count) {
    std::vector<View<const double>> in;
    for (int k = 0; k < count; ++k) in.emplace_back(v[k]);
    return in;
  };

  EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(f)}, outputs(3)), ErrorCode::NotReady, "set_points");
  EXPECT_PMKIT_ERROR(plan.spread_gradient(vectors(3), {View<double>(m0)}), ErrorCode::NotReady, "set_points");
  auto pos = make_positions<double, 3>(grid, Distribution::Faces, n, rng_);
  plan.set_points(views_of<double, 3>(pos));

  // interp_gradient: three outputs per mesh, of the particles' length, meshes of the mesh's.
  EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(f)}, outputs(2)), ErrorCode::SizeMismatch,
                     "3 per mesh");
  EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(f), View<const double>(f)}, outputs(3)),
                     ErrorCode::SizeMismatch, "3 per mesh");
  EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(f)}, outputs(4)), ErrorCode::SizeMismatch,
                     "3 per mesh");
  EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(f_short)}, outputs(3)), ErrorCode::SizeMismatch,
                     "meshes[0]");
  {
    std::vector<View<double>> out = outputs(6);
    out[4] = View<double>(g_short);
    EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(f), View<const double>(f)}, out),
                       ErrorCode::SizeMismatch, "gradients[4]");
    out[4] = View<double>(nullptr, n);
    EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(f), View<const double>(f)}, out),
                       ErrorCode::InvalidArgument, "gradients[4].data");
  }
  EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(f.data(), size, 2)}, outputs(3)),
                     ErrorCode::InvalidArgument, "meshes[0].stride");
  EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(nullptr, size)}, outputs(3)),
                     ErrorCode::InvalidArgument, "meshes[0].data");
  // An interleaved output one particle short in its last component.
  EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(f)},
                                          {View<double>(interleaved.data(), n, 3), View<double>(interleaved.data() + 1, n, 3),
                                           View<double>(interleaved.data() + 2, n - 1, 3)}),
                     ErrorCode::SizeMismatch, "gradients[2]");
  for (const auto& out : g) EXPECT_TRUE(same_bytes(out, sentinel_values)) << "a failed interp_gradient wrote values";
  EXPECT_TRUE(std::all_of(interleaved.begin(), interleaved.end(), [](double x) { return x == kSentinel; }));

  // spread_gradient: three vector components per mesh.
  EXPECT_PMKIT_ERROR(plan.spread_gradient(vectors(2), {View<double>(m0)}), ErrorCode::SizeMismatch, "3 per mesh");
  EXPECT_PMKIT_ERROR(plan.spread_gradient(vectors(3), {View<double>(m0), View<double>(m1)}), ErrorCode::SizeMismatch,
                     "3 per mesh");
  {
    std::vector<View<const double>> in = vectors(6);
    in[5] = View<const double>(v_short);
    EXPECT_PMKIT_ERROR(plan.spread_gradient(in, {View<double>(m0), View<double>(m1)}), ErrorCode::SizeMismatch,
                       "vectors[5]");
    in[5] = View<const double>(nullptr, n);
    EXPECT_PMKIT_ERROR(plan.spread_gradient(in, {View<double>(m0), View<double>(m1)}), ErrorCode::InvalidArgument,
                       "vectors[5].data");
  }
  EXPECT_PMKIT_ERROR(plan.spread_gradient(vectors(6), {View<double>(m0), View<double>(m_short)}),
                     ErrorCode::SizeMismatch, "meshes[1]");
  std::vector<double> wide(2 * size, kSentinel);
  EXPECT_PMKIT_ERROR(plan.spread_gradient(vectors(3), {View<double>(wide.data(), size, 2)}), ErrorCode::InvalidArgument,
                     "meshes[0].stride");
  EXPECT_PMKIT_ERROR(plan.spread_gradient(vectors(3), {View<double>(nullptr, size)}), ErrorCode::InvalidArgument,
                     "meshes[0].data");
  EXPECT_TRUE(same_bytes(m0, sentinel_mesh) && same_bytes(m1, sentinel_mesh)) << "a failed spread_gradient wrote a mesh";
  EXPECT_TRUE(std::all_of(m_short.begin(), m_short.end(), [](double x) { return x == kSentinel; }));
  EXPECT_TRUE(std::all_of(wide.begin(), wide.end(), [](double x) { return x == kSentinel; }));

  // The plan still works after all that.
  plan.interp_gradient({View<const double>(f)}, outputs(3));
  plan.spread_gradient(vectors(3), {View<double>(m0)});
  EXPECT_FALSE(same_bytes(g[0], sentinel_values));
  EXPECT_FALSE(same_bytes(m0, sentinel_mesh));
}

// A call's outputs share no element with its inputs: spread, interp and both gradients
// refuse a particle array inside a mesh (either way round), naming both, and write
// nothing. Arrays side by side in one buffer, and a strided view whose elements straddle
// a mesh without touching it, are apart.
TEST_P(ErrorTest, OverlappingInputsAndOutputsAreRejected) {
  const Grid<3> grid = make_grid<3>({7, 9, 8}, BoundaryKind::Periodic);
  MatrixPlan<double, 3> plan(grid, Kernel::mp4(), bc_);
  const std::size_t n = 100, size = static_cast<std::size_t>(plan.mesh_size());
  auto pos = make_positions<double, 3>(grid, Distribution::Uniform, n, rng_);
  plan.set_points(views_of<double, 3>(pos));
  const std::vector<double> f = random_values<double>(size, rng_);
  // One buffer: the mesh at [0, size), particle arrays from `size` on.
  std::vector<double> buffer = random_values<double>(size + 3 * n, rng_);
  const std::vector<double> before = buffer;
  double* mesh = buffer.data();
  auto inside = [&](std::size_t offset) { return View<double>(mesh + offset, n); };

  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(mesh, n)}, {View<double>(mesh, size)}), ErrorCode::InvalidArgument,
                     "props[0] and meshes[0] overlap");
  std::vector<double> other(size, kSentinel);
  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(f.data(), n), View<const double>(mesh + size - 1, n)},
                                 {View<double>(other), View<double>(mesh, size)}),
                     ErrorCode::InvalidArgument, "props[1] and meshes[1] overlap");
  EXPECT_PMKIT_ERROR(plan.interp({View<const double>(mesh, size)}, {inside(size - n / 2)}), ErrorCode::InvalidArgument,
                     "values[0] and meshes[0] overlap");
  EXPECT_PMKIT_ERROR(plan.interp({View<const double>(f), View<const double>(mesh, size)}, {inside(size), inside(7)}),
                     ErrorCode::InvalidArgument, "values[1] and meshes[1] overlap");
  EXPECT_PMKIT_ERROR(plan.interp_gradient({View<const double>(mesh, size)},
                                          {inside(size), inside(size + n), View<double>(mesh + size - 2, n, 3)}),
                     ErrorCode::InvalidArgument, "gradients[2] and meshes[0] overlap");
  EXPECT_PMKIT_ERROR(plan.spread_gradient({View<const double>(f.data(), n), View<const double>(mesh + 1, n, 2),
                                           View<const double>(f.data(), n)},
                                          {View<double>(mesh, size)}),
                     ErrorCode::InvalidArgument, "vectors[1] and meshes[0] overlap");
  EXPECT_TRUE(same_bytes(buffer, before)) << "a rejected call wrote into the buffer";
  EXPECT_TRUE(std::all_of(other.begin(), other.end(), [](double x) { return x == kSentinel; }));

  // Apart: side by side, and stepping over the mesh (elements 0, size + 1, 2 (size + 1), ...).
  std::vector<double> values(n), again(n);
  plan.interp({View<const double>(mesh, size)}, {inside(size)});
  plan.interp({View<const double>(mesh, size)}, {View<double>(values)});
  for (std::size_t p = 0; p < n; ++p) EXPECT_EQ(buffer[size + p], values[p]) << "particle " << p;
  std::vector<double> straddled((n - 1) * (size + 1) + 1, 0.0);
  std::copy(f.begin(), f.end(), straddled.begin() + 1);
  plan.interp({View<const double>(straddled.data() + 1, size)}, {View<double>(straddled.data(), n, size + 1)});
  plan.interp({View<const double>(f)}, {View<double>(again)});
  for (std::size_t p = 0; p < n; ++p) EXPECT_EQ(straddled[p * (size + 1)], again[p]) << "particle " << p;
}

// With no particles, spread_gradient's Overwrite zeroes the meshes and Add leaves them;
// interp_gradient has nothing to write.
TEST_P(ErrorTest, GradientsOfZeroParticlesAreValid) {
  MatrixPlan<float, 2> plan(make_grid<2>({5, 6}, BoundaryKind::MixedKeep), Kernel::tsc(), bc_);
  const std::size_t size = static_cast<std::size_t>(plan.mesh_size());
  plan.set_points(Plan<float, 2>::Positions{});
  const std::vector<float> sentinel(size, static_cast<float>(kSentinel));
  std::vector<float> m = sentinel;
  plan.spread_gradient({View<const float>(), View<const float>()}, {View<float>(m)}, Accumulate::Add);
  EXPECT_TRUE(same_bytes(m, sentinel)) << "Add of no particles must leave the mesh alone";
  plan.spread_gradient({View<const float>(), View<const float>()}, {View<float>(m)}, Accumulate::Overwrite);
  EXPECT_TRUE(std::all_of(m.begin(), m.end(), [](float x) { return x == 0.0f; }))
      << "Overwrite of no particles must zero the mesh";
  std::vector<float> none;
  EXPECT_NO_THROW(plan.interp_gradient({View<const float>(sentinel)}, {View<float>(none), View<float>(none)}));
  EXPECT_NO_THROW(plan.interp_gradient({}, {}));
  EXPECT_NO_THROW(plan.spread_gradient({}, {}));
}

TEST_P(ErrorTest, ZeroParticlesAreValid) {
  for (BoundaryKind kind : {BoundaryKind::Periodic, BoundaryKind::Keep}) {
    SCOPED_TRACE(name(kind));
    MatrixPlan<float, 3> plan(make_grid<3>({5, 6, 7}, kind), Kernel::mp4(), bc_);
    const std::size_t size = static_cast<std::size_t>(plan.mesh_size());
    Plan<float, 3>::Positions none{};  // null data, size 0
    ASSERT_NO_THROW(plan.set_points(none));
    EXPECT_TRUE(plan.has_points());
    EXPECT_EQ(plan.num_points(), 0u);

    const std::vector<float> sentinel(size, static_cast<float>(kSentinel));
    std::vector<float> m0 = sentinel, m1 = sentinel;
    plan.spread({View<const float>()}, {View<float>(m0)}, Accumulate::Add);
    EXPECT_TRUE(same_bytes(m0, sentinel)) << "Add of no particles must leave the mesh alone";
    plan.spread({View<const float>(), View<const float>()}, {View<float>(m0), View<float>(m1)},
                Accumulate::Overwrite);
    EXPECT_TRUE(std::all_of(m0.begin(), m0.end(), [](float x) { return x == 0.0f; }))
        << "Overwrite of no particles must zero the mesh";
    EXPECT_TRUE(std::all_of(m1.begin(), m1.end(), [](float x) { return x == 0.0f; }));
    std::vector<float> none_out;
    EXPECT_NO_THROW(plan.interp({View<const float>(sentinel)}, {View<float>(none_out)}));
  }
}

TEST_P(ErrorTest, ZeroPropertiesAreANoOp) {
  const Grid<2> grid = make_grid<2>({6, 6}, BoundaryKind::Periodic);
  MatrixPlan<double, 2> plan(grid, Kernel::tsc(), bc_);
  auto pos = make_positions<double, 2>(grid, Distribution::Uniform, 30, rng_);
  plan.set_points(views_of<double, 2>(pos));
  EXPECT_NO_THROW(plan.spread({}, {}));
  EXPECT_NO_THROW(plan.interp({}, {}));
}

// ---------------------------------------------------------------------------------
// State.

TEST_P(ErrorTest, UseBeforeSetPointsIsNotReady) {
  MatrixPlan<double, 2> plan(make_grid<2>({6, 5}, BoundaryKind::Fold), Kernel::linear(), bc_);
  const std::size_t size = static_cast<std::size_t>(plan.mesh_size());
  std::vector<double> q(3, 1.0), mesh(size, kSentinel), v(3, kSentinel);
  const std::vector<double> mesh0 = mesh, v0 = v;
  EXPECT_FALSE(plan.has_points());
  EXPECT_PMKIT_ERROR(plan.spread({View<const double>(q)}, {View<double>(mesh)}), ErrorCode::NotReady, "set_points");
  EXPECT_PMKIT_ERROR(plan.interp({View<const double>(mesh0)}, {View<double>(v)}), ErrorCode::NotReady, "set_points");
  EXPECT_TRUE(same_bytes(mesh, mesh0));
  EXPECT_TRUE(same_bytes(v, v0));
}

// A failed set_points keeps the previous points: the plan gives the same bits as before.
// On CUDA device arrays the rejection is found on the device after the binning has been
// queued, and the plan needs set_points again (NotReady until then); the same bits come
// back once it has it.
TEST_P(ErrorTest, FailedSetPointsKeepsThePreviousPoints) {
  const Grid<3> grid = make_grid<3>({9, 7, 8}, BoundaryKind::MixedFold);
  // Bitwise comparison needs a reproducible spread: on CUDA the fast mode adds blocks'
  // results with floating-point atomics in any order, so ask for the deterministic mode.
  if (!refuses_deterministic(bc_).empty()) GTEST_SKIP() << refuses_deterministic(bc_);
  Options options = options_of<Options>(bc_);
  options.deterministic = true;
  MatrixPlan<double, 3> plan(grid, Kernel::bspline(5), options);
  const std::size_t n = 400, size = static_cast<std::size_t>(plan.mesh_size());
  const auto pos = make_positions<double, 3>(grid, Distribution::Clustered, n, rng_);
  plan.set_points(views_of<double, 3>(pos));
  const std::vector<double> q = random_values<double>(n, rng_), f = random_values<double>(size, rng_);
  std::vector<double> before_m(size), before_v(n);
  plan.spread({View<const double>(q)}, {View<double>(before_m)});
  plan.interp({View<const double>(f)}, {View<double>(before_v)});

  // Larger, and with one bad particle late in the array (after many good ones were binned).
  auto bad = make_positions<double, 3>(grid, Distribution::Uniform, 3 * n, rng_);
  bad[0][3 * n - 2] = std::numeric_limits<double>::quiet_NaN();
  auto set_again_if_lost = [&] {
    if (!plan.device_memory()) return;
    EXPECT_FALSE(plan.has_points());
    plan.set_points(views_of<double, 3>(pos));
  };
  EXPECT_PMKIT_ERROR(plan.set_points(views_of<double, 3>(bad)), ErrorCode::NonFinitePosition, "positions[0][1198]");
  set_again_if_lost();
  bad[0][3 * n - 2] = grid.origin[0];
  bad[2][5] = grid.origin[2] + box_length(grid, 2) + 1.0;  // z is bounded
  EXPECT_PMKIT_ERROR(plan.set_points(views_of<double, 3>(bad)), ErrorCode::OutOfBounds, "positions[2][5]");
  set_again_if_lost();
  auto uneven = views_of<double, 3>(bad);
  uneven[1].size = 2;
  EXPECT_PMKIT_ERROR(plan.set_points(uneven), ErrorCode::SizeMismatch, "positions[1]");

  ASSERT_TRUE(plan.has_points());
  EXPECT_EQ(plan.num_points(), n);
  std::vector<double> after_m(size, kSentinel), after_v(n, kSentinel);
  plan.spread({View<const double>(q)}, {View<double>(after_m)});
  plan.interp({View<const double>(f)}, {View<double>(after_v)});
  EXPECT_TRUE(same_bytes(before_m, after_m)) << "spread after a failed set_points";
  EXPECT_TRUE(same_bytes(before_v, after_v)) << "interp after a failed set_points";
}

// ---------------------------------------------------------------------------------
// Plan creation.

TEST_P(ErrorTest, InvalidGridsAreRejected) {
  const Kernel k = Kernel::tsc();
  const Options o = options_of<Options>(bc_);
  auto grid = [] { return make_grid<3>({6, 7, 8}, BoundaryKind::Periodic); };
  {
    auto g = grid();
    g.cells[1] = 0;
    EXPECT_PMKIT_ERROR((Plan<double, 3>(g, k, o)), ErrorCode::InvalidArgument, "grid.cells[1]");
    g.cells[1] = -4;
    EXPECT_PMKIT_ERROR((Plan<float, 3>(g, k, o)), ErrorCode::InvalidArgument, "grid.cells[1]");
  }
  for (double h : {0.0, -0.5, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    auto g = grid();
    g.spacing[2] = h;
    EXPECT_PMKIT_ERROR((Plan<double, 3>(g, k, o)), ErrorCode::InvalidArgument, "grid.spacing[2]");
  }
  {
    auto g = grid();
    g.origin[0] = std::numeric_limits<double>::infinity();
    EXPECT_PMKIT_ERROR((Plan<double, 3>(g, k, o)), ErrorCode::InvalidArgument, "grid.origin[0]");
  }
  {
    // Folding a B-spline of order 8 (ghost width 4) needs 4 cells per bounded axis.
    auto g = make_grid<2>({3, 9}, BoundaryKind::Fold);
    EXPECT_PMKIT_ERROR((Plan<double, 2>(g, Kernel::bspline(8), o)), ErrorCode::InvalidArgument, "grid.cells[0]");
    g.cells[0] = 4;
    EXPECT_NO_THROW((Plan<double, 2>(g, Kernel::bspline(8), o)));
  }
  {
    Options bad = o;
    bad.num_threads = -1;
    EXPECT_PMKIT_ERROR((Plan<double, 3>(grid(), k, bad)), ErrorCode::InvalidArgument, "num_threads");
  }
  for (double fraction : {-0.1, 1.5, std::nan("")}) {
    Options bad = o;
    bad.max_away_fraction = fraction;
    EXPECT_PMKIT_ERROR((Plan<double, 3>(grid(), k, bad)), ErrorCode::InvalidArgument, "max_away_fraction");
  }
}

TEST_P(ErrorTest, HugeMeshIsRejectedAtPlanCreation) {
  const Options o = options_of<Options>(bc_);
  for (auto make : {+[] { return Grid<3>::periodic({10000000, 10000000, 10000000}); },
                    +[] { return Grid<3>::bounded({10000000, 10000000, 10000000}, 1.0, 0.0, Ghosts::Keep); }}) {
    try {
      Plan<float, 3> plan(make(), Kernel::tsc(), o);
      ADD_FAILURE() << "a mesh of 1e21 nodes was accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == ErrorCode::OutOfMemory || e.code() == ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("grid"), std::string::npos) << e.what();
    }
  }
  // More cells in one dimension than an index holds.
  EXPECT_PMKIT_ERROR((Plan<double, 2>(Grid<2>::periodic({std::int64_t(3) << 31, 4}), Kernel::linear(), o)),
                     ErrorCode::InvalidArgument, "grid.cells[0]");
}

TEST_P(ErrorTest, MethodsOfAnotherBackendAreUnsupported) {
  if (bc_.exec.backend != Backend::Cpu) GTEST_SKIP() << "a CPU-only check";
  Options o = options_of<Options>(bc_);
  o.spread_method = SpreadMethod::CudaSharedTiles;
  EXPECT_PMKIT_ERROR((Plan<double, 2>(make_grid<2>({8, 8}, BoundaryKind::Periodic), Kernel::tsc(), o)),
                     ErrorCode::Unsupported, "spread_method");
}

INSTANTIATE_TEST_SUITE_P(Backends, ErrorTest, variant_values<Options>(), variant_name);

// ---------------------------------------------------------------------------------
// Backend-independent.

TEST(KernelErrors, BSplineOrderOutOfRange) {
  for (int order : {-2, 0, 1, 9, 12}) {
    EXPECT_PMKIT_ERROR(Kernel::bspline(order), ErrorCode::InvalidArgument, "order = " + std::to_string(order));
  }
  EXPECT_PMKIT_ERROR(Kernel::from_name("bspline9"), ErrorCode::InvalidArgument, "order = 9");
  EXPECT_PMKIT_ERROR(Kernel::from_name("bspline1"), ErrorCode::InvalidArgument, "order = 1");
  EXPECT_PMKIT_ERROR(Kernel::from_name("quintic"), ErrorCode::InvalidArgument, "quintic");
  EXPECT_PMKIT_ERROR(Kernel::from_name("bspline10"), ErrorCode::InvalidArgument, "bspline10");
}

TEST(BackendErrors, CudaWithoutCudaIsUnsupported) {
  if (built_with_cuda()) GTEST_SKIP() << "this build has the CUDA backend";
  Options o;
  o.backend = Backend::Cuda;
  EXPECT_PMKIT_ERROR((Plan<float, 3>(Grid<3>::periodic({8, 8, 8}), Kernel::tsc(), o)), ErrorCode::Unsupported,
                     "CUDA");
}

TEST(ErrorCodes, AreStableAndNamed) {
  // Stable numbers: a binding may have stored them.
  EXPECT_EQ(static_cast<int>(ErrorCode::InvalidArgument), 1);
  EXPECT_EQ(static_cast<int>(ErrorCode::SizeMismatch), 2);
  EXPECT_EQ(static_cast<int>(ErrorCode::NonFinitePosition), 3);
  EXPECT_EQ(static_cast<int>(ErrorCode::OutOfBounds), 4);
  EXPECT_EQ(static_cast<int>(ErrorCode::NotReady), 5);
  EXPECT_EQ(static_cast<int>(ErrorCode::OutOfMemory), 6);
  EXPECT_EQ(static_cast<int>(ErrorCode::Unsupported), 7);
  EXPECT_EQ(static_cast<int>(ErrorCode::Device), 8);
  for (int c = 0; c <= 8; ++c) EXPECT_STRNE(to_string(static_cast<ErrorCode>(c)), "unknown") << c;
}

}  // namespace
}  // namespace pmkit::test
