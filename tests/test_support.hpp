#pragma once
// Shared helpers of the test suite: the backends to run every test on, fresh random
// seeds, grids of every boundary kind, particle distributions, error norms.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <exception>
#include <initializer_list>
#include <tuple>
#include <vector>

#include "pmkit/pmkit.hpp"
#include "pmkit/reference.hpp"
#include "pmkit/version.hpp"

namespace pmkit {
// Readable test parameters in gtest's messages.
inline void PrintTo(const Kernel& k, std::ostream* os) { *os << k.name(); }
}  // namespace pmkit

namespace pmkit::test {

// Whether the tests run under compute-sanitizer (bench/device.sh sets PMKIT_TEST_SMALL):
// ~100x slower there, so the CUDA tests shrink their sizes and step counts.
inline bool sanitizing() { return std::getenv("PMKIT_TEST_SMALL") != nullptr; }
// A particle count, shrunk under compute-sanitizer.
inline std::size_t scaled(std::size_t n) { return sanitizing() ? std::max<std::size_t>(n / 16, 1) : n; }

// Whether this build has RealFft on the CPU (FFTW found at configure time).
inline bool built_with_fftw() {
  try {
    RealFft<float, 2> probe({2, 2});
    return true;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Unsupported) throw;
    return false;
  }
}
#define PMKIT_REQUIRE_FFTW() \
  if (!::pmkit::test::built_with_fftw()) GTEST_SKIP() << "this build has no FFTW (RealFft on the CPU)"

// ---------------------------------------------------------------------------------
// The backend matrix. One list of variants for the whole suite: where a plan runs
// (ExecutionOptions) and what else a variant fixes (its arrays' memory, the spread
// method, the deterministic mode). A test suite of a plan instantiates its body for
// variants_for<ThatPlansOptions>(): the variants that apply to that plan. A variant that
// cannot run here (no GPU) makes its tests skip with the reason (PMKIT_REQUIRE_VARIANT).

// Where a variant's arrays live: the host (CPU; CUDA with Options::host_arrays), or the
// device (CUDA: the tests copy their arrays to device memory and back, matrix_plan.hpp).
enum class Memory { Host, Device };

struct Variant {
  const char* label;
  ExecutionOptions exec;
  Memory memory = Memory::Host;
  SpreadMethod method = SpreadMethod::Auto;
  bool deterministic = false;
};

inline void PrintTo(const Variant& v, std::ostream* os) { *os << v.label; }
inline bool on_cuda(const Variant& v) { return v.exec.backend == Backend::Cuda; }

inline ExecutionOptions execution(Backend backend, int threads = 0) {
  ExecutionOptions e;
  e.backend = backend;
  e.num_threads = threads;
  return e;
}

inline std::vector<Variant> all_variants() {
  const ExecutionOptions cuda = execution(Backend::Cuda);
  return {
      {"Cpu1", execution(Backend::Cpu, 1)},
      {"Cpu2", execution(Backend::Cpu, 2)},
      {"Cpu3", execution(Backend::Cpu, 3)},
      {"Cpu3Slabs", execution(Backend::Cpu, 3), Memory::Host, SpreadMethod::CpuSlabs},
      {"Cpu3PrivateMeshes", execution(Backend::Cpu, 3), Memory::Host, SpreadMethod::CpuPrivateMeshes},
      {"CudaHostArrays", cuda, Memory::Host},
      {"CudaDevice", cuda, Memory::Device},
      {"CudaDeterministic", cuda, Memory::Device, SpreadMethod::Auto, true},
      {"CudaGlobalAtomics", cuda, Memory::Device, SpreadMethod::CudaGlobalAtomics},
      {"CudaSharedTiles", cuda, Memory::Device, SpreadMethod::CudaSharedTiles},
      {"CudaCellMoments", cuda, Memory::Device, SpreadMethod::CudaCellMoments},
  };
}

// A variant's options for each plan: the execution part, then the extras that plan's
// options have. Overloads pick the extras: the mesh plan's (Options), PME's, and none
// (FftOptions, PairOptions: their defaults).
inline void set_extras(ExecutionOptions&, const Variant&) {}
inline void set_extras(Options& o, const Variant& v) {
  o.spread_method = v.method;
  o.deterministic = v.deterministic;
  o.host_arrays = on_cuda(v) && v.memory == Memory::Host;
}
inline void set_extras(PmeOptions& o, const Variant& v) { o.deterministic = v.deterministic; }

template <class Opt>
Opt options_of(const Variant& v) {
  Opt o;
  static_cast<ExecutionOptions&>(o) = v.exec;
  set_extras(o, v);
  return o;
}

