// The diagnostics' CSV and the fits of rates (pic.hpp).
#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "pic.hpp"

namespace pmkit::pic {

void write_csv(const std::vector<Diagnostics>& history, std::ostream& out) {
  out << "t,field,kinetic,total,px,py,pz\n";
  out.precision(10);
  for (const Diagnostics& r : history)
    out << r.t << ',' << r.field << ',' << r.kinetic << ',' << r.total << ',' << r.momentum[0] << ','
        << r.momentum[1] << ',' << r.momentum[2] << '\n';
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

struct Peak {
  std::size_t at;   // the sample
  double t, log_w;  // refined by the parabola
  double trough;    // the smallest W from this peak to the next (or to the run's end)
};

// The peaks of W: each the largest sample within `separation` on either side.
std::vector<Peak> peaks_of(const std::vector<Diagnostics>& h, double separation) {
  std::vector<Peak> peaks;
  for (std::size_t i = 1; i + 1 < h.size(); ++i) {
    bool largest = h[i].field > 0;
    for (std::size_t j = i; j-- > 0 && largest && h[i].t - h[j].t <= separation;) largest = h[j].field <= h[i].field;
    for (std::size_t j = i + 1; j < h.size() && largest && h[j].t - h[i].t <= separation; ++j)
      largest = h[j].field <= h[i].field;
    if (!largest || h[i - 1].field <= 0 || h[i + 1].field <= 0) continue;
    const double a = std::log(h[i - 1].field), b = std::log(h[i].field), c = std::log(h[i + 1].field);
    // The parabola through the three log values: its vertex's offset (in samples) and height.
    const double curvature = a - 2 * b + c;
    const double offset = curvature != 0 ? 0.5 * (a - c) / curvature : 0.0;
    peaks.push_back({i, h[i].t + offset * (h[i + 1].t - h[i].t), b - 0.25 * (a - c) * offset, 0.0});
  }
  for (std::size_t p = 0; p < peaks.size(); ++p) {
    const std::size_t end = p + 1 < peaks.size() ? peaks[p + 1].at : h.size();
    double low = h[peaks[p].at].field;
    for (std::size_t i = peaks[p].at; i < end; ++i) low = std::min(low, h[i].field);
    peaks[p].trough = low;
  }
  return peaks;
}

// The line through log W at the window's times: its rate and the window.
void fit_line(const std::vector<double>& times, const std::vector<double>& logs, RateFit& fit) {
  fit.points = static_cast<int>(times.size());
  if (!fit.fitted()) return;
  fit.gamma = 0.5 * slope(times, logs);
  fit.t_first = times.front();
  fit.t_last = times.back();
}
}  // namespace

RateFit fit_damping(const std::vector<Diagnostics>& h, double k, double omega_guess) {
  const double pi = std::acos(-1.0);
  std::vector<Peak> peaks = peaks_of(h, 0.45 * pi / omega_guess);
  const double t_start = 1 / k;
  peaks.erase(std::remove_if(peaks.begin(), peaks.end(), [&](const Peak& p) { return p.t < t_start; }), peaks.end());
  RateFit fit;
  fit.end = "the end of the run";
  std::size_t last = peaks.size();  // one past the window's last peak
  for (std::size_t p = 0; p < peaks.size(); ++p) {
    if (std::log(20 * peaks[p].trough) > peaks[p].log_w) {
      last = p;
      fit.end = "the noise floor (a peak below 20 times the trough after it)";
      break;
    }
    if (p > 0 && peaks[p].log_w >= peaks[p - 1].log_w) {
      // The decay stops: the peaks approaching the lowest one are bent towards it.
      double lowest = peaks[p].log_w;
      for (std::size_t q = p; q < peaks.size(); ++q) lowest = std::min(lowest, peaks[q].log_w);
      last = p;
      while (last > 0 && peaks[last - 1].log_w < lowest + std::log(3.0)) --last;
      fit.end = "the end of the decay (noise or trapping; peaks within 3 times its lowest left out)";
      break;
    }
  }
  peaks.resize(last);
  std::vector<double> times, logs, index;
  for (const Peak& p : peaks) {
    times.push_back(p.t);
    logs.push_back(p.log_w);
    index.push_back(double(index.size()));
  }
  fit_line(times, logs, fit);
  if (fit.fitted()) fit.omega = pi / slope(index, times);
  return fit;
}

RateFit fit_growth(const std::vector<Diagnostics>& h) {
  RateFit fit;
  if (h.empty()) return fit;
  double peak = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < h.size(); ++i)
    if (h[i].field > peak) {
      peak = h[i].field;
      at = i;
    }
  const double lo = 100 * h.front().field, hi = 1e-2 * peak;
  fit.end = at + 1 == h.size() ? "the end of the run (still growing)" : "a hundredth of the saturated field energy";
  // The last stretch of samples before the largest W inside [lo, hi].
  std::vector<double> times, logs;
  for (std::size_t i = 0; i < at; ++i) {
    const double w = h[i].field;
    if (w >= lo && w <= hi) {
      times.push_back(h[i].t);
      logs.push_back(std::log(w));
    } else if (!times.empty() && w < lo) {
      times.clear();  // dipped below the window again: the linear phase starts later
      logs.clear();
    }
  }
  fit_line(times, logs, fit);
  return fit;
}

}  // namespace pmkit::pic
