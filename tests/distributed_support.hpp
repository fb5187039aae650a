#pragma once
// Helpers of the distributed plan's tests (run under mpirun): the ranks, shared seeds,
// rank shares of global particles and their migrate, the single-rank results to compare
// with, and the backend matrix's rank variants (MatrixDistributedPlan stages CUDA ranks'
// arrays through device memory).
#include <mpi.h>

#include <cstring>
#include <set>

#include "matrix_plan.hpp"
#include "pmkit/distributed.hpp"
#include "pmkit/distributed_fft.hpp"
#include "test_support.hpp"

namespace pmkit::test {

inline int world_rank() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// One fresh seed for all ranks.
inline std::uint64_t shared_seed() {
  std::uint64_t s = fresh_seed();
  MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return s;
}

inline long long sum_over_ranks(long long v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

// The values of a single-rank mesh (shape `shape`) in a rank's block.
template <class T, int D>
std::vector<T> cut_block(const std::vector<T>& mesh, const std::array<std::int64_t, D>& shape, const Block<D>& b) {
  std::int64_t size = 1;
  for (auto e : b.shape) size *= e;
  std::vector<T> out(static_cast<std::size_t>(size));
  for (std::int64_t k = 0; k < size; ++k) {
    std::int64_t rest = k, index = 0, stride = 1;
    for (int d = 0; d < D; ++d) {
      index += (b.first_node[d] + rest % b.shape[d]) * stride;
      rest /= b.shape[d];
      stride *= shape[d];
    }
    out[k] = mesh[index];
  }
  return out;
}

// Largest |a - b| over the entries, and the largest |b|.
template <class T>
std::pair<double, double> max_difference(const std::vector<T>& a, const std::vector<T>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return {diff, scale};
}

// migrate's layout of the staying particles, from the ids before (`before`) and after
// (the first `count` of `after`): a particle that stays keeps its slot, except that those
// past the kept count fill, in their order, the slots the leaving ones left below it.
template <class T>
void expect_kept_layout(const std::vector<T>& before, const std::vector<T>& after, std::size_t count) {
  const std::set<T> present(after.begin(), after.begin() + count);
  std::vector<bool> stays(before.size());
  std::size_t kept = 0;
  for (std::size_t i = 0; i < before.size(); ++i) kept += stays[i] = present.count(before[i]) > 0;
  std::vector<T> expected(kept);
  std::size_t from = kept;
  for (std::size_t i = 0; i < kept; ++i) {
    if (stays[i]) {
      expected[i] = before[i];
      continue;
    }
    while (!stays[from]) ++from;
    expected[i] = before[from++];
  }
  EXPECT_EQ(std::vector<T>(after.begin(), after.begin() + kept), expected)
      << "the staying particles' slots after migrate, rank " << world_rank();
}

// A rank's particles: positions, charge and the global index, in arrays of `capacity` slots.
template <class T, int D>
struct Share {
  Positions<T, D> x;
  std::vector<T> q, id;
  std::size_t count = 0;

  Share(std::size_t capacity) : q(capacity), id(capacity) {
    for (auto& c : x) c.resize(capacity);
  }
  template <class Plan>
  std::size_t migrate(Plan& plan) {
    std::array<View<T>, D> positions;
    for (int d = 0; d < D; ++d) positions[d] = View<T>(x[d]);
    const std::vector<T> before(id.begin(), id.begin() + count);
    count = plan.migrate(positions, {View<T>(q), View<T>(id)}, count);
    expect_kept_layout(before, id, count);
    return count;
  }
  std::array<View<const T>, D> positions() const {
    std::array<View<const T>, D> p;
    for (int d = 0; d < D; ++d) p[d] = View<const T>(x[d].data(), count);
    return p;
  }
};

// Every particle: the share of a rank that holds them all.
template <class T, int D>
Share<T, D> all_particles(const Positions<T, D>& x, const std::vector<T>& q) {
  Share<T, D> s(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) {
    for (int d = 0; d < D; ++d) s.x[d][i] = x[d][i];
    s.q[i] = q[i];
    s.id[i] = static_cast<T>(i);
  }
  s.count = q.size();
  return s;
}

// The entries whose bits differ.
template <class T>
std::size_t differing_bits(const std::vector<T>& a, const std::vector<T>& b) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < a.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return count;
}

// The code of the pmkit::Error that f throws, Ok if none.
template <class F>
ErrorCode error_code_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::Ok;
}

// The GPUs there are (0 without a driver, a device or the CUDA backend: CUDA ranks skip).
inline int visible_gpus() {
#if defined(PMKIT_WITH_CUDA)
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess) return devices;
  cudaGetLastError();
