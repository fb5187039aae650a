// The host as a PIC device: the arrays in host memory, the push and the sums as OpenMP
// loops over the particles, the particle step pmkit::step (on the plan's threads). Every call has done its work on return; the diagnostics' log
// holds one record, so that each step's sums are checked as soon as they exist.
#include <memory>
#include <vector>

#include "device.hpp"
#include "cpu/openmp.hpp"

namespace pmkit::pic {
namespace {

template <class T, int D>
class HostDevice final : public Device<T, D> {
 public:
  explicit HostDevice(int threads) : threads_(detail::openmp_threads(threads)) {}

  StreamHandle stream() const override { return nullptr; }

  T* allocate(std::size_t n) override {
    arrays_.emplace_back(n);
    return arrays_.back().data();
  }
  void upload(T* dst, const std::vector<T>& src) override { std::copy(src.begin(), src.end(), dst); }
  void download(std::vector<T>& dst, const T* src) override { std::copy(src, src + dst.size(), dst.begin()); }

  void push(const ParticleArrays<T, D>& p, const LeapfrogPush<T, D>& push) override {
    const auto n = static_cast<std::int64_t>(p.n);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) push(p, static_cast<std::size_t>(i));
  }

  // The pass compiled for the kernels `pmkit pic` offers (pic_kernel_names), not every plan kernel.
  void step(pmkit::Particles<T, D>& p, const StepPush<T, D, false>& push, const StepMeshes<T>& meshes) override {
    pmkit::step<kernels::Linear, kernels::TSC, kernels::MP4>(p, push, meshes);
  }
  void step(pmkit::Particles<T, D>& p, const StepPush<T, D, true>& push, const StepMeshes<T>& meshes) override {
    pmkit::step<kernels::Linear, kernels::TSC, kernels::MP4>(p, push, meshes);
  }

  void scale_spectrum(const T* in, const T* factor, T* out, std::size_t n, bool rotate) override {
    const ScaleSpectrum<T> scale{rotate};
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(n); ++k) scale(in, factor, out, static_cast<std::size_t>(k));
  }

  void moments(const Velocities<T, D>& p) override {
    const auto n = static_cast<std::int64_t>(p.n);
    const MomentTerms<T, D> terms{p};
    double kinetic = 0, m0 = 0, m1 = 0, m2 = 0;
#pragma omp parallel for num_threads(threads_) schedule(static) reduction(+ : kinetic, m0, m1, m2)
    for (std::int64_t i = 0; i < n; ++i) {
      const MomentSums t = terms(static_cast<std::size_t>(i));
      kinetic += t.kinetic;
      m0 += t.momentum[0];
      m1 += t.momentum[1];
      m2 += t.momentum[2];
    }
    current_.moments = {kinetic, {m0, m1, m2}};
  }

  void dot(const T* a, const T* b, std::size_t n, int term) override {
    double sum = 0;
#pragma omp parallel for num_threads(threads_) schedule(static) reduction(+ : sum)
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i) sum += double(a[i]) * b[i];
    current_.field[term] = sum;
  }

  void record() override { log_.push_back(current_); }
  std::vector<StepSums> take_records(std::size_t) override {
    std::vector<StepSums> taken;
    taken.swap(log_);
    return taken;
  }
  std::size_t record_capacity() const override { return 1; }

  void synchronize() override {}

  bool can_capture() const override { return false; }
  void capture(const std::function<void()>&) override {
    detail::fail(ErrorCode::Unsupported, "pic: CUDA graphs need backend cuda");
  }
  void replay() override { detail::fail(ErrorCode::Unsupported, "pic: CUDA graphs need backend cuda"); }

 private:
  int threads_;
  std::vector<std::vector<T>> arrays_;
  StepSums current_{{0, {0, 0, 0}}, {0, 0, 0}};
  std::vector<StepSums> log_;
};

}  // namespace

template <class T, int D>
std::unique_ptr<Device<T, D>> make_host_device(int threads) {
  return std::make_unique<HostDevice<T, D>>(threads);
}

template std::unique_ptr<Device<float, 2>> make_host_device<float, 2>(int);
template std::unique_ptr<Device<float, 3>> make_host_device<float, 3>(int);
template std::unique_ptr<Device<double, 2>> make_host_device<double, 2>(int);
template std::unique_ptr<Device<double, 3>> make_host_device<double, 3>(int);

}  // namespace pmkit::pic
