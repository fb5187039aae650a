// The device half of a CUDA rank (device_rank.hpp): small kernels that gather and
// scatter the ghost lists, copy between blocks and local meshes, find each particle's
// owner and pack the migrating particles; the transport moves the packed buffers.
#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <cstring>
#include <vector>

#if defined(PMKIT_WITH_NCCL)
#include <nccl.h>
#endif

#include "distributed/collective.hpp"
#include "distributed/device_rank.hpp"
#include "distributed/migration.hpp"
#include "pmkit/cuda/runtime.hpp"

namespace pmkit::distributed {

using cuda::check;
using cuda::DeviceBuffer;
using detail::fail;

namespace {

// Threads per block of these memory-bound kernels (docs/tuning.md#kthreads-distributed).
constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

#if defined(PMKIT_WITH_NCCL)
void check_nccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) fail(ErrorCode::Device, what, ": ", ncclGetErrorString(status));
}
#endif

template <class T>
__global__ void gather_kernel(const T* mesh, const std::int64_t* index, std::int64_t n, T* out) {
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) out[e] = mesh[index[e]];
}

// Two entries of one list may name the same node (halo.hpp): atomic adds.
template <class T>
__global__ void scatter_add_kernel(T* mesh, const std::int64_t* index, std::int64_t n, const T* in) {
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) atomicAdd(mesh + index[e], in[e]);
}

template <class T>
__global__ void scatter_kernel(T* mesh, const std::int64_t* index, std::int64_t n, const T* in) {
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) mesh[index[e]] = in[e];
}

template <int D>
struct DeviceRegion {
  std::int64_t start[D], shape[D], local[D];
  std::int64_t size;
};

enum class Copy { BlockToLocal, LocalToBlock, AddToBlock };

template <class T, int D>
__global__ void region_kernel(T* block, T* local, DeviceRegion<D> r, Copy copy) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= r.size) return;
  std::int64_t rest = k, l = 0, stride = 1;
  for (int d = 0; d < D; ++d) {
    l += (r.start[d] + rest % r.shape[d]) * stride;
    rest /= r.shape[d];
    stride *= r.local[d];
  }
  if (copy == Copy::BlockToLocal) local[l] = block[k];
  else if (copy == Copy::LocalToBlock) block[k] = local[l];
  else block[k] += local[l];
}

// The owners of grid coordinates, on the device (AxisSplit::owner_of_coordinate).
template <int D>
struct DeviceOwners {
  detail::Axis axis[D];
  const int* owner_of_cell[D];
  int ranks[D];

  __device__ int rank_of(const double (&u)[D]) const {
    int r = 0;
    for (int d = 0; d < D; ++d) {
      const double f = floor(u[d]);
      const int c = f >= axis[d].cells ? ranks[d] - 1 : owner_of_cell[d][f < 0 ? 0 : static_cast<std::int64_t>(f)];
      r = r * ranks[d] + c;
    }
    return r;
  }
  __device__ double raw(int d, double x) const {
    const detail::Axis& a = axis[d];
    return a.exact_inverse != 0.0 ? (x - a.origin) * a.exact_inverse : (x - a.origin) / a.spacing;
  }
};

template <class T, int D>
struct Columns {
  View<const T> c[D];
};

// x wrapped into a periodic axis' domain (migration.hpp's wrap_position).
template <class T>
__device__ T step_towards(T x, T to) {
  if constexpr (sizeof(T) == 4) return nextafterf(x, to);
  else return nextafter(x, to);
}

template <class T, int D>
__device__ T wrap_on_device(const DeviceOwners<D>& owners, int d, double x, double& u) {
  const detail::Axis& a = owners.axis[d];
  u = owners.raw(d, x);
  if (u >= 0 && u <= a.cells) return static_cast<T>(x);
  T wrapped = static_cast<T>(x - floor(u / a.cells) * (a.cells * a.spacing));
  for (int step = 0; step < 64; ++step) {
    u = owners.raw(d, static_cast<double>(wrapped));
    if (u < 0) wrapped = step_towards(wrapped, T(INFINITY));
    else if (u > a.cells) wrapped = step_towards(wrapped, T(-INFINITY));
    else break;
  }
  return wrapped;
}

