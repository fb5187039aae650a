// Over 600 lines: the one GPU benchmark, whose tables (reference cases, gradient, large mesh) share its timing and device fills.
// pmkit's CUDA backend next to the naive baselines, on the project's reference cases.
// Every figure comes from this run on this device: medians of CUDA-event timings after
// warm-up, the copy bandwidth measured here, and (with --torch FILE) the PyTorch
// formulation timed by bench/torch_baseline.py in the same device.sh call.
//
//   gpu_bench [--quick] [--torch torch.csv] [--case NAME]... [--method tiles|atomics|cells]
//   gpu_bench --gradient [--quick]
// (several --case: those cases, p2m-linear-3d-f-2^30-2048 the mesh past 2^32 nodes, which
// a full run ends with; --method: spread by that method wherever it applies,
// the other cases are listed as skipped; --gradient: the gradient table alone,
// interp_gradient and spread_gradient next to interp, spread and the finite-difference
// route, with issue 33's targets)
#include <cuda_runtime.h>

#include "bench/cuda_check.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/naive_baseline.cuh"
#include "pmkit/detail/layout.hpp"
#include "pmkit/pmkit.hpp"

namespace {

using namespace pmkit;

using pmkit::bench::ck;

// Median of `reps` timed runs of f after `warm` untimed ones, in ms, by the one event
// timer on the default stream.
double median_ms(pmkit::cuda::EventTimer& timer, const std::function<void()>& f, int reps = 10, int warm = 2) {
  for (int i = 0; i < warm; ++i) f();
  ck(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    timer.start(nullptr);
    f();
    timer.stop(nullptr);
    t.push_back(timer.seconds("timed run") * 1e3);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Device-side uniform random numbers in [0, 1) (splitmix64 of seed and index), so 2^24
// particles start in ms.
__device__ double uniform01(unsigned long long seed, std::size_t i) {
  unsigned long long z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (z >> 11) * (1.0 / 9007199254740992.0);
}

// v wrapped into [0, period) and rounded to T, which may round up onto the seam: 0 then.
template <class T>
__device__ T wrap_into(double v, double period) {
  v -= period * floor(v / period);
  const T t = static_cast<T>(v);
  return t >= static_cast<T>(period) ? T(0) : t;
}

template <class T>
__global__ void fill_uniform(T* out, std::size_t n, double scale, unsigned long long seed) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = wrap_into<T>(uniform01(seed, i) * scale, scale);
}

// out = in + a uniform step in [-step, step), wrapped into [0, period) (periodic boxes).
template <class T>
__global__ void displace(T* out, const T* in, std::size_t n, double step, double period, unsigned long long seed) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = wrap_into<T>(static_cast<double>(in[i]) + (uniform01(seed, i) * 2.0 - 1.0) * step, period);
}

double copy_bandwidth_gbs(pmkit::cuda::EventTimer& timer) {
  const std::size_t bytes = std::size_t(1) << 30;
  pmkit::cuda::DeviceBuffer<char> a(bytes), b(bytes);
  ck(cudaMemset(a.get(), 1, bytes), "memset");
  const double ms = median_ms(timer, [&] { cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice); }, 10, 2);
  return 2.0 * bytes / (ms * 1e-3) / 1e9;  // read + write
}

// How far update_points' benchmark moves the particles: cells per axis, at most.
constexpr double kUpdateStep = 0.02;

struct Case {
  std::string name;
  int dim;
  std::string kernel;
  bool dbl;
  int log2n;
  int cells;
  int props;
  bool deterministic;
  bool binned_input = false;  // particle arrays first put in the plan's binned_order
  bool clustered = false;     // positions uniform in the first (cells / 8)^D corner: 512x (64x in 2D) denser
  bool interleaved_props = false;  // one array x0 y0 z0 x1 ..., the properties strided views into it
  SpreadMethod method = SpreadMethod::Auto;  // --method
};

struct Row {
  std::string name;
  double set_points, spread, interp, update, away_fraction, spread_updated, naive_unsorted, naive_sorted, sort, m2p_unsorted, m2p_sorted, torch_p2m,
      torch_m2p, floor_spread, floor_interp, rel_diff;
  std::string method;
};

double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

