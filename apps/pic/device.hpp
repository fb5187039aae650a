#pragma once
// Where a simulation's arrays live and its own per-particle work runs: the host (loops
// with OpenMP) or a CUDA device (small kernels on the plan's stream). The mesh work is
// pmkit's (Plan, RealFft); this is the rest of a step.
#include <complex>
#include <cstddef>
#include <memory>
#include <vector>

#include "particle_ops.hpp"
#include "pic.hpp"

namespace pmkit::pic {

template <class T, int D>
class Device {
 public:
  virtual ~Device() = default;
  // Memory owned by the device object, freed with it.
  virtual T* allocate(std::size_t n) = 0;
  virtual void upload(T* dst, const std::vector<T>& src) = 0;
  virtual std::vector<T> download(const T* src, std::size_t n) = 0;
  virtual void push(const Particles<T, D>& p, const LeapfrogPush<T, D>& push) = 0;
  virtual Moments<T, D> moments(const Particles<T, D>& p) = 0;
  // Spectra as interleaved (re, im) pairs of T: n complex values.
  virtual void scale_spectrum(const T* in, const T* factor, T* out, std::size_t n, bool rotate) = 0;
  virtual double dot(const T* a, const T* b, std::size_t n) = 0;
  // Waits for the work queued so far (the phase timings).
  virtual void synchronize() = 0;
};

template <class T, int D>
std::unique_ptr<Device<T, D>> make_host_device(int threads);
template <class T, int D>
std::unique_ptr<Device<T, D>> make_cuda_device();

}  // namespace pmkit::pic