// Particle i's grid coordinates u, checked: finite, and in [0, cells] on every axis. With
// `wrapped` (migrate), periodic coordinates are first wrapped into the domain and every
// axis' position stored there (wrapped[d n + i]); without, they must lie inside already
// (set_points).
template <class T, int D>
__device__ bool grid_coordinates(const Columns<T, D>& positions, std::int64_t i, std::int64_t n,
                                 const DeviceOwners<D>& owners, double (&u)[D], T* wrapped) {
  bool ok = true;
  for (int d = 0; d < D; ++d) {
    const double x = static_cast<double>(positions.c[d][i]);
    if (!isfinite(x)) return false;
    if (wrapped && owners.axis[d].kind == detail::AxisKind::Periodic) {
      wrapped[d * n + i] = wrap_on_device<T, D>(owners, d, x, u[d]);
      continue;
    }
    u[d] = owners.raw(d, x);
    ok = ok && u[d] >= 0 && u[d] <= owners.axis[d].cells;
    if (wrapped) wrapped[d * n + i] = static_cast<T>(x);
  }
  return ok;
}

template <class T, int D>
__global__ void stranger_kernel(Columns<T, D> positions, std::int64_t n, DeviceOwners<D> owners, int rank,
                                unsigned long long* first) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  double u[D];
  if (!grid_coordinates<T, D>(positions, i, n, owners, u, nullptr) || owners.rank_of(u) != rank)
    atomicMin(first, static_cast<unsigned long long>(i));
}

// Per particle: its checked and wrapped position, its destination and its sort key (0
// for a particle that stays, 1 + destination for one that leaves); the counts per
// destination; the first particle with a bad position.
template <class T, int D>
__global__ void classify_kernel(Columns<T, D> positions, std::int64_t n, DeviceOwners<D> owners, int rank,
                                T* wrapped, unsigned* keys, unsigned long long* counts, unsigned long long* first_bad) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  double u[D];
  if (!grid_coordinates<T, D>(positions, i, n, owners, u, wrapped)) {
    atomicMin(first_bad, static_cast<unsigned long long>(i));
    return;
  }
  const int destination = owners.rank_of(u);
  keys[i] = destination == rank ? 0u : 1u + static_cast<unsigned>(destination);
  if (destination != rank) atomicAdd(counts + destination, 1ull);
}

// Row k of the packed particles: particle order[k]'s wrapped position and properties.
template <class T, int D>
__global__ void pack_kernel(const unsigned* order, std::int64_t n, const T* wrapped, const View<T>* props, int nprops,
                            T* rows) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::int64_t i = order[k];
  const int values = D + nprops;
  for (int d = 0; d < D; ++d) rows[k * values + d] = wrapped[d * n + i];
  for (int j = 0; j < nprops; ++j) rows[k * values + D + j] = props[j][i];
}

// Bits of the migration's sort keys, 0 .. ranks.
int key_bits(int ranks) {
  int bits = 1;
  while ((1 << bits) <= ranks) ++bits;
  return bits;
}

__global__ void sequence_kernel(unsigned* out, std::int64_t n) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = static_cast<unsigned>(i);
}

// Rows [0, n) into the caller's arrays from slot `first` on.
template <class T>
__global__ void unpack_kernel(const T* rows, std::int64_t n, const View<T>* columns, int values, std::int64_t first) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  for (int v = 0; v < values; ++v) columns[v][first + k] = rows[k * values + v];
}

}  // namespace

template <class T, int D>
struct DeviceRank<T, D>::State {
  MPI_Comm comm;
  int rank = 0, size = 1;
  int device = 0;
  cudaStream_t stream = nullptr;
#if defined(PMKIT_WITH_NCCL)
  ncclComm_t nccl = nullptr;
#endif
  std::int64_t local_size = 0;
  DeviceRegion<D> region{};
  detail::Layout<D> global;
  DeviceOwners<D> owners{};
  std::array<DeviceBuffer<int>, D> owner_tables;
  // Ghost lists (halo.hpp): this rank's ghost nodes by owner, its owned nodes by sender.
  DeviceBuffer<std::int64_t> ghost_index, owned_index;
  std::vector<std::int64_t> ghost_offsets, owned_offsets;
  DeviceBuffer<T> meshes, send, recv;
  DeviceBuffer<unsigned long long> counters;
  // Migration scratch.
  DeviceBuffer<T> wrapped, rows, arrivals;
  DeviceBuffer<unsigned> keys, sorted_keys, identity, order;
  DeviceBuffer<unsigned char> sort_scratch;
  DeviceBuffer<View<T>> columns;
  // Host staging of the host-MPI transport (pinned).
  unsigned char* host_send = nullptr;
  unsigned char* host_recv = nullptr;
  std::size_t host_send_bytes = 0, host_recv_bytes = 0;