template <class T, int D, class K>
Row run_case(const Case& c, pmkit::cuda::EventTimer& timer, double bandwidth_gbs) {
  const std::size_t n = std::size_t(1) << c.log2n;
  std::array<std::int64_t, D> cells;
  cells.fill(c.cells);
  const Grid<D> grid = Grid<D>::periodic(cells);
  const Kernel kernel = Kernel::from_name(c.kernel);
  const auto layout = detail::make_layout(grid, kernel.ghost_width());
  const std::size_t mesh = static_cast<std::size_t>(layout.size);

  // Inputs: positions in [0, K), properties in [0, 1).
  std::vector<pmkit::cuda::DeviceBuffer<T>*> x, q, meshes;
  for (int d = 0; d < D; ++d) {
    x.push_back(new pmkit::cuda::DeviceBuffer<T>(n));
    fill_uniform<<<(n + 255) / 256, 256>>>(x[d]->get(), n, c.clustered ? c.cells / 8.0 : double(c.cells), 1000 + d);
  }
  if (c.binned_input && c.interleaved_props) {
    std::fprintf(stderr, "gpu_bench: case %s: binned input takes one array a property\n", c.name.c_str());
    std::exit(2);
  }
  // Properties: one array each, or (interleaved_props) one array of all, where
  // property j starts at element j with stride q_stride; the sorted copies alike.
  const int q_stride = c.interleaved_props ? c.props : 1;
  if (c.interleaved_props) {
    q.push_back(new pmkit::cuda::DeviceBuffer<T>(n * c.props));
    fill_uniform<<<(n * c.props + 255) / 256, 256>>>(q[0]->get(), n * c.props, 1.0, 2000);
  }
  for (int j = 0; j < c.props; ++j) {
    if (!c.interleaved_props) {
      q.push_back(new pmkit::cuda::DeviceBuffer<T>(n));
      fill_uniform<<<(n + 255) / 256, 256>>>(q[j]->get(), n, 1.0, 2000 + j);
    }
    meshes.push_back(new pmkit::cuda::DeviceBuffer<T>(mesh));
  }
  auto prop_of = [&](const std::vector<pmkit::cuda::DeviceBuffer<T>*>& arrays, int j) {
    return c.interleaved_props ? arrays[0]->get() + j : arrays[j]->get();
  };
  pmkit::cuda::DeviceBuffer<T> values(n), naive_values(n);
  ck(cudaDeviceSynchronize(), "inputs");
  if (c.binned_input) {  // as a caller who keeps its particles in the plan's order would
    Options opt;
    opt.backend = Backend::Cuda;
    Plan<T, D> sorter(grid, kernel, opt);
    typename Plan<T, D>::Positions p;
    for (int d = 0; d < D; ++d) p[d] = View<const T>(x[d]->get(), n);
    sorter.set_points(p);
    pmkit::cuda::DeviceBuffer<std::uint32_t> order(n);
    sorter.binned_order(View<std::uint32_t>(order.get(), n));
    for (auto* arrays : {&x, &q})
      for (auto*& a : *arrays) {
        auto* reordered = new pmkit::cuda::DeviceBuffer<T>(n);
        bench::gather_by<<<(n + 255) / 256, 256>>>(order.get(), n, a->get(), reordered->get());
        ck(cudaDeviceSynchronize(), "reorder");
        delete a;
        a = reordered;
      }
  }

  Row row{};
  row.name = c.name;
  Options opt;
  opt.backend = Backend::Cuda;
  opt.deterministic = c.deterministic;
  opt.spread_method = c.method;
  Plan<T, D> plan(grid, kernel, opt);
  typename Plan<T, D>::Positions pos;
  for (int d = 0; d < D; ++d) pos[d] = View<const T>(x[d]->get(), n);
  std::vector<View<const T>> props;
  std::vector<View<T>> mesh_views;
  for (int j = 0; j < c.props; ++j) {
    props.emplace_back(prop_of(q, j), n, q_stride);
    mesh_views.emplace_back(meshes[j]->get(), mesh);
  }
  row.set_points = median_ms(timer, [&] { plan.set_points(pos); }, 5, 1);
  row.method = plan.spread_method_name();
  row.spread = median_ms(timer, [&] { plan.spread(props, mesh_views); });
  const std::vector<T> pmkit_mesh = meshes[0]->download();
  row.interp = median_ms(timer, [&] { plan.interp({View<const T>(meshes[0]->get(), mesh)}, {View<T>(values.get(), n)}); });

  // update_points after a small move (up to kUpdateStep cells per axis), then a spread.
  std::vector<pmkit::cuda::DeviceBuffer<T>*> moved;
  typename Plan<T, D>::Positions moved_pos;
  for (int d = 0; d < D; ++d) {
    moved.push_back(new pmkit::cuda::DeviceBuffer<T>(n));
    displace<<<(n + 255) / 256, 256>>>(moved[d]->get(), x[d]->get(), n, kUpdateStep, double(c.cells), 3000 + d);
    moved_pos[d] = View<const T>(moved[d]->get(), n);
  }
  row.update = median_ms(timer, [&] { plan.update_points(moved_pos); }, 5, 1);
  row.away_fraction = static_cast<double>(plan.num_away()) / static_cast<double>(n);
  row.spread_updated = median_ms(timer, [&] { plan.spread(props, mesh_views); });
  for (auto* a : moved) delete a;

  // Naive baselines on the same arrays.
  bench::Particles<D, T> raw{};
  for (int d = 0; d < D; ++d) raw.x[d] = x[d]->get();
  for (int j = 0; j < c.props; ++j) raw.q[j] = prop_of(q, j);
  raw.props = c.props;
  raw.q_stride = q_stride;
  pmkit::cuda::DeviceBuffer<T*> mesh_ptrs(c.props);
  std::vector<T*> hp;
  for (auto* m : meshes) hp.push_back(m->get());
  ck(cudaMemcpy(mesh_ptrs.get(), hp.data(), hp.size() * sizeof(T*), cudaMemcpyHostToDevice), "ptrs");
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  auto naive_spread = [&](const bench::Particles<D, T>& p) {
    for (auto* m : meshes) cudaMemsetAsync(m->get(), 0, mesh * sizeof(T));
    bench::naive_p2m<K, D, T><<<blocks, 256>>>(layout, p, n, mesh_ptrs.get());
  };
  row.naive_unsorted = median_ms(timer, [&] { naive_spread(raw); });
  row.m2p_unsorted = median_ms(timer, [&] { bench::naive_m2p<K, D, T><<<blocks, 256>>>(layout, raw, n, meshes[0]->get(), naive_values.get()); });

  // Sorted: CUB radix sort of cell keys, then a gather of every array.
  pmkit::cuda::DeviceBuffer<unsigned> keys(n), keys_out(n), index(n), index_out(n);
  std::vector<pmkit::cuda::DeviceBuffer<T>*> xs, qs;
  for (int d = 0; d < D; ++d) xs.push_back(new pmkit::cuda::DeviceBuffer<T>(n));
  for (std::size_t j = 0; j < q.size(); ++j) qs.push_back(new pmkit::cuda::DeviceBuffer<T>(n * q_stride));
  std::size_t temp_bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys.get(), keys_out.get(), index.get(), index_out.get(), static_cast<int>(n));
  pmkit::cuda::DeviceBuffer<char> temp(temp_bytes);
  int bits = 0;
  while ((std::size_t(1) << bits) < static_cast<std::size_t>(layout.size)) ++bits;
  row.sort = median_ms(timer, [&] {
    bench::cell_keys<D, T><<<blocks, 256>>>(layout, raw, n, keys.get(), index.get());
    cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, keys.get(), keys_out.get(), index.get(), index_out.get(), static_cast<int>(n), 0, bits);
    for (int d = 0; d < D; ++d) bench::gather_by<<<blocks, 256>>>(index_out.get(), n, x[d]->get(), xs[d]->get());
    for (int j = 0; j < c.props; ++j)
      bench::gather_by<<<blocks, 256>>>(index_out.get(), n, prop_of(q, j), prop_of(qs, j), q_stride, q_stride);
  }, 5, 1);
  bench::Particles<D, T> sorted = raw;
  for (int d = 0; d < D; ++d) sorted.x[d] = xs[d]->get();
  for (int j = 0; j < c.props; ++j) sorted.q[j] = prop_of(qs, j);
  row.naive_sorted = median_ms(timer, [&] { naive_spread(sorted); });
  row.m2p_sorted = median_ms(timer, [&] { bench::naive_m2p<K, D, T><<<blocks, 256>>>(layout, sorted, n, meshes[0]->get(), naive_values.get()); });
  ck(cudaGetLastError(), "baselines");

  // pmkit against the naive result (both float; the tests check against float64).
  const std::vector<T> naive_mesh = meshes[0]->download();
  row.rel_diff = rel_l2(std::vector<double>(pmkit_mesh.begin(), pmkit_mesh.end()),
                        std::vector<double>(naive_mesh.begin(), naive_mesh.end()));

  // Bandwidth floor: positions and properties read once, each mesh written once.
  const double spread_bytes = double(n) * (D + c.props) * sizeof(T) + double(mesh) * c.props * sizeof(T);
  const double interp_bytes = double(n) * (D + 1) * sizeof(T) + double(mesh) * sizeof(T);
  row.floor_spread = spread_bytes / (bandwidth_gbs * 1e9) * 1e3;
  row.floor_interp = interp_bytes / (bandwidth_gbs * 1e9) * 1e3;
  for (auto* a : x) delete a;
  for (auto* a : q) delete a;
  for (auto* a : meshes) delete a;
  for (auto* a : xs) delete a;
  for (auto* a : qs) delete a;
  return row;
}

