#include "verify/convergence.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "pmkit/error.hpp"
#include "pmkit/plan.hpp"

namespace pmkit::verify {

namespace {

using detail::fail;

// Accumulates |got - want| against the size of want.
struct ErrorSum {
  double err2 = 0, ref2 = 0, err_max = 0, ref_max = 0;
  void add(double got, double want) {
    const double e = std::fabs(got - want);
    err2 += e * e;
    ref2 += want * want;
    err_max = std::max(err_max, e);
    ref_max = std::max(ref_max, std::fabs(want));
  }
  double l2() const { return std::sqrt(err2 / ref2); }
  double linf() const { return err_max / ref_max; }
};

template <int D>
using Point = std::array<double, D>;

template <int D>
double gaussian(const Point<D>& x, double sigma) {
  double r2 = 0;
  for (int d = 0; d < D; ++d) r2 += (x[d] - 0.5) * (x[d] - 0.5);
  return std::exp(-r2 / (sigma * sigma));
}

// Node `flat` (x fastest) of an n^D lattice of spacing h, moved by `shift` cells.
template <int D>
Point<D> lattice_point(std::int64_t flat, std::int64_t n, double h, const Point<D>& shift) {
  Point<D> x{};
  for (int d = 0; d < D; ++d) {
    x[d] = (static_cast<double>(flat % n) + shift[d]) * h;
    flat /= n;
  }
  return x;
}

template <int D>
std::array<std::int64_t, D> cube(std::int64_t n) {
  std::array<std::int64_t, D> c{};
  c.fill(n);
  return c;
}

// The gradient of gaussian().
template <int D>
Point<D> gaussian_gradient(const Point<D>& x, double sigma) {
  const double g = gaussian<D>(x, sigma);
  Point<D> grad{};
  for (int d = 0; d < D; ++d) grad[d] = -2.0 * (x[d] - 0.5) / (sigma * sigma) * g;
  return grad;
}

// M2P, or with `gradient` the interp_gradient, of the Gaussian sampled on the nodes.
template <int D>
ConvergenceRow m2p_row(const Kernel& kernel, std::int64_t n, const ConvergenceConfig& cfg,
                       const std::array<std::vector<double>, D>& pos, bool gradient) {
  const double h = 1.0 / static_cast<double>(n);
  Options options;
  options.num_threads = cfg.num_threads;
  Plan<double, D> plan(Grid<D>::periodic(cube<D>(n), h), kernel, options);

  std::vector<double> mesh(static_cast<std::size_t>(plan.mesh_size()));
  const Point<D> zero{};
  for (std::size_t i = 0; i < mesh.size(); ++i)
    mesh[i] = gaussian<D>(lattice_point<D>(static_cast<std::int64_t>(i), n, h, zero), cfg.sigma);

  typename Plan<double, D>::Positions views;
  for (int d = 0; d < D; ++d) views[d] = View<const double>(pos[d]);
  plan.set_points(views);
  const std::size_t count = pos[0].size();
  const int components = gradient ? D : 1;
  std::vector<std::vector<double>> values(components, std::vector<double>(count));
  std::vector<View<double>> outputs(values.begin(), values.end());
  if (gradient)
    plan.interp_gradient({View<const double>(mesh)}, outputs);
  else
    plan.interp({View<const double>(mesh)}, outputs);

  ErrorSum e;
  for (std::size_t p = 0; p < count; ++p) {
    Point<D> x;
    for (int d = 0; d < D; ++d) x[d] = pos[d][p];
    if (gradient) {
      const Point<D> want = gaussian_gradient<D>(x, cfg.sigma);
      for (int d = 0; d < D; ++d) e.add(values[d][p], want[d]);
    } else {
      e.add(values[0][p], gaussian<D>(x, cfg.sigma));
    }
  }
  return {n, h, e.l2(), e.linf()};
}

template <int D>
ConvergenceRow p2m_row(const Kernel& kernel, std::int64_t n, const ConvergenceConfig& cfg,
                       const Point<D>& offset) {
  const double h = 1.0 / static_cast<double>(n);
  Options options;
  options.num_threads = cfg.num_threads;
  Plan<double, D> plan(Grid<D>::periodic(cube<D>(n), h), kernel, options);

  const std::size_t count = static_cast<std::size_t>(plan.mesh_size());  // one particle per cell
  const double volume = std::pow(h, D);
  std::array<std::vector<double>, D> pos;
  for (auto& p : pos) p.resize(count);
  std::vector<double> q(count);
  for (std::size_t p = 0; p < count; ++p) {
    const Point<D> x = lattice_point<D>(static_cast<std::int64_t>(p), n, h, offset);
    for (int d = 0; d < D; ++d) pos[d][p] = x[d];
    q[p] = gaussian<D>(x, cfg.sigma) * volume;
  }
  typename Plan<double, D>::Positions views;
  for (int d = 0; d < D; ++d) views[d] = View<const double>(pos[d]);
  plan.set_points(views);
  std::vector<double> mesh(count);
  plan.spread({View<const double>(q)}, {View<double>(mesh)});

  ErrorSum e;
  const Point<D> zero{};
  for (std::size_t i = 0; i < count; ++i)
    e.add(mesh[i] / volume,
          gaussian<D>(lattice_point<D>(static_cast<std::int64_t>(i), n, h, zero), cfg.sigma));
  return {n, h, e.l2(), e.linf()};
}

template <int D>
ConvergenceResult study(const Kernel& kernel, Operation op, const ConvergenceConfig& cfg) {
  if (cfg.cells.size() < 2)
    fail(ErrorCode::InvalidArgument, "config.cells has ", cfg.cells.size(),
         " resolutions: a fitted order needs at least 2");
  // The same points at every resolution, so the rows differ only by h.
  std::mt19937_64 rng(cfg.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::array<std::vector<double>, D> pos;
  Point<D> offset{};
  if (op != Operation::P2M) {
    for (auto& p : pos) p.resize(cfg.particles);
    for (std::size_t i = 0; i < cfg.particles; ++i)
      for (int d = 0; d < D; ++d) pos[d][i] = unit(rng);
  } else {
    // Away from 0 (on the nodes, where the interpolating kernels are exact).
    std::uniform_real_distribution<double> sub(0.1, 0.9);
    for (int d = 0; d < D; ++d) offset[d] = sub(rng);
  }

  ConvergenceResult r{kernel, op, D, {}, 0.0, 0.0};
  std::vector<double> hs, l2, linf;
  for (std::int64_t n : cfg.cells) {
    r.rows.push_back(op == Operation::P2M ? p2m_row<D>(kernel, n, cfg, offset)
                                          : m2p_row<D>(kernel, n, cfg, pos, op == Operation::Gradient));
    hs.push_back(r.rows.back().h);
    l2.push_back(r.rows.back().l2);
    linf.push_back(r.rows.back().linf);
  }
  r.order_l2 = fitted_order(hs, l2);
  r.order_linf = fitted_order(hs, linf);
  return r;
}

std::string fixed(double v, int width, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%*.*f", width, digits, v);
  return buf;
}
std::string sci(double v, int width) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%*.2e", width, v);
  return buf;
}
std::string left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

}  // namespace

const char* to_string(Operation op) {
  switch (op) {
    case Operation::M2P: return "M2P";
    case Operation::P2M: return "P2M";
    default: return "GRAD";
  }
}

ConvergenceConfig default_config(int dim) {
  ConvergenceConfig c;
  if (dim == 2)
    c.cells = {32, 64, 128, 256};
  else
    c.cells = {32, 48, 64, 96};
  return c;
}

std::vector<Kernel> all_kernels() {
  std::vector<Kernel> k = {Kernel::linear(), Kernel::tsc(), Kernel::mp4()};
  for (int order = 4; order <= 8; ++order) k.push_back(Kernel::bspline(order));
  return k;
}

ConvergenceResult convergence(const Kernel& kernel, Operation op, int dim,
                              const ConvergenceConfig& config) {
  if (dim == 2) return study<2>(kernel, op, config);
  if (dim == 3) return study<3>(kernel, op, config);
  fail(ErrorCode::InvalidArgument, "dim = ", dim, ": pmkit grids are 2D or 3D");
}

double fitted_order(const std::vector<double>& h, const std::vector<double>& err) {
  if (h.size() != err.size() || h.size() < 2)
    fail(ErrorCode::SizeMismatch, "fitted_order: ", h.size(), " spacings and ", err.size(),
         " errors; need equal counts of at least 2");
  const double n = static_cast<double>(h.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < h.size(); ++i) {
    const double x = std::log(h[i]), y = std::log(err[i]);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

double required_order(const Kernel& kernel, Operation op) {
  if (op == Operation::Gradient) return kernel.support() == 2 ? 0.9 : 1.9;
  return kernel.family() == KernelFamily::MP4 ? 2.9 : 1.9;
}

bool meets_threshold(const ConvergenceResult& r) {
  const double need = required_order(r.kernel, r.op);
  // Written so that a NaN order fails.
  return r.order_l2 >= need && r.order_linf >= need;
}

std::string format_table(const std::vector<ConvergenceResult>& results) {
  std::ostringstream os;
  int dim = 0;
  std::vector<std::int64_t> cells;
  for (const ConvergenceResult& r : results) {
    std::vector<std::int64_t> these;
    for (const auto& row : r.rows) these.push_back(row.cells);
    if (r.dim != dim || these != cells) {
      dim = r.dim;
      cells = these;
      os << "\n" << left("kernel", 10) << left("op", 5) << left("dim", 5) << left("error", 6);
      for (auto n : cells) os << left("n=" + std::to_string(n), 10);
      os << left("order", 7) << "need\n";
    }
    const double need = required_order(r.kernel, r.op);
    for (int line = 0; line < 2; ++line) {
      if (line == 0)
        os << left(r.kernel.name(), 10) << left(to_string(r.op), 5)
           << left(std::to_string(r.dim) + "D", 5) << left("L2", 6);
      else
        os << std::string(20, ' ') << left("Linf", 6);
      for (const auto& row : r.rows) os << sci(line == 0 ? row.l2 : row.linf, 9) << " ";
      const double order = line == 0 ? r.order_l2 : r.order_linf;
      os << fixed(order, 5, 2) << "  " << fixed(need, 4, 1) << "  " << (order >= need ? "ok" : "FAIL")
         << "\n";
    }
  }
  return os.str();
}

}  // namespace pmkit::verify
