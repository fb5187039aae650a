// The diagnostics' CSV, the two-beam theory and the fits of rates (pic.hpp).
#include <algorithm>
#include <cmath>
#include <ostream>

#include "pic.hpp"

namespace pmkit::pic {

void write_csv(const std::vector<Diagnostics>& history, std::ostream& out) {
  out << "t,field,kinetic,total,px,py,pz\n";
  out.precision(10);
  for (const Diagnostics& r : history)
    out << r.t << ',' << r.field << ',' << r.kinetic << ',' << r.total << ',' << r.momentum[0] << ','
        << r.momentum[1] << ',' << r.momentum[2] << '\n';
}

double two_stream_growth_rate(double k_v0) {
  const double a2 = k_v0 * k_v0;
  const double w2 = a2 + 0.5 - std::sqrt(2 * a2 + 0.25);
  return w2 < 0 ? std::sqrt(-w2) : 0.0;
}

namespace {
// Slope of the least-squares line through (x, y).
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = double(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double den = n * sxx - sx * sx;
  return den != 0 ? (n * sxy - sx * sy) / den : 0.0;
}
}  // namespace

PeakFit fit_peaks(const std::vector<Diagnostics>& h, double t_min, double t_max, double separation) {
  std::vector<double> times, logs;
  for (std::size_t i = 1; i + 1 < h.size(); ++i) {
    if (h[i].t < t_min || h[i].t > t_max) continue;
    // A peak: the largest sample within `separation` on either side.
    bool largest = true;
    for (std::size_t j = 0; j < h.size() && largest; ++j)
      if (j != i && std::abs(h[j].t - h[i].t) <= separation && h[j].field > h[i].field) largest = false;
    if (!largest) continue;
    const double a = std::log(h[i - 1].field), b = std::log(h[i].field), c = std::log(h[i + 1].field);
    // The parabola through the three log values: its vertex's offset (in samples) and height.
    const double curvature = a - 2 * b + c;
    const double offset = curvature != 0 ? 0.5 * (a - c) / curvature : 0.0;
    const double dt = h[i + 1].t - h[i].t;
    times.push_back(h[i].t + offset * dt);
    logs.push_back(b - 0.25 * (a - c) * offset);
  }
  PeakFit fit;
  fit.peaks = static_cast<int>(times.size());
  if (times.size() < 2) return fit;
  fit.gamma = 0.5 * slope(times, logs);
  std::vector<double> index(times.size());
  for (std::size_t i = 0; i < index.size(); ++i) index[i] = double(i);
  fit.omega = std::acos(-1.0) / slope(index, times);
  return fit;
}

double fit_growth(const std::vector<Diagnostics>& h, double lo, double hi) {
  double peak = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < h.size(); ++i)
    if (h[i].field > peak) {
      peak = h[i].field;
      at = i;
    }
  // The samples before the saturation's peak inside [lo, hi] * peak, the last run of them.
  std::vector<double> times, logs;
  for (std::size_t i = 0; i < at; ++i) {
    const double w = h[i].field;
    if (w >= lo * peak && w <= hi * peak) {
      times.push_back(h[i].t);
      logs.push_back(std::log(w));
    } else if (!times.empty() && w < lo * peak) {
      times.clear();  // dipped below the window again: the linear phase starts later
      logs.clear();
    }
  }
  return times.size() >= 2 ? 0.5 * slope(times, logs) : 0.0;
}

}  // namespace pmkit::pic