// Only the kernels of the table are instantiated (keeps the CI build short).
template <class T, int D>
Row dispatch_kernel(const Case& c, pmkit::cuda::EventTimer& timer, double bw) {
  if (c.kernel == "mp4") return run_case<T, D, kernels::MP4>(c, timer, bw);
  if (c.kernel == "linear") return run_case<T, D, kernels::Linear>(c, timer, bw);
  if (c.kernel == "bspline4") return run_case<T, D, kernels::BSpline<4>>(c, timer, bw);
  if (c.kernel == "bspline6") return run_case<T, D, kernels::BSpline<6>>(c, timer, bw);
  std::fprintf(stderr, "gpu_bench: no baseline instantiated for kernel %s\n", c.kernel.c_str());
  std::exit(2);
}

Row run(const Case& c, pmkit::cuda::EventTimer& timer, double bw) {
  if (c.dim == 2) return c.dbl ? dispatch_kernel<double, 2>(c, timer, bw) : dispatch_kernel<float, 2>(c, timer, bw);
  return c.dbl ? dispatch_kernel<double, 3>(c, timer, bw) : dispatch_kernel<float, 3>(c, timer, bw);
}

std::map<std::string, double> read_torch(const std::string& file) {
  std::map<std::string, double> t;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const auto comma = line.find(',');
    if (comma == std::string::npos || line[0] == '#') continue;
    t[line.substr(0, comma)] = std::atof(line.c_str() + comma + 1);
  }
  return t;
}