// Whether a variant applies to the plan of these options: the mesh plan takes every
// variant (the distributed plan, of the same Options, fewer: rank_variants); the others no
// explicit spread method, and on CUDA only device memory; PME also the deterministic mode.
template <class Opt>
bool applies(const Variant& v) {
  if (std::is_same<Opt, Options>::value) return true;
  if (v.method != SpreadMethod::Auto) return false;
  if (on_cuda(v) && v.memory != Memory::Device) return false;
  return !v.deterministic || std::is_same<Opt, PmeOptions>::value;
}

template <class Opt>
std::vector<Variant> variants_for() {
  std::vector<Variant> out;
  for (const Variant& v : all_variants())
    if (applies<Opt>(v)) out.push_back(v);
  return out;
}

// A suite that runs on part of a plan's variants names them (a label not in the matrix
// fails the suite's first test).
template <class Opt>
std::vector<Variant> variants_named(std::initializer_list<const char*> labels) {
  std::vector<Variant> out;
  for (const char* label : labels) {
    bool found = false;
    for (const Variant& v : variants_for<Opt>())
      if (std::string(v.label) == label) {
        out.push_back(v);
        found = true;
      }
    if (!found) ADD_FAILURE() << "no variant " << label << " in the matrix";
  }
  return out;
}

// The variants as a gtest parameter list, named by their labels.
template <class Opt>
auto variant_values() {
  return ::testing::ValuesIn(variants_for<Opt>());
}
inline std::string variant_name(const ::testing::TestParamInfo<Variant>& info) { return info.param.label; }

// Why the variant cannot run here, or "" when it can. Probed once per backend.
inline std::string unavailable_reason(const Variant& v) {
  if (!on_cuda(v)) return "";
  static const std::string why = [] {
    if (!built_with_cuda()) return std::string("this build of pmkit has no CUDA backend");
    try {
      Options probe;
      probe.backend = Backend::Cuda;
      probe.host_arrays = true;
      Plan<float, 2> plan(Grid<2>::periodic({8, 8}), Kernel::linear(), probe);
    } catch (const Error& e) {
      return std::string("no usable GPU: ") + e.what();
    }
    return std::string();
  }();
  return why;
}

// Why the variant's spread method cannot take this kernel in D dimensions, or "".
inline std::string method_refuses(const Variant& v, const Kernel& kernel, int dims) {
  if (v.method != SpreadMethod::CudaCellMoments) return "";
  if (std::pow(double(kernel.support()), dims) > 64)
    return "cell moments take kernels of at most 64 nodes a particle, " + kernel.name() + " has more in " +
           std::to_string(dims) + "D";
  return "";
}

// Why the variant's spread method refuses the deterministic mode (CUDA: only Auto and
// the shared tiles take it), or "".
inline std::string refuses_deterministic(const Variant& v) {
  if (!on_cuda(v) || v.method == SpreadMethod::Auto || v.method == SpreadMethod::CudaSharedTiles) return "";
  return std::string(v.label) + " has no deterministic mode";
}

#define PMKIT_REQUIRE_VARIANT(variant)                                             \
  do {                                                                             \
    const std::string pmkit_why_ = ::pmkit::test::unavailable_reason(variant);     \
    if (!pmkit_why_.empty()) GTEST_SKIP() << (variant).label << ": " << pmkit_why_; \
  } while (0)

// ---------------------------------------------------------------------------------
// Precision as a test parameter.
enum class Precision { Float, Double };
inline void PrintTo(Precision p, std::ostream* os) { *os << (p == Precision::Float ? "float" : "double"); }
inline const char* name(Precision p) { return p == Precision::Float ? "float" : "double"; }

// Calls f(T{}) with T = float or double.
template <class F>
void with_precision(Precision p, F&& f) {
  if (p == Precision::Float)
    f(float{});
  else
    f(double{});
}

// Relative L2 tolerance against the float64 reference.
template <class T>
constexpr double tolerance() {
  return std::is_same<T, float>::value ? 1e-5 : 1e-12;
}