  ~State() {
#if defined(PMKIT_WITH_NCCL)
    if (nccl) ncclCommDestroy(nccl);
#endif
    if (host_send) cudaFreeHost(host_send);
    if (host_recv) cudaFreeHost(host_recv);
  }

  void host_reserve(unsigned char*& buffer, std::size_t& have, std::size_t bytes) {
    if (bytes <= have) return;
    if (buffer) cudaFreeHost(buffer);
    buffer = nullptr;
    have = 0;
    check(cudaMallocHost(reinterpret_cast<void**>(&buffer), bytes), "pinned staging buffer");
    have = bytes;
  }

  // Sends bytes [send_offsets[p], send_offsets[p+1]) of `out` to each peer p and receives
  // [recv_offsets[p], ...) of `in` from it; this rank's own part is a device copy.
  void exchange(Transport transport, const unsigned char* out, const std::vector<std::int64_t>& send_offsets,
                unsigned char* in, const std::vector<std::int64_t>& recv_offsets) {
    const std::int64_t self = send_offsets[rank + 1] - send_offsets[rank];
    if (self > 0)
      check(cudaMemcpyAsync(in + recv_offsets[rank], out + send_offsets[rank], self, cudaMemcpyDeviceToDevice, stream),
            "ghost exchange (own part)");
    if (size == 1) return;
#if defined(PMKIT_WITH_NCCL)
    if (transport == Transport::Nccl) {
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        const std::int64_t s = send_offsets[p + 1] - send_offsets[p], r = recv_offsets[p + 1] - recv_offsets[p];
        if (s > 0) check_nccl(ncclSend(out + send_offsets[p], s, ncclChar, p, nccl, stream), "ncclSend");
        if (r > 0) check_nccl(ncclRecv(in + recv_offsets[p], r, ncclChar, p, nccl, stream), "ncclRecv");
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
      return;
    }
#endif
    const std::size_t sent = send_offsets[size], received = recv_offsets[size];
    host_reserve(host_send, host_send_bytes, sent);
    host_reserve(host_recv, host_recv_bytes, received);
    if (sent > 0) check(cudaMemcpyAsync(host_send, out, sent, cudaMemcpyDeviceToHost, stream), "staging to host");
    check(cudaStreamSynchronize(stream), "staging to host");
    std::vector<MPI_Request> requests;
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      const std::int64_t r = recv_offsets[p + 1] - recv_offsets[p];
      if (r == 0) continue;
      requests.emplace_back();
      MPI_Irecv(host_recv + recv_offsets[p], static_cast<int>(r), MPI_BYTE, p, 1, comm, &requests.back());
    }
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      const std::int64_t s = send_offsets[p + 1] - send_offsets[p];
      if (s == 0) continue;
      requests.emplace_back();
      MPI_Isend(host_send + send_offsets[p], static_cast<int>(s), MPI_BYTE, p, 1, comm, &requests.back());
    }
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    // The own part is already on the device: copy the peers' parts around it.
    if (recv_offsets[rank] > 0)
      check(cudaMemcpyAsync(in, host_recv, recv_offsets[rank], cudaMemcpyHostToDevice, stream), "staging to device");
    if (static_cast<std::int64_t>(received) > recv_offsets[rank + 1])
      check(cudaMemcpyAsync(in + recv_offsets[rank + 1], host_recv + recv_offsets[rank + 1],
                            received - recv_offsets[rank + 1], cudaMemcpyHostToDevice, stream),
            "staging to device");
  }

  static std::vector<std::int64_t> bytes_of(const std::vector<std::int64_t>& offsets, std::size_t unit) {
    std::vector<std::int64_t> b(offsets.size());
    for (std::size_t p = 0; p < offsets.size(); ++p) b[p] = offsets[p] * static_cast<std::int64_t>(unit);
    return b;
  }
};

// Auto: NCCL where this build has it (the faster transport where both ran:
// docs/distributed.md#transport), host-staged MPI otherwise.
Transport resolve(Transport requested) {
#if defined(PMKIT_WITH_NCCL)
  return requested == Transport::Auto ? Transport::Nccl : requested;
#else
  if (requested == Transport::Nccl)
    fail(ErrorCode::Unsupported, "transport = Nccl: this build of pmkit found no NCCL (host-staged MPI only)");
  return Transport::HostMpi;
#endif
}