// ---------------------------------------------------------------------------------
// A mesh past 2^32 nodes: CIC, 2^30 particles on a periodic 2048^3 float mesh (2^33
// nodes, 32 GiB), the cosmology particle-mesh size. Positions and charges (16 GiB), the
// mesh, the binning of 2^30 unsorted particles (records, permutation, the run sort's
// arrays and CUB's scratch: about 63 GiB), spread's property move and interp's outputs
// (12 GiB) need kLargeMeshBytes free, or the row is skipped. set_points is timed once: a second
// binning beside the first would not fit (that first call includes its allocations).

constexpr std::size_t kLargeMeshBytes = std::size_t(124) << 30;
const char* const kLargeMeshCase = "p2m-linear-3d-f-2^30-2048";

void run_large_mesh_row(SpreadMethod method, pmkit::cuda::EventTimer& timer) {
  std::printf("\nA mesh past 2^32 nodes: CIC, 2^30 uniform particles, periodic 2048^3 float, ms; set_points: one\n"
              "call (allocations included); ratio = naive / pmkit; naive-s n/a: its 32-bit cell keys do not hold\n"
              "2^33 cells\n");
  std::size_t free_bytes = 0, total_bytes = 0;
  ck(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  if (free_bytes < kLargeMeshBytes) {
    std::printf("%-30s skipped: needs %zu GiB of free device memory, the device has %zu GiB\n", kLargeMeshCase,
                kLargeMeshBytes >> 30, free_bytes >> 30);
    return;
  }
  using T = float;
  constexpr int D = 3;
  const std::size_t n = std::size_t(1) << 30;
  const int cells = 2048;
  const Grid<D> grid = Grid<D>::periodic({cells, cells, cells});
  const Kernel kernel = Kernel::linear();
  const auto layout = detail::make_layout(grid, kernel.ghost_width());
  const auto mesh_nodes = static_cast<std::size_t>(layout.size);
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  pmkit::cuda::DeviceBuffer<T> x[D] = {pmkit::cuda::DeviceBuffer<T>(n), pmkit::cuda::DeviceBuffer<T>(n),
                                       pmkit::cuda::DeviceBuffer<T>(n)};
  pmkit::cuda::DeviceBuffer<T> q(n), mesh(mesh_nodes);
  for (int d = 0; d < D; ++d) fill_uniform<<<blocks, 256>>>(x[d].get(), n, double(cells), 1000 + d);
  fill_uniform<<<blocks, 256>>>(q.get(), n, 1.0, 2000);
  ck(cudaDeviceSynchronize(), "inputs");

  Options opt;
  opt.backend = Backend::Cuda;
  opt.spread_method = method;
  Plan<T, D> plan(grid, kernel, opt);
  typename Plan<T, D>::Positions pos;
  for (int d = 0; d < D; ++d) pos[d] = View<const T>(x[d].get(), n);
  const std::vector<View<const T>> props{View<const T>(q.get(), n)};
  const std::vector<View<T>> meshes{View<T>(mesh.get(), mesh_nodes)};
  timer.start(nullptr);
  plan.set_points(pos);
  timer.stop(nullptr);
  const double set_points = timer.seconds("set_points") * 1e3;
  const double spread = median_ms(timer, [&] { plan.spread(props, meshes); }, 3, 1);
  double interp = NAN;
  {
    pmkit::cuda::DeviceBuffer<T> values(n);
    try {
      interp = median_ms(timer, [&] { plan.interp({View<const T>(mesh.get(), mesh_nodes)}, {View<T>(values.get(), n)}); },
                         3, 1);
    } catch (const pmkit::Error& e) {
      std::printf("%-30s interp skipped: %s\n", kLargeMeshCase, e.what());
    }
  }
  bench::Particles<D, T> raw{};
  for (int d = 0; d < D; ++d) raw.x[d] = x[d].get();
  raw.q[0] = q.get();
  raw.props = 1;
  pmkit::cuda::DeviceBuffer<T*> mesh_ptr(1);
  T* const hp = mesh.get();
  ck(cudaMemcpy(mesh_ptr.get(), &hp, sizeof(T*), cudaMemcpyHostToDevice), "ptrs");
  const double naive = median_ms(timer, [&] {
    cudaMemsetAsync(mesh.get(), 0, mesh_nodes * sizeof(T));
    bench::naive_p2m<kernels::Linear, D, T><<<blocks, 256>>>(layout, raw, n, mesh_ptr.get());
  }, 3, 1);
  ck(cudaGetLastError(), "baseline");
  std::printf("%-30s %8s %8s %8s %8s %8s | %8s\n", "case", "set_pts", "pmkit", "naive-u", "x naive", "naive-s",
              "interp");
  std::printf("%-30s %8.1f %8.1f %8.1f %8.1f %8s | %8.1f\n", kLargeMeshCase, set_points, spread, naive,
              naive / spread, "n/a", interp);
  std::printf("%-30s method %s\n", kLargeMeshCase, plan.spread_method_name().c_str());
}

// ---------------------------------------------------------------------------------
// --gradient: interp_gradient and spread_gradient (issue 33's benchmark)

// The finite-difference route's first step: the D gradient meshes of a periodic mesh by
// central differences, (f[i + 1] - f[i - 1]) / 2h along each axis (h = 1 here).
template <class T, int D>
__global__ void central_differences(detail::Layout<D> layout, const T* f, T* const* gradients) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= layout.size) return;
  std::int64_t rest = i;
  for (int d = 0; d < D; ++d) {
    const int nodes = layout.axis[d].nodes;
    const int k = static_cast<int>(rest % nodes);
    rest /= nodes;
    const std::int64_t stride = layout.stride[d];
    const std::int64_t up = k + 1 < nodes ? i + stride : i - (nodes - 1) * stride;
    const std::int64_t down = k > 0 ? i - stride : i + (nodes - 1) * stride;
    gradients[d][i] = (f[up] - f[down]) * static_cast<T>(0.5 / layout.axis[d].spacing);
  }
}