#endif
  return 0;
}

// The variants of the backend matrix a rank runs: CPU ranks, and CUDA ranks (one GPU
// each, round-robin over the GPUs there are), whose arrays are device memory: the
// automatic spread and the deterministic one, which the distributed plan implements
// itself. The explicit CUDA spread methods are the rank's local Plan's, which the mesh
// plan's matrix covers; on CUDA ranks each would repeat the exchanges' NCCL set-up. The
// tests keep their arrays on the host; MatrixDistributedPlan stages them through the
// device.
inline std::vector<Variant> rank_variants() {
  std::vector<Variant> out;
  for (const Variant& v : variants_for<Options>())
    if (!on_cuda(v) || (v.memory == Memory::Device && v.method == SpreadMethod::Auto)) out.push_back(v);
  return out;
}

// A variant's options on this rank (CUDA: this rank's GPU, made current).
inline Options rank_options(const Variant& v) {
  Options o = options_of<Options>(v);
#if defined(PMKIT_WITH_CUDA)
  if (on_cuda(v)) {
    o.device = world_rank() % visible_gpus();
    cuda::check(cudaSetDevice(o.device), "cudaSetDevice");
  }
#endif
  return o;
}

// A test body on every rank variant; CUDA ranks skip where no GPU is found.
class RankVariantTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    bc_ = GetParam();
    PMKIT_REQUIRE_VARIANT(bc_);
    if (on_cuda(bc_) && visible_gpus() == 0) GTEST_SKIP() << bc_.label << ": no GPU for the ranks";
  }
  Options options() const { return rank_options(bc_); }
  Variant bc_{};
};

// Whether this build has DistributedRealFft on CPU ranks (FFTW's MPI interface found at
// configure time; the field solves of PME and PIC across CPU ranks need it too).
inline bool built_with_fftw_mpi() {
  static const bool built = [] {
    try {
      DistributedRealFft<float, 2> probe(MPI_COMM_SELF, {2, 2});
      return true;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Unsupported) throw;
      return false;
    }
  }();
  return built;
}
#define PMKIT_REQUIRE_CPU_RANK_FFT(backend)                                   \
  if ((backend) == ::pmkit::Backend::Cpu && !::pmkit::test::built_with_fftw_mpi()) \
  GTEST_SKIP() << "this build has no FFTW MPI interface (the distributed FFT on CPU ranks)"

// Whether CUDA ranks share GPUs: more ranks than GPUs (rank_options deals them
// round-robin), where NCCL refuses them and Transport::Auto takes host-staged MPI.
inline bool ranks_share_gpus() { return world_size() > visible_gpus(); }

// The transports a variant's ranks take in turn (case by case): the CPU's one, CUDA's
// NCCL (Auto where ranks share a GPU: host-staged MPI) and host MPI.
inline Transport transport_for(const Variant& v, int case_number) {
  if (!on_cuda(v)) return Transport::Auto;
  if (case_number % 2 == 1) return Transport::HostMpi;
  return ranks_share_gpus() ? Transport::Auto : Transport::Nccl;
}

// The distributed plan on host arrays for every variant: CUDA ranks' calls take device
// copies (DeviceStage, matrix_plan.hpp) and copy the outputs back.
template <class T, int D>
class MatrixDistributedPlan {
 public:
  MatrixDistributedPlan(MPI_Comm comm, const Grid<D>& grid, const Kernel& kernel, const Options& options,
                        const RankGrid<D>& split = {}, Transport transport = Transport::Auto)
      : plan_(comm, grid, kernel, options, split, transport), device_(options.backend == Backend::Cuda) {}