template <class T, int D>
DeviceRank<T, D>::DeviceRank(const Decomposition<D>& decomposition, const Halo& halo, const Region<D>& region,
                             const detail::Layout<D>& global, std::int64_t local_size, MPI_Comm comm,
                             const Options& options, Transport transport)
    : state_(std::make_unique<State>()), transport_(resolve(transport)) {
  State& s = *state_;
  s.comm = comm;
  MPI_Comm_rank(comm, &s.rank);
  MPI_Comm_size(comm, &s.size);
  s.device = options.device;
  s.stream = cuda::to_cuda_stream(options.stream);
  cuda::DeviceScope scope(s.device);
  s.local_size = local_size;
  s.global = global;
  s.region.size = 1;
  for (int d = 0; d < D; ++d) {
    s.region.start[d] = region.start[d];
    s.region.shape[d] = region.shape[d];
    s.region.local[d] = region.local[d];
    s.region.size *= region.shape[d];
    s.owners.axis[d] = global.axis[d];
    s.owners.ranks[d] = decomposition.ranks()[d];
    s.owner_tables[d] = DeviceBuffer<int>(decomposition.axis(d).owner_of_cell, "owner table");
    s.owners.owner_of_cell[d] = s.owner_tables[d].get();
  }
  s.ghost_index = DeviceBuffer<std::int64_t>(halo.ghosts().index, "ghost list");
  s.owned_index = DeviceBuffer<std::int64_t>(halo.owned().index, "ghost owners list");
  s.ghost_offsets = halo.ghosts().offsets;
  s.owned_offsets = halo.owned().offsets;
  s.send.reserve(std::max<std::size_t>(1, std::max(halo.ghosts().index.size(), halo.owned().index.size())), "ghost send buffer");
  s.recv.reserve(std::max<std::size_t>(1, std::max(halo.ghosts().index.size(), halo.owned().index.size())), "ghost receive buffer");
  s.counters.reserve(s.size + 1, "migration counts");
#if defined(PMKIT_WITH_NCCL)
  if (transport_ == Transport::Nccl && s.size > 1) {
    ncclUniqueId id;
    if (s.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm);
    check_nccl(ncclCommInitRank(&s.nccl, s.size, id, s.rank), "ncclCommInitRank");
  }
#endif
}

template <class T, int D>
DeviceRank<T, D>::~DeviceRank() = default;

template <class T, int D>
T* DeviceRank<T, D>::meshes(int count) {
  cuda::DeviceScope scope(state_->device);
  state_->meshes.reserve(static_cast<std::size_t>(count) * state_->local_size, "local meshes");
  return state_->meshes.get();
}

template <class T, int D>
void DeviceRank<T, D>::block_to_local(const T* const* blocks, int count) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  if (s.region.size == 0) return;
  for (int j = 0; j < count; ++j)
    region_kernel<T, D><<<blocks_for(s.region.size), kThreads, 0, s.stream>>>(
        const_cast<T*>(blocks[j]), s.meshes.get() + j * s.local_size, s.region, Copy::BlockToLocal);
  cuda::check_launch("pmkit::DistributedPlan::region_kernel");
}

template <class T, int D>
void DeviceRank<T, D>::local_to_block(T* const* blocks, int count, Accumulate mode) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  if (s.region.size == 0) return;
  for (int j = 0; j < count; ++j)
    region_kernel<T, D><<<blocks_for(s.region.size), kThreads, 0, s.stream>>>(
        blocks[j], s.meshes.get() + j * s.local_size, s.region,
        mode == Accumulate::Overwrite ? Copy::LocalToBlock : Copy::AddToBlock);
  cuda::check_launch("pmkit::DistributedPlan::region_kernel");
}

template <class T, int D>
void DeviceRank<T, D>::halo_sum(int count) {
  halo_pass(count, true);
}

template <class T, int D>
void DeviceRank<T, D>::halo_fill(int count) {
  halo_pass(count, false);
}

