#pragma once
// Where a simulation's arrays live and its own per-particle work runs: the host (loops
// with OpenMP) or a CUDA device (small kernels on a stream of the device object's own,
// which the plan and the FFT run on too). The mesh work is pmkit's (Plan, RealFft); this
// is the rest of a step, the particle step's call for the push (pmkit::step on the host,
// pmkit::cuda::step compiled by nvcc), and the CUDA graph that replays steps.
#include <complex>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "particle_ops.hpp"
#include "pic.hpp"
#include "pmkit/particle_step.hpp"

namespace pmkit::pic {

// The diagnostics' sums of one step as a device records them: the particles' moments
// after the step's push, and the dot products of the field energy of the solve before
// it (one, or one per axis).
struct StepSums {
  MomentSums moments;
  double field[3];
};

template <class T, int D>
class Device {
 public:
  virtual ~Device() = default;
  // The stream that the device's own work runs on, for the plan's and the FFT's options
  // (null on the host).
  virtual StreamHandle stream() const = 0;
  // Memory owned by the device object, freed with it.
  virtual T* allocate(std::size_t n) = 0;
  // Synchronous: the values have landed on return.
  virtual void upload(T* dst, const std::vector<T>& src) = 0;
  // Synchronous: the first dst.size() values of src, after the work queued so far.
  virtual void download(std::vector<T>& dst, const T* src) = 0;
  virtual void push(const ParticleArrays<T, D>& p, const LeapfrogPush<T, D>& push) = 0;
  // The particle step with the push as its update (the field's gather, the push, the
  // deposit of the charge and the re-binning in one call), queued.
  virtual void step(pmkit::Particles<T, D>& p, const StepPush<T, D, false>& push, const StepMeshes<T>& meshes) = 0;
  virtual void step(pmkit::Particles<T, D>& p, const StepPush<T, D, true>& push, const StepMeshes<T>& meshes) = 0;
  // Spectra as interleaved (re, im) pairs of T: n complex values.
  virtual void scale_spectrum(const T* in, const T* factor, T* out, std::size_t n, bool rotate) = 0;

  // The diagnostics without a host wait. moments() and dot() write into the current
  // step's sums in the device's memory (dot into field[term]); record() appends those
  // sums to a log whose length the device keeps itself, so that a step replayed from a
  // graph appends as an eager step does. take_records(count) waits for the work queued
  // so far and returns the `count` records appended since the last take (at most
  // record_capacity(): the caller takes them before the log is full), emptying the log.
  virtual void moments(const Velocities<T, D>& p) = 0;
  virtual void dot(const T* a, const T* b, std::size_t n, int term) = 0;
  virtual void record() = 0;
  virtual std::vector<StepSums> take_records(std::size_t count) = 0;
  virtual std::size_t record_capacity() const = 0;

  // Waits for the work queued so far (the phase timings).
  virtual void synchronize() = 0;

  // CUDA graphs (can_capture): capture(queue) records the work that queue() puts on
  // the stream, without running it, as the graph that replay() launches (the one
  // before it freed); a failure ends the capture and throws, leaving no graph.
  virtual bool can_capture() const = 0;
  virtual void capture(const std::function<void()>& queue) = 0;
  virtual void replay() = 0;
};

template <class T, int D>
std::unique_ptr<Device<T, D>> make_host_device(int threads);
template <class T, int D>
std::unique_ptr<Device<T, D>> make_cuda_device(int device_ordinal);

}  // namespace pmkit::pic