  std::size_t migrate(const std::array<View<T>, D>& positions, Span<View<T>> props, std::size_t count) {
    std::size_t kept = count;
    with_memory(
        device_, [&](const std::array<View<T>, D>& x, Span<View<T>> p) { kept = plan_.migrate(x, p, count); },
        positions, props);
    return kept;
  }
  void set_points(const std::array<View<const T>, D>& positions) {
    with_memory(device_, [&](const std::array<View<const T>, D>& x) { plan_.set_points(x); }, positions);
  }
  void update_points(const std::array<View<const T>, D>& positions) {
    with_memory(device_, [&](const std::array<View<const T>, D>& x) { plan_.update_points(x); }, positions);
  }
  void permute_to_binned(Span<View<const T>> from, Span<View<T>> to) {
    with_memory(device_, [&](Span<View<const T>> f, Span<View<T>> t) { plan_.permute_to_binned(f, t); }, from, to);
  }
  void spread(Span<View<const T>> props, Span<View<T>> meshes, Accumulate mode = Accumulate::Overwrite) {
    with_memory(device_, [&](Span<View<const T>> q, Span<View<T>> m) { plan_.spread(q, m, mode); }, props, meshes);
  }
  void spread_gradient(Span<View<const T>> vectors, Span<View<T>> meshes) {
    with_memory(device_, [&](Span<View<const T>> v, Span<View<T>> m) { plan_.spread_gradient(v, m); }, vectors,
                meshes);
  }
  void interp(Span<View<const T>> meshes, Span<View<T>> values) {
    with_memory(device_, [&](Span<View<const T>> m, Span<View<T>> v) { plan_.interp(m, v); }, meshes, values);
  }
  void interp_gradient(Span<View<const T>> meshes, Span<View<T>> gradients) {
    with_memory(device_, [&](Span<View<const T>> m, Span<View<T>> g) { plan_.interp_gradient(m, g); }, meshes,
                gradients);
  }
  void synchronize() { plan_.synchronize(); }
  void set_overlap(Overlap overlap) { plan_.set_overlap(overlap); }
  DistributedTimings last_timings() const { return plan_.last_timings(); }
  const Block<D>& block() const { return plan_.block(); }
  std::array<std::int64_t, D> block_shape() const { return plan_.block_shape(); }
  std::int64_t block_size() const { return plan_.block_size(); }
  int rank() const { return plan_.rank(); }
  int owner(const std::array<double, D>& position) const { return plan_.owner(position); }
  Transport transport() const { return plan_.transport(); }
  const Options& options() const { return plan_.options(); }

 private:
  DistributedPlan<T, D> plan_;
  bool device_;
};

// Every size-th particle from this rank's number: a start that ignores the blocks.
template <class T, int D>
Share<T, D> deal(const Positions<T, D>& x, const std::vector<T>& q, std::size_t capacity) {
  Share<T, D> s(capacity);
  for (std::size_t i = world_rank(); i < q.size(); i += world_size()) {
    for (int d = 0; d < D; ++d) s.x[d][s.count] = x[d][i];
    s.q[s.count] = q[i];
    s.id[s.count] = static_cast<T>(i);
    ++s.count;
  }
  return s;
}

// Particles of every kind the single-rank tests use: uniform, clustered, on faces and
// nodes, on the ends and the periodic seam, wrapped from far away.
template <class T, int D>
Positions<T, D> mixed_positions(const Grid<D>& grid, std::size_t n, std::mt19937_64& rng) {
  Positions<T, D> x;
  const Distribution kinds[] = {Distribution::Uniform, Distribution::Clustered, Distribution::Faces, Distribution::Seam};
  for (int k = 0; k < 4; ++k) {
    const Positions<T, D> part = make_positions<T, D>(grid, kinds[k], n / 4 + (k == 0 ? n % 4 : 0), rng);
    for (int d = 0; d < D; ++d) x[d].insert(x[d].end(), part[d].begin(), part[d].end());
  }
  return x;
}

template <class T>
double tolerance_of() {
  return std::is_same<T, float>::value ? 2e-5 : 1e-12;
}

// The single-rank plan's results on particles x, random charges q, vectors v and a random
// mesh f: the spread rho, interp's phi, interp_gradient's grad and spread_gradient's div.
template <class T, int D>
struct SingleRank {
  std::vector<T> q, rho, f, phi, div;
  std::vector<std::vector<T>> grad, v;
  std::array<std::int64_t, D> shape;

  SingleRank(const Grid<D>& grid, const Kernel& kernel, const Positions<T, D>& x, std::mt19937_64& rng) {
    const std::size_t n = x[0].size();
    q = random_values<T>(n, rng);
    Plan<T, D> plan(grid, kernel);
    std::array<View<const T>, D> all;
    for (int d = 0; d < D; ++d) all[d] = View<const T>(x[d]);
    plan.set_points(all);
    shape = plan.mesh_shape();
    rho.resize(plan.mesh_size());
    f = random_values<T>(plan.mesh_size(), rng);
    phi.resize(n);
    grad.assign(D, std::vector<T>(n));
    plan.spread({View<const T>(q)}, {View<T>(rho)});
    plan.interp({View<const T>(f)}, {View<T>(phi)});
    std::vector<View<T>> grad_views(grad.begin(), grad.end());
    plan.interp_gradient({View<const T>(f)}, grad_views);
    for (int d = 0; d < D; ++d) v.push_back(random_values<T>(n, rng));
    div.resize(plan.mesh_size());
    plan.spread_gradient(std::vector<View<const T>>(v.begin(), v.end()), {View<T>(div)});
  }
};

}  // namespace pmkit::test