// The bound a spread is held to against the float64 reference (relative L2): tolerance<T>(),
// or more where the plan's rounding grows with its sums, as docs/api.md states of the CUDA
// backend. Float global atomics round each of a node's k contributions (k: the n
// particles' stencil nodes over the mesh's nodes) in arrival order, an rms error that
// grows as sqrt(k) machine epsilons (up to about one sqrt(k) seen; held to four). The
// deterministic mode rounds each contribution to a quantum of n x max|q| x 2^-62, so its
// rms error is within sqrt(k) quanta against the mesh's rms.
template <class T, int D>
double spread_tolerance(const Options& o, const Kernel& kernel, std::size_t n, double max_abs_q,
                        const std::vector<double>& ref) {
  double tol = tolerance<T>();
  if (o.backend != Backend::Cuda || ref.empty()) return tol;
  const double k = double(n) * std::pow(double(kernel.support()), D) / double(ref.size());
  if (std::is_same<T, float>::value && o.spread_method == SpreadMethod::CudaGlobalAtomics)
    tol = std::max(tol, 4 * std::numeric_limits<float>::epsilon() * std::sqrt(k));
  if (o.deterministic) {
    double squares = 0;
    for (double v : ref) squares += v * v;
    const double rms = std::sqrt(squares / double(ref.size()));
    if (rms > 0) tol = std::max(tol, double(n) * max_abs_q * std::ldexp(1.0, -62) * std::sqrt(k) / rms);
  }
  return tol;
}
template <class T>
double max_abs(const std::vector<T>& values) {
  double m = 0;
  for (T v : values) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}

inline std::vector<Kernel> all_kernels() {
  std::vector<Kernel> k = {Kernel::linear(), Kernel::tsc(), Kernel::mp4()};
  for (int order = 4; order <= 8; ++order) k.push_back(Kernel::bspline(order));
  return k;
}