struct GradientRow {
  std::string name;
  double interp, gradient_interleaved, gradient_separate, fd_meshes, fd_total, spread, spread_gradient,
      spread_gradient_interleaved;
};

GradientRow run_gradient_case(const std::string& kernel_name, int log2n, int cells, pmkit::cuda::EventTimer& timer) {
  using T = float;
  constexpr int D = 3;
  const std::size_t n = std::size_t(1) << log2n;
  const Grid<D> grid = Grid<D>::periodic({cells, cells, cells});
  const Kernel kernel = Kernel::from_name(kernel_name);
  const auto layout = detail::make_layout(grid, kernel.ghost_width());
  const std::size_t mesh = static_cast<std::size_t>(layout.size);
  using Buffer = pmkit::cuda::DeviceBuffer<T>;
  std::vector<std::unique_ptr<Buffer>> x, separate, vectors, fd_meshes, fd_values;
  for (int d = 0; d < D; ++d) {
    x.emplace_back(new Buffer(n));
    fill_uniform<<<(n + 255) / 256, 256>>>(x.back()->get(), n, double(cells), 1000 + d);
    separate.emplace_back(new Buffer(n));
    vectors.emplace_back(new Buffer(n));
    fill_uniform<<<(n + 255) / 256, 256>>>(vectors.back()->get(), n, 1.0, 4000 + d);
    fd_meshes.emplace_back(new Buffer(mesh));
    fd_values.emplace_back(new Buffer(n));
  }
  Buffer field(mesh), values(n), interleaved(D * n), q(n), out_mesh(mesh), interleaved_vectors(D * n);
  fill_uniform<<<(mesh + 255) / 256, 256>>>(field.get(), mesh, 1.0, 5000);
  fill_uniform<<<(n + 255) / 256, 256>>>(q.get(), n, 1.0, 2000);
  fill_uniform<<<(D * n + 255) / 256, 256>>>(interleaved_vectors.get(), D * n, 1.0, 6000);
  ck(cudaDeviceSynchronize(), "inputs");

  Options opt;
  opt.backend = Backend::Cuda;
  Plan<T, D> plan(grid, kernel, opt);
  plan.set_points({View<const T>(x[0]->get(), n), View<const T>(x[1]->get(), n), View<const T>(x[2]->get(), n)});

  std::vector<View<T>> separate_views, interleaved_views, fd_value_views;
  std::vector<View<const T>> vector_views, interleaved_vector_views, fd_mesh_views;
  for (int d = 0; d < D; ++d) {
    separate_views.emplace_back(separate[d]->get(), n);
    interleaved_views.emplace_back(interleaved.get() + d, n, D);
    vector_views.emplace_back(vectors[d]->get(), n);
    interleaved_vector_views.emplace_back(interleaved_vectors.get() + d, n, D);
    fd_mesh_views.emplace_back(fd_meshes[d]->get(), mesh);
    fd_value_views.emplace_back(fd_values[d]->get(), n);
  }
  pmkit::cuda::DeviceBuffer<T*> fd_pointers(D);
  std::vector<T*> host_pointers;
  for (auto& m : fd_meshes) host_pointers.push_back(m->get());
  ck(cudaMemcpy(fd_pointers.get(), host_pointers.data(), D * sizeof(T*), cudaMemcpyHostToDevice), "pointers");
  const unsigned mesh_blocks = static_cast<unsigned>((mesh + 255) / 256);
  const View<const T> field_view(field.get(), mesh);

  GradientRow row{};
  row.name = kernel_name + "-2^" + std::to_string(log2n) + "-" + std::to_string(cells);
  row.interp = median_ms(timer, [&] { plan.interp({field_view}, {View<T>(values.get(), n)}); });
  row.gradient_interleaved = median_ms(timer, [&] { plan.interp_gradient({field_view}, interleaved_views); });
  row.gradient_separate = median_ms(timer, [&] { plan.interp_gradient({field_view}, separate_views); });
  row.fd_meshes = median_ms(timer, [&] {
    central_differences<T, D><<<mesh_blocks, 256>>>(layout, field.get(), fd_pointers.get());
  });
  row.fd_total = median_ms(timer, [&] {
    central_differences<T, D><<<mesh_blocks, 256>>>(layout, field.get(), fd_pointers.get());
    plan.interp(fd_mesh_views, fd_value_views);
  });
  const View<T> out_view(out_mesh.get(), mesh);
  row.spread = median_ms(timer, [&] { plan.spread({View<const T>(q.get(), n)}, {out_view}); });
  row.spread_gradient = median_ms(timer, [&] { plan.spread_gradient(vector_views, {out_view}); });
  row.spread_gradient_interleaved =
      median_ms(timer, [&] { plan.spread_gradient(interleaved_vector_views, {out_view}); });
  ck(cudaGetLastError(), "gradient case");
  return row;
}