// One mesh at a time: gather the values the lists send, exchange, then add them to the
// owners' nodes (sum: from the ghost nodes) or write them to the ghost nodes (fill: from
// the owned ones).
template <class T, int D>
void DeviceRank<T, D>::halo_pass(int count, bool sum) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  const std::int64_t* from = sum ? s.ghost_index.get() : s.owned_index.get();
  const std::int64_t* to = sum ? s.owned_index.get() : s.ghost_index.get();
  const std::vector<std::int64_t>& from_offsets = sum ? s.ghost_offsets : s.owned_offsets;
  const std::vector<std::int64_t>& to_offsets = sum ? s.owned_offsets : s.ghost_offsets;
  const std::int64_t out = from_offsets.back(), in = to_offsets.back();
  const auto send_bytes = State::bytes_of(from_offsets, sizeof(T));
  const auto recv_bytes = State::bytes_of(to_offsets, sizeof(T));
  for (int j = 0; j < count; ++j) {
    T* mesh = s.meshes.get() + j * s.local_size;
    if (out > 0) gather_kernel<<<blocks_for(out), kThreads, 0, s.stream>>>(mesh, from, out, s.send.get());
    s.exchange(transport_, reinterpret_cast<const unsigned char*>(s.send.get()), send_bytes,
               reinterpret_cast<unsigned char*>(s.recv.get()), recv_bytes);
    if (in > 0 && sum) scatter_add_kernel<<<blocks_for(in), kThreads, 0, s.stream>>>(mesh, to, in, s.recv.get());
    if (in > 0 && !sum) scatter_kernel<<<blocks_for(in), kThreads, 0, s.stream>>>(mesh, to, in, s.recv.get());
  }
  cuda::check_launch("pmkit::DistributedPlan::halo_pass");
}

template <class T, int D>
std::size_t DeviceRank<T, D>::first_stranger(const std::array<View<const T>, D>& positions, std::size_t n,
                                             std::array<double, D>& position) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  if (n == 0) return 0;
  const unsigned long long none = n;
  check(cudaMemcpyAsync(s.counters.get(), &none, sizeof(none), cudaMemcpyHostToDevice, s.stream), "set_points");
  Columns<T, D> columns;
  for (int d = 0; d < D; ++d) columns.c[d] = positions[d];
  stranger_kernel<T, D><<<blocks_for(n), kThreads, 0, s.stream>>>(columns, n, s.owners, s.rank, s.counters.get());
  cuda::check_launch("pmkit::DistributedPlan::stranger_kernel");
  unsigned long long first = n;
  check(cudaMemcpyAsync(&first, s.counters.get(), sizeof(first), cudaMemcpyDeviceToHost, s.stream), "set_points");
  check(cudaStreamSynchronize(s.stream), "set_points");
  if (first < n)
    for (int d = 0; d < D; ++d) {
      T x;
      check(cudaMemcpy(&x, positions[d].data + first * positions[d].stride, sizeof(T), cudaMemcpyDeviceToHost),
            "set_points");
      position[d] = static_cast<double>(x);
    }
  return static_cast<std::size_t>(first);
}