// ---------------------------------------------------------------------------------
// Seeds: fresh per test from std::random_device, or PMKIT_TEST_SEED to replay one.
inline std::uint64_t fresh_seed() {
  if (const char* s = std::getenv("PMKIT_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}
inline std::string seed_note(std::uint64_t seed) {
  return "seed = " + std::to_string(seed) + " (replay: PMKIT_TEST_SEED=" + std::to_string(seed) + ")";
}

// ---------------------------------------------------------------------------------
// Errors: f() must throw pmkit::Error with `code` and a message holding `needle`.
template <class F>
void expect_pmkit_error(ErrorCode code, const std::string& needle, F&& f, const std::string& what = "the call") {
  try {
    f();
    ADD_FAILURE() << what << " threw nothing; expected " << to_string(code);
  } catch (const ::pmkit::Error& e) {
    EXPECT_EQ(e.code(), code) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << what << ": the message '" << e.what() << "' should name '" << needle << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw a non-pmkit exception: " << e.what();
  }
}
// The same for one statement, reported at the line of the macro.
#define EXPECT_PMKIT_ERROR(statement, expected_code, needle)                                         \
  do {                                                                                               \
    SCOPED_TRACE(#statement);                                                                        \
    ::pmkit::test::expect_pmkit_error(expected_code, needle, [&] { statement; }, #statement);         \
  } while (0)

// ---------------------------------------------------------------------------------
// Tests over the variants alone: the variant skipped where it cannot run, a fresh seed.
class VariantTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    bc_ = GetParam();
    PMKIT_REQUIRE_VARIANT(bc_);
    seed_ = fresh_seed();
    rng_.seed(seed_);
  }
  Variant bc_{};
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

// ---------------------------------------------------------------------------------
// Tests over every (backend, kernel, precision): the parameters unpacked, the backend
// skipped where it cannot run, and a fresh seed (the body adds SCOPED_TRACE(seed_note(seed_))).
using KernelCase = std::tuple<Variant, Kernel, Precision>;

class KernelCaseTest : public ::testing::TestWithParam<KernelCase> {
 protected:
  void SetUp() override {
    bc_ = std::get<0>(GetParam());
    kernel_ = std::get<1>(GetParam());
    precision_ = std::get<2>(GetParam());
    PMKIT_REQUIRE_VARIANT(bc_);
    // The bodies run in 2D and 3D: a method that refuses the kernel in 3D skips.
    const std::string refused = method_refuses(bc_, kernel_, 3);
    if (!refused.empty()) GTEST_SKIP() << bc_.label << ": " << refused;
    seed_ = fresh_seed();
    rng_.seed(seed_);
  }

  Variant bc_{};
  Kernel kernel_ = Kernel::linear();
  Precision precision_{};
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

inline auto all_kernel_cases() {
  return ::testing::Combine(variant_values<Options>(), ::testing::ValuesIn(all_kernels()),
                            ::testing::Values(Precision::Float, Precision::Double));
}
inline std::string kernel_case_name(const ::testing::TestParamInfo<KernelCase>& info) {
  return std::string(std::get<0>(info.param).label) + "_" + std::get<1>(info.param).name() + "_" +
         name(std::get<2>(info.param));
}

// ---------------------------------------------------------------------------------
// Grids. Origins and spacings are dyadic, so that positions on nodes, faces and the
// ends of bounded axes are exact in float and double alike.
enum class BoundaryKind { Periodic, Fold, Keep, MixedFold, MixedKeep };

inline const char* name(BoundaryKind b) {
  switch (b) {
    case BoundaryKind::Periodic: return "periodic";
    case BoundaryKind::Fold: return "bounded-fold";
    case BoundaryKind::Keep: return "bounded-keep";
    case BoundaryKind::MixedFold: return "mixed-fold";
    default: return "mixed-keep";
  }
}
inline std::vector<BoundaryKind> all_boundaries() {
  return {BoundaryKind::Periodic, BoundaryKind::Fold, BoundaryKind::Keep, BoundaryKind::MixedFold,
          BoundaryKind::MixedKeep};
}

// Mixed kinds: MixedFold is periodic in x only, MixedKeep periodic in y only.
template <int D>
Grid<D> make_grid(const std::array<std::int64_t, D>& cells, BoundaryKind kind) {
  constexpr double origin[3] = {-2.0, 1.5, 0.25};
  constexpr double spacing[3] = {0.5, 0.25, 0.75};
  Grid<D> g;
  g.cells = cells;
  for (int d = 0; d < D; ++d) {
    g.origin[d] = origin[d];
    g.spacing[d] = spacing[d];
    switch (kind) {
      case BoundaryKind::Periodic: g.boundary[d] = Boundary::Periodic; break;
      case BoundaryKind::MixedFold: g.boundary[d] = d == 0 ? Boundary::Periodic : Boundary::Bounded; break;
      case BoundaryKind::MixedKeep: g.boundary[d] = d == 1 ? Boundary::Periodic : Boundary::Bounded; break;
      default: g.boundary[d] = Boundary::Bounded;
    }
  }
  g.ghosts = (kind == BoundaryKind::Keep || kind == BoundaryKind::MixedKeep) ? Ghosts::Keep : Ghosts::Fold;
  return g;
}

template <int D>
double box_length(const Grid<D>& g, int d) {
  return static_cast<double>(g.cells[d]) * g.spacing[d];
}

// ---------------------------------------------------------------------------------
// Particle distributions, as positions of type T.
enum class Distribution {
  Uniform,    // uniform over the domain
  Clustered,  // 90% in three cells, the rest uniform
  Faces,      // every coordinate an integer multiple of the spacing, ends included
  Seam,       // on the domain ends, just below the periodic seam, wrapped from far away
};
inline const char* name(Distribution d) {
  switch (d) {
    case Distribution::Uniform: return "uniform";
    case Distribution::Clustered: return "clustered";
    case Distribution::Faces: return "faces";
    default: return "seam";
  }
}

template <class T, int D>
using Positions = std::array<std::vector<T>, D>;

template <class T, int D>
Positions<T, D> make_positions(const Grid<D>& g, Distribution dist, std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Positions<T, D> pos;
  for (auto& p : pos) p.resize(n);
  // Cluster centres: three random cells.
  std::array<std::array<std::int64_t, D>, 3> centre{};
  for (auto& c : centre)
    for (int d = 0; d < D; ++d) c[d] = static_cast<std::int64_t>(unit(rng) * static_cast<double>(g.cells[d]));
  for (std::size_t i = 0; i < n; ++i) {
    const bool in_cluster = dist == Distribution::Clustered && unit(rng) < 0.9;
    const int which = static_cast<int>(unit(rng) * 3) % 3;
    for (int d = 0; d < D; ++d) {
      const double h = g.spacing[d], lo = g.origin[d], len = box_length(g, d);
      const bool periodic = g.boundary[d] == Boundary::Periodic;
      T x;
      if (in_cluster) {
        x = static_cast<T>(lo + (static_cast<double>(centre[which][d]) + unit(rng)) * h);
      } else if (dist == Distribution::Faces) {
        const auto k = static_cast<std::int64_t>(unit(rng) * static_cast<double>(g.cells[d] + 1));
        x = static_cast<T>(lo + static_cast<double>(k) * h);
      } else if (dist == Distribution::Seam) {
        const int pick = static_cast<int>(unit(rng) * (periodic ? 7 : 3));
        switch (pick) {
          case 0: x = static_cast<T>(lo); break;
          case 1: x = static_cast<T>(lo + len); break;
          case 2: x = static_cast<T>(lo + unit(rng) * len); break;
          case 3: x = std::nextafter(static_cast<T>(lo), -std::numeric_limits<T>::infinity()); break;
          case 4: x = std::nextafter(static_cast<T>(lo + len), -std::numeric_limits<T>::infinity()); break;
          case 5: x = static_cast<T>(lo + unit(rng) * len + 3 * len); break;  // wraps from far away
          default: x = static_cast<T>(lo + unit(rng) * len - 2 * len); break;
        }
      } else {
        x = static_cast<T>(lo + unit(rng) * len);
      }
      // Rounding to T may not leave a bounded axis (its ends are exact in T).
      pos[d][i] = x;
    }
  }
  return pos;
}

// A case of particles on a grid, with the particle count its density gives (at least one)
// and a line that names it in a test's messages.
template <int D>
struct Scenario {
  std::array<std::int64_t, D> cells;
  BoundaryKind boundary;
  Distribution distribution;
  double density;  // particles per cell
};

template <int D>
std::size_t particle_count(const Scenario<D>& s) {
  double cells = 1;
  for (auto c : s.cells) cells *= static_cast<double>(c);
  return std::max<std::size_t>(1, static_cast<std::size_t>(s.density * cells));
}

template <int D>
std::string describe(const Scenario<D>& s, std::size_t n) {
  std::ostringstream os;
  os << D << "D cells";
  for (auto c : s.cells) os << " " << c;
  os << ", " << name(s.boundary) << ", " << name(s.distribution) << ", " << n << " particles";
  return os.str();
}

// ---------------------------------------------------------------------------------
// Arrays and norms.
template <class T>
std::vector<T> random_values(std::size_t n, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(rng));
  return v;
}

template <class T>
std::vector<double> to_double(const View<const T>& v) {
  std::vector<double> out(v.size);
  for (std::size_t i = 0; i < v.size; ++i) out[i] = static_cast<double>(v[i]);
  return out;
}

// ||got - want||_2 / ||want||_2; NaN when got has a NaN.
template <class T>
double rel_l2(const View<const T>& got, const std::vector<double>& want) {
  // In units of a power of two near the largest |want|: exact, and the squares neither
  // underflow to 0 for values near 1e-300 (which made every error 0) nor overflow for
  // values near 1e300. A NaN or inf in `got` still gives NaN or inf.
  double largest = 0;
  for (double w : want)
    if (std::isfinite(w)) largest = std::max(largest, std::fabs(w));
  int exponent = 0;
  if (largest > 0) std::frexp(largest, &exponent);
  double e2 = 0, w2 = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = std::ldexp(static_cast<double>(got[i]), -exponent), w = std::ldexp(want[i], -exponent);
    e2 += (g - w) * (g - w);
    w2 += w * w;
  }
  return w2 > 0 ? std::sqrt(e2 / w2) : std::sqrt(e2);
}

template <class T, int D>
typename Plan<T, D>::Positions views_of(const Positions<T, D>& pos) {
  typename Plan<T, D>::Positions v;
  for (int d = 0; d < D; ++d) v[d] = View<const T>(pos[d]);
  return v;
}

// Positions as double for the reference.
template <class T, int D>
std::array<std::vector<double>, D> positions_as_double(const typename Plan<T, D>::Positions& v) {
  std::array<std::vector<double>, D> out;
  for (int d = 0; d < D; ++d) out[d] = to_double<T>(v[d]);
  return out;
}
template <int D>
std::array<const double*, D> pointers(const std::array<std::vector<double>, D>& v) {
  std::array<const double*, D> p{};
  for (int d = 0; d < D; ++d) p[d] = v[d].data();
  return p;
}

// The float64 reference of one property: the mesh it spreads to, and the values a mesh
// interpolates to at the particles.
template <int D>
std::vector<double> reference_spread(const Grid<D>& grid, const Kernel& kernel,
                                     const std::array<const double*, D>& positions, const std::vector<double>& q) {
  std::vector<double> mesh(static_cast<std::size_t>(mesh_size(grid, kernel.ghost_width())));
  const double* qp = q.data();
  double* mp = mesh.data();
  reference::spread<D>(grid, kernel, q.size(), positions, 1, &qp, &mp);
  return mesh;
}
template <int D>
std::vector<double> reference_interp(const Grid<D>& grid, const Kernel& kernel,
                                     const std::array<const double*, D>& positions, std::size_t n,
                                     const std::vector<double>& mesh) {
  std::vector<double> values(n);
  const double* mp = mesh.data();
  double* vp = values.data();
  reference::interp<D>(grid, kernel, n, positions, 1, &mp, &vp);
  return values;
}

// Byte-for-byte equality, for bitwise determinism and "left unchanged" checks.
template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace pmkit::test