void run_gradient_table(bool quick, pmkit::cuda::EventTimer& timer) {
  const int log2n = quick ? 20 : 24;
  std::vector<GradientRow> rows;
  for (int cells : {256, 128})
    for (const char* kernel : {"mp4", "linear"}) rows.push_back(run_gradient_case(kernel, log2n, cells, timer));
  std::printf("\nGradient at the particles, 3D float, uniform, periodic, one field, ms; ratios against the\n"
              "baselines of this run; [target] from issue 33. grad-il: interp_gradient into one interleaved\n"
              "array; grad-sep: into 3 arrays; FD: 3 gradient meshes by central differences (fd-mesh alone),\n"
              "then interp of 3 fields\n");
  std::printf("%-16s %8s %8s %8s %14s %10s %8s %8s %13s\n", "case", "interp", "grad-il", "grad-sep",
              "il/interp[<=1.5]", "sep/interp", "fd-mesh", "FD", "FD/il[>=2]");
  for (const auto& r : rows)
    std::printf("%-16s %8.3f %8.3f %8.3f %16.2f %10.2f %8.3f %8.3f %13.2f\n", r.name.c_str(), r.interp,
                r.gradient_interleaved, r.gradient_separate, r.gradient_interleaved / r.interp,
                r.gradient_separate / r.interp, r.fd_meshes, r.fd_total, r.fd_total / r.gradient_interleaved);
  std::printf("\nspread_gradient of one 3-vector a particle next to spread of one property, ms\n");
  std::printf("%-16s %8s %8s %8s %18s %10s\n", "case", "spread", "sgrad", "sgrad-il", "sgrad/spread[<=2]",
              "il/spread");
  for (const auto& r : rows)
    std::printf("%-16s %8.3f %8.3f %8.3f %18.2f %10.2f\n", r.name.c_str(), r.spread, r.spread_gradient,
                r.spread_gradient_interleaved, r.spread_gradient / r.spread, r.spread_gradient_interleaved / r.spread);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  bool gradient = false;
  SpreadMethod method = SpreadMethod::Auto;
  std::string torch_file;
  std::vector<std::string> only;
  long l2_fetch = -1;  // cudaLimitMaxL2FetchGranularity in bytes; -1: the device's default
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--gradient") gradient = true;
    else if (a == "--torch" && i + 1 < argc) torch_file = argv[++i];
    else if (a == "--case" && i + 1 < argc) only.push_back(argv[++i]);
    else if (a == "--l2-fetch" && i + 1 < argc) l2_fetch = std::atol(argv[++i]);
    else if (a == "--method" && i + 1 < argc) {
      const std::string m = argv[++i];
      if (m == "tiles") {
        method = SpreadMethod::CudaSharedTiles;
      } else if (m == "atomics") {
        method = SpreadMethod::CudaGlobalAtomics;
      } else if (m == "cells") {
        method = SpreadMethod::CudaCellMoments;
      } else {
        std::fprintf(stderr, "gpu_bench: --method tiles, atomics or cells\n");
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: gpu_bench [--quick] [--torch FILE] [--case NAME]... [--method tiles|atomics|cells] "
                   "[--l2-fetch BYTES] [--gradient]\n");
      return 2;
    }
  }
  // The reference cases (uniform random, periodic, h = 1); "-binned": the
  // same particles with every array first put in the plan's binned_order.
  std::vector<Case> cases = {
      {"p2m-mp4-3d-f-2^24-256", 3, "mp4", false, 24, 256, 1, false},
      {"p2m-mp4-3d-f-2^24-128", 3, "mp4", false, 24, 128, 1, false},
      {"p2m-mp4-3d-f-2^24-64", 3, "mp4", false, 24, 64, 1, false},
      {"p2m-mp4-3d-f-2^22-128", 3, "mp4", false, 22, 128, 1, false},
      {"p2m-mp4-3d-f-2^20-64", 3, "mp4", false, 20, 64, 1, false},
      {"p2m-linear-3d-f-2^24-256", 3, "linear", false, 24, 256, 1, false},
      {"p2m-linear-3d-f-2^24-128", 3, "linear", false, 24, 128, 1, false},
      {"p2m-bspline4-3d-f-2^24-128", 3, "bspline4", false, 24, 128, 1, false},
      {"p2m-bspline6-3d-f-2^24-128", 3, "bspline6", false, 24, 128, 1, false},
      {"p2m-mp4-3d-d-2^24-256", 3, "mp4", true, 24, 256, 1, false},
      {"p2m-mp4-3d-f-2^24-256-3props", 3, "mp4", false, 24, 256, 3, false},
      // The same three properties as one interleaved array (a 3-vector stored x y z per
      // particle), passed as strided views: one DRAM burst a particle for all three.
      {"p2m-mp4-3d-f-2^24-256-3props-aos", 3, "mp4", false, 24, 256, 3, false, false, false, true},
      {"p2m-mp4-3d-d-2^22-128-3props", 3, "mp4", true, 22, 128, 3, false},
      {"p2m-mp4-2d-f-2^22-2048", 2, "mp4", false, 22, 2048, 1, false},
      {"p2m-linear-2d-f-2^22-2048", 2, "linear", false, 22, 2048, 1, false},
      {"p2m-mp4-2d-f-2^24-512", 2, "mp4", false, 24, 512, 1, false},
      {"p2m-mp4-3d-f-2^24-256-binned", 3, "mp4", false, 24, 256, 1, false, true},
      {"p2m-linear-3d-f-2^24-256-binned", 3, "linear", false, 24, 256, 1, false, true},
      {"p2m-mp4-3d-f-2^24-256-3props-binned", 3, "mp4", false, 24, 256, 3, false, true},
      {"p2m-mp4-3d-d-2^24-256-binned", 3, "mp4", true, 24, 256, 1, false, true},
      {"p2m-mp4-3d-f-2^24-128-binned", 3, "mp4", false, 24, 128, 1, false, true},
      {"p2m-linear-2d-f-2^22-2048-binned", 2, "linear", false, 22, 2048, 1, false, true},
      {"det-mp4-3d-f-2^24-256", 3, "mp4", false, 24, 256, 1, true},
      {"det-mp4-3d-f-2^24-128", 3, "mp4", false, 24, 128, 1, true},
      {"det-mp4-3d-f-2^24-64", 3, "mp4", false, 24, 64, 1, true},
      // Dense cells beyond BENCHMARKS.md: PIC's CIC deposit at 64 a cell; clustered
      // particles (2^20 in the first 16^3 cells: 256 a cell there, the rest empty).
      {"p2m-linear-3d-f-2^24-64", 3, "linear", false, 24, 64, 1, false},
      {"p2m-mp4-3d-f-2^20-128-clustered", 3, "mp4", false, 20, 128, 1, false, false, true},
      {"p2m-linear-3d-f-2^20-128-clustered", 3, "linear", false, 20, 128, 1, false, false, true},
      {"p2m-mp4-2d-f-2^20-1024-clustered", 2, "mp4", false, 20, 1024, 1, false, false, true},
      // Denser clusters (1024 a cell in 3D, 256 in 2D): 512 and 256 chunks a tile, past
      // tuning::kHeavyTileChunks, where the fast float spread flushes through a tile's
      // double window (flush_heavy).
      {"p2m-mp4-3d-f-2^22-128-clustered", 3, "mp4", false, 22, 128, 1, false, false, true},
      {"p2m-linear-3d-f-2^22-128-clustered", 3, "linear", false, 22, 128, 1, false, false, true},
      {"p2m-mp4-2d-f-2^22-1024-clustered", 2, "mp4", false, 22, 1024, 1, false, false, true},
      // Sparse: around Auto's switches between tiles and one thread a particle (tuning,
      // kSpreadTileMinNodesPerWindowNode): 32, 8, 4 and 2 a tile in 3D, 64 and 16 in 2D; the
      // 256^3 and 4096^2 meshes (64 MB) are larger than the H100's L2, 2048^2 is not.
      {"p2m-mp4-3d-f-2^20-256", 3, "mp4", false, 20, 256, 1, false},
      {"p2m-mp4-3d-f-2^18-256", 3, "mp4", false, 18, 256, 1, false},
      {"p2m-mp4-3d-f-2^17-256", 3, "mp4", false, 17, 256, 1, false},
      {"p2m-mp4-3d-f-2^16-256", 3, "mp4", false, 16, 256, 1, false},
      {"p2m-linear-2d-f-2^18-2048", 2, "linear", false, 18, 2048, 1, false},
      {"p2m-mp4-2d-f-2^16-2048", 2, "mp4", false, 16, 2048, 1, false},
      {"p2m-mp4-2d-f-2^20-4096", 2, "mp4", false, 20, 4096, 1, false},
      {"p2m-linear-2d-f-2^20-4096", 2, "linear", false, 20, 4096, 1, false},
      // A mesh size that is not a multiple of 4 (users' meshes are any size): the tile
      // flush cannot add x-quads with float4 atomics there (TileWindow::first_quad_x).
      {"p2m-mp4-3d-f-2^24-255", 3, "mp4", false, 24, 255, 1, false},
  };
  for (auto& c : cases)
    if (!c.deterministic) c.method = method;
  if (quick)
    for (auto& c : cases) c.log2n = std::min(c.log2n, 20);
  const auto torch = torch_file.empty() ? std::map<std::string, double>{} : read_torch(torch_file);

  // The L2's fetch granularity is a device-wide hint (0-128 bytes) that applies to the
  // baselines as much as to pmkit: --l2-fetch asks for one, and the device line says what
  // the device took.
  if (l2_fetch >= 0) ck(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, static_cast<std::size_t>(l2_fetch)), "L2 fetch");
  std::size_t l2_fetch_now = 0;
  ck(cudaDeviceGetLimit(&l2_fetch_now, cudaLimitMaxL2FetchGranularity), "L2 fetch");
  pmkit::cuda::EventTimer timer;
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "properties");
  const double bw = copy_bandwidth_gbs(timer);
  std::printf("device: %s, %d SMs; copy bandwidth (read+write) %.0f GB/s; L2 fetch granularity %zu B\n", prop.name,
              prop.multiProcessorCount, bw, l2_fetch_now);
  if (gradient) {
    run_gradient_table(quick, timer);
    return 0;
  }

  std::vector<Row> rows;
  for (const auto& c : cases) {
    if (!only.empty() && std::find(only.begin(), only.end(), c.name) == only.end()) continue;
    Row r;
    try {
      r = run(c, timer, bw);
    } catch (const pmkit::Error& e) {  // a forced --method that does not take this case
      std::printf("%-30s skipped: %s\n", c.name.c_str(), e.what());
      continue;
    }
    auto t = torch.find(c.name);
    r.torch_p2m = t == torch.end() ? NAN : t->second;
    auto tm = torch.find("m2p" + c.name.substr(3));
    r.torch_m2p = tm == torch.end() ? NAN : tm->second;
    std::printf("%-30s method %-44s set_points %.3f ms, |pmkit - naive| / |naive| = %.2e\n", r.name.c_str(),
                r.method.c_str(), r.set_points, r.rel_diff);
    std::fflush(stdout);
    rows.push_back(r);
  }

  std::printf("\nP2M (spread), ms; ratio = baseline / pmkit; floor = bytes that must move / copy bandwidth\n");
  std::printf("%-30s %8s %8s %8s %8s %8s %8s %8s %8s %7s\n", "case", "pmkit", "naive-u", "naive-s", "x best", "sort",
              "torch", "x torch", "floor", "%floor");
  for (const auto& r : rows) {
    const double best = std::min(r.naive_unsorted, r.naive_sorted);
    std::printf("%-30s %8.3f %8.3f %8.3f %8.1f %8.3f %8.2f %8.1f %8.3f %6.0f%%\n", r.name.c_str(), r.spread,
                r.naive_unsorted, r.naive_sorted, best / r.spread, r.sort, r.torch_p2m, r.torch_p2m / r.spread,
                r.floor_spread, 100.0 * r.floor_spread / r.spread);
  }
  std::printf("\nset_points (binning + reorder) vs the baseline's sort; M2P (interp), ms\n");
  std::printf("%-30s %8s %8s %8s | %8s %8s %8s %8s %8s %8s %7s\n", "case", "set_pts", "sort", "x sort", "interp",
              "naive-u", "naive-s", "x best", "torch", "floor", "%floor");
  for (const auto& r : rows) {
    const double best = std::min(r.m2p_unsorted, r.m2p_sorted);
    std::printf("%-30s %8.3f %8.3f %8.1f | %8.3f %8.3f %8.3f %8.1f %8.2f %8.3f %6.0f%%\n", r.name.c_str(),
                r.set_points, r.sort, r.sort / r.set_points, r.interp, r.m2p_unsorted, r.m2p_sorted,
                best / r.interp, r.torch_m2p, r.floor_interp, 100.0 * r.floor_interp / r.interp);
  }
  std::printf("\nupdate_points after moves of up to %.2f cells per axis vs set_points; spread after it, ms\n",
              kUpdateStep);
  std::printf("%-30s %8s %8s %8s %8s | %8s %8s\n", "case", "set_pts", "update", "x", "away %", "spread", "updated");
  for (const auto& r : rows)
    std::printf("%-30s %8.3f %8.3f %8.1f %8.2f | %8.3f %8.3f\n", r.name.c_str(), r.set_points, r.update,
                r.set_points / r.update, 100.0 * r.away_fraction, r.spread, r.spread_updated);
  // The large mesh after the table (its 2^30 particles take a minute to set up): in a full
  // run, or where --case names it.
  if ((!quick && only.empty()) || std::find(only.begin(), only.end(), kLargeMeshCase) != only.end()) {
    try {
      run_large_mesh_row(method, timer);
    } catch (const pmkit::Error& e) {  // an allocation the estimate missed, or a forced --method
      std::printf("%-30s skipped: %s\n", kLargeMeshCase, e.what());
    }
  }
  return 0;
}