template <class T, int D>
std::size_t DeviceRank<T, D>::migrate(const std::array<View<T>, D>& positions, Span<View<T>> props,
                                      std::size_t count) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  const int nprops = static_cast<int>(props.size());
  const int values = D + nprops;
  std::size_t capacity = 0;
  std::vector<long long> send_counts(s.size, 0);
  agree(s.comm, "migrate", [&] {
    capacity = check_migration_arrays<T, D>(positions, props, count);
    s.wrapped.reserve(std::max<std::size_t>(1, D * count), "migration positions");
    for (DeviceBuffer<unsigned>* b : {&s.keys, &s.sorted_keys, &s.identity, &s.order})
      b->reserve(std::max<std::size_t>(1, count), "migration order");
    std::size_t scratch_bytes = 0;
    check(cub::DeviceRadixSort::SortPairs(nullptr, scratch_bytes, s.keys.get(), s.sorted_keys.get(), s.identity.get(),
                                          s.order.get(), static_cast<int>(count), 0, key_bits(s.size), s.stream),
          "migrate: sort");
    s.sort_scratch.reserve(std::max<std::size_t>(1, scratch_bytes), "migration sort");
    s.rows.reserve(std::max<std::size_t>(1, count * values), "migration rows");
    std::vector<View<T>> columns(positions.begin(), positions.end());
    columns.insert(columns.end(), props.begin(), props.end());
    s.columns.reserve(columns.size(), "migration columns");
    check(cudaMemcpyAsync(s.columns.get(), columns.data(), columns.size() * sizeof(View<T>), cudaMemcpyHostToDevice,
                          s.stream),
          "migrate");
    std::vector<unsigned long long> zero(s.size + 1, 0);
    zero[s.size] = count;
    check(cudaMemcpyAsync(s.counters.get(), zero.data(), zero.size() * sizeof(unsigned long long),
                          cudaMemcpyHostToDevice, s.stream),
          "migrate");
    if (count > 0) {
      Columns<T, D> c;
      for (int d = 0; d < D; ++d) c.c[d] = positions[d];
      classify_kernel<T, D><<<blocks_for(count), kThreads, 0, s.stream>>>(
          c, count, s.owners, s.rank, s.wrapped.get(), s.keys.get(), s.counters.get(), s.counters.get() + s.size);
      cuda::check_launch("pmkit::DistributedPlan::classify_kernel");
    }
    std::vector<unsigned long long> counts(s.size + 1);
    check(cudaMemcpyAsync(counts.data(), s.counters.get(), counts.size() * sizeof(unsigned long long),
                          cudaMemcpyDeviceToHost, s.stream),
          "migrate");
    check(cudaStreamSynchronize(s.stream), "migrate");
    if (counts[s.size] < count) {  // the first bad particle: the host check names it
      const std::size_t i = counts[s.size];
      double x[D], u[D];
      T wrapped[D];
      for (int d = 0; d < D; ++d) {
        T v;
        check(cudaMemcpy(&v, positions[d].data + i * positions[d].stride, sizeof(T), cudaMemcpyDeviceToHost), "migrate");
        x[d] = static_cast<double>(v);
      }
      migration_coordinates<T, D>(s.global, x, i, u, wrapped);
      fail(ErrorCode::InvalidArgument, "migrate: positions of particle ", i, " rejected on the device");
    }
    for (int p = 0; p < s.size; ++p) send_counts[p] = static_cast<long long>(counts[p]);
  });
  const Moves m = agree_on_moves(s.comm, send_counts, count, capacity, sizeof(T) * values);
  const std::size_t arriving = m.total - m.kept;
  s.arrivals.reserve(std::max<std::size_t>(1, arriving * values), "migration arrivals");
  if (count > 0) {
    // Stable by key: the staying particles first, in their order, then the leavers by
    // destination rank. A radix sort over the keys' few bits (0 .. size): one pass for
    // up to 255 ranks.
    sequence_kernel<<<blocks_for(count), kThreads, 0, s.stream>>>(s.identity.get(), count);
    std::size_t scratch_bytes = s.sort_scratch.size();
    check(cub::DeviceRadixSort::SortPairs(s.sort_scratch.get(), scratch_bytes, s.keys.get(), s.sorted_keys.get(),
                                          s.identity.get(), s.order.get(), static_cast<int>(count), 0, key_bits(s.size), s.stream),
          "migrate: sort");
    pack_kernel<T, D><<<blocks_for(count), kThreads, 0, s.stream>>>(s.order.get(), count, s.wrapped.get(),
                                                                    s.columns.get() + D, nprops, s.rows.get());
    cuda::check_launch("pmkit::DistributedPlan::pack_kernel");
  }
  const std::size_t row_bytes = sizeof(T) * values;
  std::vector<std::int64_t> send_bytes(s.size + 1), recv_bytes(s.size + 1);
  for (int p = 0; p <= s.size; ++p) {
    send_bytes[p] = m.send_offsets[p] * static_cast<std::int64_t>(row_bytes);
    recv_bytes[p] = m.recv_offsets[p] * static_cast<std::int64_t>(row_bytes);
  }
  s.exchange(transport_, reinterpret_cast<const unsigned char*>(s.rows.get() + m.kept * values), send_bytes,
             reinterpret_cast<unsigned char*>(s.arrivals.get()), recv_bytes);
  if (m.kept > 0)
    unpack_kernel<<<blocks_for(m.kept), kThreads, 0, s.stream>>>(s.rows.get(), m.kept, s.columns.get(), values, 0);
  if (arriving > 0)
    unpack_kernel<<<blocks_for(arriving), kThreads, 0, s.stream>>>(s.arrivals.get(), arriving, s.columns.get(), values,
                                                                   m.kept);
  cuda::check_launch("pmkit::DistributedPlan::unpack_kernel");
  check(cudaStreamSynchronize(s.stream), "migrate");
  return m.total;
}

template <class T, int D>
void DeviceRank<T, D>::synchronize() {
  cuda::DeviceScope scope(state_->device);
  check(cudaStreamSynchronize(state_->stream), "DistributedPlan");
}

template class DeviceRank<float, 2>;
template class DeviceRank<float, 3>;
template class DeviceRank<double, 2>;
template class DeviceRank<double, 3>;

}  // namespace pmkit::distributed
