// The device rank (device_rank.cuh): built from the rank's setup (the ghost lists and the
// owner tables copied to the device, the ghost buffers, the migration's counters, the
// transport), its calls handed to its parts; and the factory make_device_rank.
#include "distributed/cuda/device_rank.cuh"

#include <algorithm>

#include "distributed/halo.hpp"

namespace pmkit::distributed {

using cuda::check;
using cuda::DeviceBuffer;

namespace {

template <int D>
DeviceContext context_of(const RankSetup<D>& setup) {
  DeviceContext context;
  context.comm = setup.comm;
  MPI_Comm_rank(setup.comm, &context.rank);
  MPI_Comm_size(setup.comm, &context.size);
  context.device = setup.options.device;
  context.stream = cuda::to_cuda_stream(setup.options.stream);
  return context;
}

}  // namespace

// The transport's choice first (every rank's GPU gathered) and the ghost lists, collective
// calls that no rank may leave before the others entered them; then the device's buffers,
// in the device's scope; the NCCL communicator last.
template <class T, int D>
DeviceRank<T, D>::DeviceRank(const RankSetup<D>& setup)
    : context_(context_of(setup)),
      local_size_(setup.local.size),
      alone_(context_.size == 1 && !setup.options.deterministic),
      transport_(setup.transport, context_) {
  const Halo halo(setup.decomposition, context_.rank, context_.comm);
  cuda::DeviceScope scope(context_.device);
  region_ = device_region(setup.region);
  FirstCell<D> first_cell{};
  const Decomposition<D>& decomposition = setup.decomposition;
  owners_ = host_owners(decomposition, setup.global);  // its tables then copied to the device
  for (int d = 0; d < D; ++d) {
    first_cell.cell[d] = decomposition.block(context_.rank).first_cell[d];
    owner_tables_[d] = DeviceBuffer<int>(decomposition.axis(d).owner_of_cell, "owner table");
    owners_.owner_of_cell[d] = owner_tables_[d].get();
  }
  halo_ = DeviceHalo(context_, halo, local_size_);
  send_.reserve(std::max<std::size_t>(1, halo_.entries()), "ghost send buffer");
  recv_.reserve(std::max<std::size_t>(1, halo_.entries()), "ghost receive buffer");
  exact_ = DeviceExactSpread<T, D>(context_, setup.kernel, owners_, first_cell, setup.local, region_,
                                   setup.region.interior(), halo_.entries());
  migration_ = DeviceMigration<T, D>(context_, owners_, setup.global);
  transport_.connect();
}

// A new buffer starts at zero, so that the first and last stored plane of each axis,
// which the ghost fill leaves and no stencil reaches (halo.cpp), hold zeros and not what
// the memory held.
template <class T, int D>
T* DeviceRank<T, D>::meshes(int count) {
  cuda::DeviceScope scope(context_.device);
  const std::size_t had = meshes_.size();
  meshes_.reserve(static_cast<std::size_t>(count) * local_size_, "local meshes");
  if (meshes_.size() != had)
    check(cudaMemsetAsync(meshes_.get(), 0, meshes_.size() * sizeof(T), context_.stream), "local meshes");
  const std::size_t lists = std::max<std::size_t>(1, halo_.entries() * static_cast<std::size_t>(count));
  send_.reserve(lists, "ghost send buffer");
  recv_.reserve(lists, "ghost receive buffer");
  return meshes_.get();
}

template <class T, int D>
void DeviceRank<T, D>::block_to_local(Span<View<const T>> blocks) {
  for_region(context_, region_, static_cast<int>(blocks.size()), [&](int j) {
    return CopyNode<T>{const_cast<T*>(blocks[j].data), meshes_.get() + j * local_size_, Copy::BlockToLocal};
  });
}

template <class T, int D>
void DeviceRank<T, D>::local_to_block(Span<View<T>> blocks, Accumulate mode) {
  const Copy copy = mode == Accumulate::Overwrite ? Copy::LocalToBlock : Copy::AddToBlock;
  for_region(context_, region_, static_cast<int>(blocks.size()), [&](int j) {
    return CopyNode<T>{blocks[j].data, meshes_.get() + j * local_size_, copy};
  });
}

// The messages travel on a stream of their own (made on first use), forked from the
// rank's stream after the gather and joined back before the scatter: the work the caller
// queues between start and finish runs while they travel, and a capture of the rank's
// stream takes the fork and the join into its graph. The stream has the device's highest
// priority, so that NCCL's kernel takes its SMs before the interior tiles' blocks fill
// them.
template <class T, int D>
template <class V>
void DeviceRank<T, D>::halo_start(V* meshes, V* send, V* recv, int count, bool sum) {
  halo_.gather(meshes, send, count, sum);
  if (!messages_) {
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "DistributedPlan: cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&messages_, cudaStreamNonBlocking, greatest), "DistributedPlan: cudaStreamCreate");
    check(cudaEventCreateWithFlags(&gathered_, cudaEventDisableTiming), "DistributedPlan: cudaEventCreate");
    check(cudaEventCreateWithFlags(&arrived_, cudaEventDisableTiming), "DistributedPlan: cudaEventCreate");
  }
  check(cudaEventRecord(gathered_, context_.stream), "DistributedPlan: cudaEventRecord");
  check(cudaStreamWaitEvent(messages_, gathered_, 0), "DistributedPlan: cudaStreamWaitEvent");
  halo_.start(transport_, send, recv, count, sum, messages_);
}

template <class T, int D>
template <class V>
void DeviceRank<T, D>::halo_finish(V* meshes, V* send, V* recv, int count, bool sum) {
  halo_.finish(transport_, send, recv, count, sum, messages_);
  check(cudaEventRecord(arrived_, messages_), "DistributedPlan: cudaEventRecord");
  check(cudaStreamWaitEvent(context_.stream, arrived_, 0), "DistributedPlan: cudaStreamWaitEvent");
  halo_.scatter(meshes, recv, count, sum);
}

template <class T, int D>
void DeviceRank<T, D>::halo_start(HaloPass pass, int count) {
  cuda::DeviceScope scope(context_.device);
  if (pass == HaloPass::ExactSum) halo_start(exact_.meshes(), exact_.send(), exact_.recv(), count, true);
  else halo_start(meshes_.get(), send_.get(), recv_.get(), count, pass == HaloPass::Sum);
}

template <class T, int D>
void DeviceRank<T, D>::halo_finish(HaloPass pass, int count) {
  cuda::DeviceScope scope(context_.device);
  if (pass == HaloPass::ExactSum) halo_finish(exact_.meshes(), exact_.send(), exact_.recv(), count, true);
  else halo_finish(meshes_.get(), send_.get(), recv_.get(), count, pass == HaloPass::Sum);
}

template <class T, int D>
std::size_t DeviceRank<T, D>::first_stranger(const std::array<View<const T>, D>& positions, std::size_t n,
                                             std::array<double, D>& position) {
  return migration_.first_stranger(positions, n, position);
}

template <class T, int D>
void DeviceRank<T, D>::raise_deferred() {
  migration_.raise_deferred();
}

template <class T, int D>
std::size_t DeviceRank<T, D>::migrate(const std::array<View<T>, D>& positions, Span<View<T>> props, std::size_t count,
                                      bool& changed) {
  return migration_.migrate(transport_, positions, props, count, changed);
}

template <class T, int D>
void DeviceRank<T, D>::locate_exact(const std::array<View<const T>, D>& positions, std::size_t n) {
  exact_.locate(positions, n);
}

template <class T, int D>
void DeviceRank<T, D>::largest_values(Span<View<const T>> props, std::size_t n, std::vector<double>& max_abs) {
  exact_.largest_values(props, n, max_abs);
}

template <class T, int D>
void DeviceRank<T, D>::exact_meshes(int count) {
  exact_.reserve(count);
}

template <class T, int D>
void DeviceRank<T, D>::spread_exact(Span<View<const T>> props, std::size_t n, const std::vector<double>& scale,
                                    detail::Part part) {
  exact_.spread(props, n, scale, part);
}

template <class T, int D>
void DeviceRank<T, D>::exact_to_block(Span<View<T>> blocks, const std::vector<double>& inverse, Accumulate mode) {
  exact_.to_block(blocks, inverse, mode);
}

template <class T, int D>
DeviceRank<T, D>::~DeviceRank() {
  for (cudaEvent_t e : marks_)
    if (e) cudaEventDestroy(e);
  if (gathered_) cudaEventDestroy(gathered_);
  if (arrived_) cudaEventDestroy(arrived_);
  if (messages_) cudaStreamDestroy(messages_);
}

// An event on the rank's stream (made on first use): no wait.
template <class T, int D>
void DeviceRank<T, D>::mark(int k) {
  cuda::DeviceScope scope(context_.device);
  if (!marks_[k]) check(cudaEventCreate(&marks_[k]), "DistributedPlan: cudaEventCreate");
  check(cudaEventRecord(marks_[k], context_.stream), "DistributedPlan: cudaEventRecord");
}

template <class T, int D>
double DeviceRank<T, D>::between(int a, int b) const {
  if (!marks_[a] || !marks_[b]) return 0;
  cuda::DeviceScope scope(context_.device);
  check(cudaEventSynchronize(marks_[b]), "DistributedPlan::last_timings");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, marks_[a], marks_[b]), "DistributedPlan::last_timings");
  return 1e-3 * ms;
}

PMKIT_DEFINE_RANK_FACTORY(make_device_rank, DeviceRank)

}  // namespace pmkit::distributed
