#pragma once
// What the device decides in a binning call (set_points, update_points) and the host
// learns later, without a wait: the first rejected particle, the binning's counts, and
// the probe's count. The kernels write them into one small device block; each eager call
// ends with an asynchronous copy of the block into the next of kSlots pinned slots and
// an event, and every later call into the plan reads the slots whose events have fired
// (BinningStatus::poll), in order. A slot still in flight when its turn comes round again
// is waited for: the one wait, and only for a caller far ahead of the device.
#include <array>
#include <cstdint>
#include <limits>
#include <memory>

#include "cuda/kernels/kernels.cuh"
#include "cuda/runtime.hpp"

namespace pmkit::cuda {

// The device block, and each pinned slot's copy of it.
struct StatusBlock {
  static constexpr unsigned long long kNoParticle = std::numeric_limits<unsigned long long>::max();
  // The smallest index of a rejected particle since the host last reported one, or
  // kNoParticle: sticky across calls, so that the first slot that shows it is the call
  // that rejected it.
  unsigned long long first_bad;
  std::uint32_t same_pairs;                   // the probe's count (tuning::caller_order_binned)
  std::uint32_t counts[2][kBinCounts];        // the two binnings' (Binned::counts points at one)
};

// What the host keeps of one eager binning call until its slot is read.
template <class T, int D>
struct BinningCall {
  bool full_binning = false;          // set_points (else update_points)
  PositionArrays<T, D> positions{};   // where the rejected particle can be read back
  int binning = 0;                    // which counts[] row is the call's binning
  bool probed = false;                // the call ran the probe
  // A rejection leaves the binning in use as it was: set_points on host arrays, which
  // reads its status before it swaps the new binning in.
  bool keeps_binning = false;
};

// What a read slot tells the host.
struct StatusRead {
  unsigned long long first_bad = StatusBlock::kNoParticle;
  std::uint32_t counts[kBinCounts] = {};
  std::uint32_t same_pairs = 0;
};

struct FreePinned {
  void operator()(void* p) const { cudaFreeHost(p); }
};

template <class T, int D>
class BinningStatus {
 public:
  static constexpr int kSlots = 32;  // eager binning calls in flight before one waits

  BinningStatus() {
    block_.reserve(1, "binning status");
    StatusBlock* host = nullptr;
    check(cudaMallocHost(&host, kSlots * sizeof(StatusBlock)), "cudaMallocHost (the binning calls' status)");
    pinned_.reset(host);
    for (cudaEvent_t& e : events_) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~BinningStatus() {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
  }
  BinningStatus(const BinningStatus&) = delete;
  BinningStatus& operator=(const BinningStatus&) = delete;

  // Clears the block (no rejected particle, zero counts): once, at the plan's construction.
  void clear(cudaStream_t stream) {
    StatusBlock init{};
    init.first_bad = StatusBlock::kNoParticle;
    check(cudaMemcpyAsync(block_.get(), &init, sizeof init, cudaMemcpyHostToDevice, stream), "binning status");
    check(cudaStreamSynchronize(stream), "binning status");
  }
  StatusBlock* device() { return block_.get(); }
  unsigned long long* first_bad() { return &block_.get()->first_bad; }
  std::uint32_t* counts(int binning) { return block_.get()->counts[binning]; }
  std::uint32_t* same_pairs() { return &block_.get()->same_pairs; }

  // Ends an eager binning call (never one under stream capture, whose replays leave their
  // status on the device, where synchronize reads it): the block's copy into the next
  // slot and its event. `consume` is called for each slot read on the way.
  template <class Consume>
  void finish(cudaStream_t stream, const BinningCall<T, D>& call, Consume&& consume) {
    const int slot = static_cast<int>(issued_ % kSlots);
    if (issued_ - read_ >= kSlots) {  // the slot's previous call is still unread: wait for it
      check(cudaEventSynchronize(events_[slot]), "binning status");
      poll(consume);
    }
    check(cudaMemcpyAsync(pinned_.get() + slot, block_.get(), sizeof(StatusBlock), cudaMemcpyDeviceToHost, stream),
          "binning status");
    check(cudaEventRecord(events_[slot], stream), "binning status");
    calls_[slot] = call;
    ++issued_;
  }

  // Reads, in order, every slot whose copy has landed, without waiting: consume(call,
  // read) for each (it may throw; the slot counts as read).
  template <class Consume>
  void poll(Consume&& consume) {
    while (read_ < issued_) {
      const int slot = static_cast<int>(read_ % kSlots);
      const cudaError_t ready = cudaEventQuery(events_[slot]);
      if (ready == cudaErrorNotReady) return;
      check(ready, "binning status");
      ++read_;
      const StatusBlock& b = pinned_.get()[slot];
      StatusRead r;
      // Calls copied before the last report's clear still show its (sticky) rejection.
      r.first_bad = read_ > forgotten_before_ ? b.first_bad : StatusBlock::kNoParticle;
      r.same_pairs = b.same_pairs;
      for (int k = 0; k < kBinCounts; ++k) r.counts[k] = b.counts[calls_[slot].binning][k];
      consume(calls_[slot], r);
    }
  }

  // Waits for `stream`, reads every slot, then the block itself (which graph replays
  // write): its first rejected particle, or kNoParticle.
  template <class Consume>
  unsigned long long wait_and_read(cudaStream_t stream, Consume&& consume) {
    check(cudaStreamSynchronize(stream), "synchronize");
    poll(consume);
    unsigned long long bad = StatusBlock::kNoParticle;
    check(cudaMemcpy(&bad, first_bad(), sizeof bad, cudaMemcpyDeviceToHost), "synchronize");
    return bad;
  }

  // After the host reported a rejection: the sticky word cleared for the next calls.
  void forget_rejection(cudaStream_t stream) {
    check(cudaMemsetAsync(first_bad(), 0xff, sizeof(unsigned long long), stream), "cudaMemset");
    forgotten_before_ = issued_;
  }

  static bool capturing(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
    return status != cudaStreamCaptureStatusNone;
  }

 private:
  DeviceBuffer<StatusBlock> block_;
  std::unique_ptr<StatusBlock, FreePinned> pinned_;
  std::array<cudaEvent_t, kSlots> events_{};
  std::array<BinningCall<T, D>, kSlots> calls_{};
  std::uint64_t issued_ = 0, read_ = 0;
  std::uint64_t forgotten_before_ = 0;  // slots up to this many calls precede the last clear
};

}  // namespace pmkit::cuda
