// The device half of a CUDA rank (device_rank.hpp): small kernels that gather and
// scatter the ghost lists, copy between blocks and local meshes, find each particle's
// owner and pack the migrating particles, and the deterministic spread's kernels (on the
// functions exact_spread.hpp shares with the CPU ranks); the transport moves the packed
// buffers.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <vector>

#if defined(PMKIT_WITH_NCCL)
#include <nccl.h>
#endif

#include "distributed/collective.hpp"
#include "distributed/device_rank.hpp"
#include "distributed/exact_spread.hpp"
#include "distributed/migration.hpp"
#include "cuda/runtime.hpp"

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

template <class T>
__device__ void add_atomically(T* node, T value) {
  atomicAdd(node, value);
}

// A 128-bit integer added exactly with two native 64-bit atomics: the low words, then
// the high words with the carry out of the low word's addition (seen from the value the
// atomic found). Sums modulo 2^128 do not depend on the order of the additions.
__device__ void add_atomically(ExactWords* node, ExactWords value) {
  unsigned long long carry = 0;
  if (value.low != 0) {
    const unsigned long long old = atomicAdd(&node->low, value.low);
    carry = old + value.low < old ? 1ull : 0ull;
  }
  const unsigned long long high = static_cast<unsigned long long>(value.high) + carry;
  if (high != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&node->high), high);
}

// Two entries of one list may name the same node (halo.hpp): atomic adds.
template <class T>
__global__ void scatter_add_kernel(T* mesh, const std::int64_t* index, std::int64_t n, const T* in) {
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) add_atomically(mesh + index[e], in[e]);
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
  std::int64_t rows;  // rows along x: the product of shape[1..D)
};

enum class Copy { BlockToLocal, LocalToBlock, AddToBlock };

// One owned node between a caller's block (index k) and a local mesh (index l).
template <class T>
struct CopyNode {
  T* block;
  T* local;
  Copy copy;
  __device__ void operator()(std::int64_t k, std::int64_t l) const {
    if (copy == Copy::BlockToLocal) local[l] = block[k];
    else if (copy == Copy::LocalToBlock) block[k] = local[l];
    else block[k] += local[l];
  }
};

// The deterministic spread's owned node: its fixed-point sum rounded into the block.
template <class T>
struct RoundNode {
  T* block;
  const ExactWords* local;
  double inverse_scale;
  bool add;
  __device__ void operator()(std::int64_t k, std::int64_t l) const { round_exact(local[l], inverse_scale, add, block[k]); }
};

// Rows of the launch grid's y dimension at most (CUDA's limit); more rows loop.
constexpr unsigned kMaxGridRows = 65535;

// Threads along a row (x), rows over the grid's y: one division per row and thread, in
// 32 bits (a row index fits them), rather than 64-bit ones per node. node(k, l) moves
// block node k and local node l.
template <class Node, int D>
__global__ void region_kernel(DeviceRegion<D> r, Node node) {
  const std::int64_t x = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (x >= r.shape[0]) return;
  for (std::int64_t row = blockIdx.y; row < r.rows; row += gridDim.y) {
    std::int64_t l = r.start[0] + x;
    if constexpr (D == 2) {
      l += (r.start[1] + row) * r.local[0];
    } else {
      const unsigned y = static_cast<unsigned>(row) % static_cast<unsigned>(r.shape[1]);
      const unsigned z = static_cast<unsigned>(row) / static_cast<unsigned>(r.shape[1]);
      l += ((r.start[2] + z) * r.local[1] + r.start[1] + y) * r.local[0];
    }
    node(row * r.shape[0] + x, l);
  }
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
  __device__ double raw(int d, double x) const { return raw_coordinate(axis[d], x); }
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
  // No contraction into an fma: the same rounding as the host's wrap_position.
  T wrapped = static_cast<T>(__dsub_rn(x, __dmul_rn(floor(u / a.cells), a.cells * a.spacing)));
  for (int step = 0; step < 64; ++step) {
    u = owners.raw(d, static_cast<double>(wrapped));
    if (u < 0) wrapped = step_towards(wrapped, T(INFINITY));
    else if (u > a.cells) wrapped = step_towards(wrapped, T(-INFINITY));
    else break;
  }
  return wrapped;
}

// Particle i's grid coordinates u, checked: finite, and in [0, cells] on every axis. With
// `wrap` (migrate), periodic coordinates are first wrapped into the domain, and `wrapped`
// receives the position on every axis (the input on bounded ones); without, they must
// lie inside already (set_points).
template <class T, int D>
__device__ bool grid_coordinates(const Columns<T, D>& positions, std::int64_t i, const DeviceOwners<D>& owners,
                                 bool wrap, double (&u)[D], T (&wrapped)[D]) {
  bool ok = true;
  for (int d = 0; d < D; ++d) {
    const double x = static_cast<double>(positions.c[d][i]);
    if (!isfinite(x)) return false;
    if (wrap && owners.axis[d].kind == detail::AxisKind::Periodic) {
      wrapped[d] = wrap_on_device<T, D>(owners, d, x, u[d]);
      continue;
    }
    u[d] = owners.raw(d, x);
    ok = ok && u[d] >= 0 && u[d] <= owners.axis[d].cells;
    wrapped[d] = static_cast<T>(x);
  }
  return ok;
}

template <class T, int D>
__global__ void stranger_kernel(Columns<T, D> positions, std::int64_t n, DeviceOwners<D> owners, int rank,
                                unsigned long long* first) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  double u[D];
  T unused[D];
  if (!grid_coordinates<T, D>(positions, i, owners, false, u, unused) || owners.rank_of(u) != rank)
    atomicMin(first, static_cast<unsigned long long>(i));
}

// The migration's counters: particles leaving for each rank, then the first particle
// with a bad position and the staying particles that a periodic wrap moves.
struct MigrationCounters {
  __host__ __device__ static int first_bad(int ranks) { return ranks; }
  __host__ __device__ static int wrapping(int ranks) { return ranks + 1; }
  __host__ __device__ static int size(int ranks) { return ranks + 2; }
};

// Per particle, reading the positions only: its key (0 for a particle that stays, 1 +
// destination for one that leaves), the counts per destination, the staying particles
// that a periodic wrap moves (listed in any order: each is rewritten in its own slot),
// the first particle with a bad position.
template <class T, int D>
__global__ void classify_kernel(Columns<T, D> positions, std::int64_t n, DeviceOwners<D> owners, int rank,
                                int ranks, unsigned* keys, unsigned* wrapping, unsigned long long* counters) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  double u[D];
  T wrapped[D];
  if (!grid_coordinates<T, D>(positions, i, owners, true, u, wrapped)) {
    atomicMin(counters + MigrationCounters::first_bad(ranks), static_cast<unsigned long long>(i));
    return;
  }
  const int destination = owners.rank_of(u);
  keys[i] = destination == rank ? 0u : 1u + static_cast<unsigned>(destination);
  if (destination != rank) {
    atomicAdd(counters + destination, 1ull);
    return;
  }
  bool moves = false;
  for (int d = 0; d < D; ++d) moves = moves || wrapped[d] != positions.c[d][i];
  if (moves) wrapping[atomicAdd(counters + MigrationCounters::wrapping(ranks), 1ull)] = static_cast<unsigned>(i);
}

// Selects particle i by its key: leaving (key > 0) or staying.
struct KeyIs {
  const unsigned* keys;
  bool leaving;
  __device__ bool operator()(unsigned i) const { return (keys[i] != 0) == leaving; }
};

__global__ void gather_keys_kernel(const unsigned* index, std::int64_t n, const unsigned* keys, unsigned* out) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k < n) out[k] = keys[index[k]];
}

// Particle i's position wrapped into the domain, from the first D of a migration's
// columns (checked by classify_kernel already; device code: View's converting
// constructor is the host's).
template <class T, int D>
__device__ void wrapped_position(const View<T>* columns, std::int64_t i, const DeviceOwners<D>& owners,
                                 T (&wrapped)[D]) {
  Columns<T, D> positions;
  for (int d = 0; d < D; ++d) {
    positions.c[d].data = columns[d].data;
    positions.c[d].size = columns[d].size;
    positions.c[d].stride = columns[d].stride;
  }
  double u[D];
  grid_coordinates<T, D>(positions, i, owners, true, u, wrapped);
}

// Row k of the leaving particles: particle index[k]'s wrapped position and properties.
template <class T, int D>
__global__ void pack_kernel(const unsigned* index, std::int64_t n, DeviceOwners<D> owners, const View<T>* columns,
                            int values, T* rows) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::int64_t i = index[k];
  T wrapped[D];
  wrapped_position<T, D>(columns, i, owners, wrapped);
  for (int d = 0; d < D; ++d) rows[k * values + d] = wrapped[d];
  for (int v = D; v < values; ++v) rows[k * values + v] = columns[v][i];
}

// The listed staying particles' positions wrapped in place.
template <class T, int D>
__global__ void wrap_kernel(const unsigned* list, std::int64_t n, DeviceOwners<D> owners, const View<T>* columns) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::int64_t i = list[k];
  T wrapped[D];
  wrapped_position<T, D>(columns, i, owners, wrapped);
  for (int d = 0; d < D; ++d) columns[d][i] = wrapped[d];
}

// The staying particles past the kept count fill, in order, the slots the leaving ones
// left below it: holes[j] <- from[j] for the *moves of them (as many as each).
template <class T>
__global__ void fill_kernel(const unsigned* holes, const unsigned* from, const unsigned* moves, std::int64_t n,
                            const View<T>* columns, int values) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= n || j >= *moves) return;
  for (int v = 0; v < values; ++v) columns[v][holes[j]] = columns[v][from[j]];
}

// Bits of the migration's sort keys, 0 .. ranks.
int key_bits(int ranks) {
  int bits = 1;
  while ((1 << bits) <= ranks) ++bits;
  return bits;
}

// Rows [0, n) into the caller's arrays from slot `first` on.
template <class T>
__global__ void unpack_kernel(const T* rows, std::int64_t n, const View<T>* columns, int values, std::int64_t first) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  for (int v = 0; v < values; ++v) columns[v][first + k] = rows[k * values + v];
}

// The deterministic spread's stencils of a rank's particles (exact_stencil), per axis.
template <class T, int D>
struct ExactStencils {
  int* base[D];
  T* frac[D];
};

template <int D>
struct FirstCell {
  std::int64_t cell[D];
};

template <class K, class T, int D>
__global__ void locate_exact_kernel(Columns<T, D> positions, std::int64_t n, DeviceOwners<D> owners,
                                    FirstCell<D> first, ExactStencils<T, D> out) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  double u[D];
  for (int d = 0; d < D; ++d) u[d] = owners.raw(d, static_cast<double>(positions.c[d][i]));
  int base[D];
  T s[D];
  exact_stencil<K, T, D>(u, first.cell, base, s);
  for (int d = 0; d < D; ++d) {
    out.base[d][i] = base[d];
    out.frac[d][i] = s[d];
  }
}

// The largest |q| as the bits of a double (their order is the values' for non-negative
// ones; a NaN's or an infinity's are above every finite value's): a warp's largest, then
// one atomic a warp. found[0]: the largest bits; found[1]: the first value not finite.
template <class T>
__global__ void largest_kernel(View<const T> q, std::int64_t n, unsigned long long* found) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  unsigned long long bits = 0;
  if (i < n) {
    const double v = fabs(static_cast<double>(q[i]));
    if (!isfinite(v)) atomicMin(found + 1, static_cast<unsigned long long>(i));
    bits = static_cast<unsigned long long>(__double_as_longlong(v));
  }
  for (int offset = 16; offset > 0; offset /= 2) bits = max(bits, __shfl_down_sync(0xffffffffu, bits, offset));
  if (threadIdx.x % 32 == 0 && bits != 0) atomicMax(found, bits);
}

// One thread a particle: its contributions to property q's fixed-point local mesh.
template <class K, class T, int D>
__global__ void deposit_exact_kernel(ExactStencils<T, D> stencils, std::int64_t n, View<const T> q, double scale,
                                     detail::Layout<D> local, ExactWords* mesh) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  int base[D];
  T s[D];
  for (int d = 0; d < D; ++d) {
    base[d] = stencils.base[d][i];
    s[d] = stencils.frac[d][i];
  }
  const double value = static_cast<double>(q[i]);
  deposit_exact<K, T, D>(local, base, s, &value, &scale, 1,
                         [&](int, std::int64_t node, ExactWords w) { add_atomically(mesh + node, w); });
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
  detail::Layout<D> local;
  Kernel kernel = Kernel::linear();
  FirstCell<D> first_cell{};
  DeviceRegion<D> region{};
  detail::Layout<D> global;
  DeviceOwners<D> owners{};
  std::array<DeviceBuffer<int>, D> owner_tables;
  // Ghost lists (halo.hpp): this rank's ghost nodes by owner, its owned nodes by sender.
  DeviceBuffer<std::int64_t> ghost_index, owned_index;
  std::vector<std::int64_t> ghost_offsets, owned_offsets;
  DeviceBuffer<T> meshes, send, recv;
  // The deterministic spread: the particles' stencils, the fixed-point local meshes and
  // ghost buffers, each property's largest |q| and first value that is not finite.
  std::array<DeviceBuffer<int>, D> exact_base;
  std::array<DeviceBuffer<T>, D> exact_frac;
  DeviceBuffer<ExactWords> exact, exact_send, exact_recv;
  DeviceBuffer<unsigned long long> largest;
  DeviceBuffer<unsigned long long> counters;
  // Migration scratch: each particle's key; the staying particles a wrap moves; the leaving particles by index, their keys,
  // both sorted by destination; the staying particles past the kept count; the
  // selections' counts (leaving, staying past); the packed rows out and in.
  DeviceBuffer<unsigned> keys, wrapping, leavers, leaver_keys, sorted_keys, sorted_leavers, tail, selected;
  DeviceBuffer<unsigned char> cub_scratch;
  DeviceBuffer<T> rows, arrivals;
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

  // Pinned room for `bytes`, regrown with DeviceBuffer's headroom (cudaFreeHost waits
  // for the device too).
  void host_reserve(unsigned char*& buffer, std::size_t& have, std::size_t bytes) {
    if (bytes <= have) return;
    const std::size_t roomy = have == 0 ? bytes : std::max(bytes, have + have / DeviceBuffer<T>::kRegrowthHeadroom);
    if (buffer) cudaFreeHost(buffer);
    buffer = nullptr;
    have = 0;
    check(cudaMallocHost(reinterpret_cast<void**>(&buffer), roomy), "pinned staging buffer");
    have = roomy;
  }

  // The owned nodes of mesh j, for j < count, each by node(j) (CopyNode, RoundNode): one
  // mesh a launch.
  template <class MakeNode>
  void for_region(int count, MakeNode&& node) {
    cuda::DeviceScope scope(device);
    if (region.size == 0) return;
    const dim3 grid(blocks_for(region.shape[0]), static_cast<unsigned>(std::min<std::int64_t>(region.rows, kMaxGridRows)));
    for (int j = 0; j < count; ++j) region_kernel<<<grid, kThreads, 0, stream>>>(region, node(j));
    cuda::check_launch("pmkit::DistributedPlan::region_kernel");
  }
  void copy_region(T* const* blocks, int count, Copy copy) {
    for_region(count, [&](int j) { return CopyNode<T>{blocks[j], meshes.get() + j * local_size, copy}; });
  }

  // The deterministic spread's stencil arrays, as the kernels take them.
  ExactStencils<T, D> exact_stencils() {
    ExactStencils<T, D> stencils;
    for (int d = 0; d < D; ++d) {
      stencils.base[d] = exact_base[d].get();
      stencils.frac[d] = exact_frac[d].get();
    }
    return stencils;
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
    exchange_bytes(comm, 1, host_send, send_offsets, host_recv, recv_offsets);
    // The own part is already on the device: copy the peers' parts around it.
    if (recv_offsets[rank] > 0)
      check(cudaMemcpyAsync(in, host_recv, recv_offsets[rank], cudaMemcpyHostToDevice, stream), "staging to device");
    if (static_cast<std::int64_t>(received) > recv_offsets[rank + 1])
      check(cudaMemcpyAsync(in + recv_offsets[rank + 1], host_recv + recv_offsets[rank + 1],
                            received - recv_offsets[rank + 1], cudaMemcpyHostToDevice, stream),
            "staging to device");
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
                             const detail::Layout<D>& global, const detail::Layout<D>& local, MPI_Comm comm,
                             const Kernel& kernel, const Options& options, Transport transport)
    : state_(std::make_unique<State>()), transport_(resolve(transport)) {
  State& s = *state_;
  s.comm = comm;
  MPI_Comm_rank(comm, &s.rank);
  MPI_Comm_size(comm, &s.size);
  s.device = options.device;
  s.stream = cuda::to_cuda_stream(options.stream);
  cuda::DeviceScope scope(s.device);
  s.local_size = local.size;
  s.local = local;
  s.kernel = kernel;
  s.global = global;
  s.region.size = 1;
  s.region.rows = 1;
  for (int d = 0; d < D; ++d) {
    s.region.start[d] = region.start[d];
    s.region.shape[d] = region.shape[d];
    s.region.local[d] = region.local[d];
    s.region.size *= region.shape[d];
    if (d > 0) s.region.rows *= region.shape[d];
    s.owners.axis[d] = global.axis[d];
    s.first_cell.cell[d] = decomposition.block(s.rank).first_cell[d];
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
  s.counters.reserve(MigrationCounters::size(s.size), "migration counts");
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

// A new buffer starts at zero, so that the first and last stored plane of each axis,
// which the ghost fill leaves and no stencil reaches (halo.cpp), hold zeros and not what
// the memory held.
template <class T, int D>
T* DeviceRank<T, D>::meshes(int count) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  const std::size_t had = s.meshes.size();
  s.meshes.reserve(static_cast<std::size_t>(count) * s.local_size, "local meshes");
  if (s.meshes.size() != had)
    check(cudaMemsetAsync(s.meshes.get(), 0, s.meshes.size() * sizeof(T), s.stream), "local meshes");
  return s.meshes.get();
}

template <class T, int D>
void DeviceRank<T, D>::block_to_local(const T* const* blocks, int count) {
  state_->copy_region(const_cast<T* const*>(blocks), count, Copy::BlockToLocal);
}

template <class T, int D>
void DeviceRank<T, D>::local_to_block(T* const* blocks, int count, Accumulate mode) {
  state_->copy_region(blocks, count, mode == Accumulate::Overwrite ? Copy::LocalToBlock : Copy::AddToBlock);
}

template <class T, int D>
void DeviceRank<T, D>::halo_sum(int count) {
  halo_pass(state_->meshes.get(), state_->send.get(), state_->recv.get(), count, true);
}

template <class T, int D>
void DeviceRank<T, D>::halo_fill(int count) {
  halo_pass(state_->meshes.get(), state_->send.get(), state_->recv.get(), count, false);
}

// One mesh at a time: gather the values the lists send, exchange, then add them to the
// owners' nodes (sum: from the ghost nodes) or write them to the ghost nodes (fill: from
// the owned ones).
template <class T, int D>
template <class V>
void DeviceRank<T, D>::halo_pass(V* meshes, V* send, V* recv, int count, bool sum) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  const std::int64_t* from = sum ? s.ghost_index.get() : s.owned_index.get();
  const std::int64_t* to = sum ? s.owned_index.get() : s.ghost_index.get();
  const std::vector<std::int64_t>& from_offsets = sum ? s.ghost_offsets : s.owned_offsets;
  const std::vector<std::int64_t>& to_offsets = sum ? s.owned_offsets : s.ghost_offsets;
  const std::int64_t out = from_offsets.back(), in = to_offsets.back();
  const auto send_bytes = byte_offsets(from_offsets, sizeof(V));
  const auto recv_bytes = byte_offsets(to_offsets, sizeof(V));
  for (int j = 0; j < count; ++j) {
    V* mesh = meshes + j * s.local_size;
    if (out > 0) gather_kernel<<<blocks_for(out), kThreads, 0, s.stream>>>(mesh, from, out, send);
    s.exchange(transport_, reinterpret_cast<const unsigned char*>(send), send_bytes,
               reinterpret_cast<unsigned char*>(recv), recv_bytes);
    if (in > 0 && sum) scatter_add_kernel<<<blocks_for(in), kThreads, 0, s.stream>>>(mesh, to, in, recv);
    if (in > 0 && !sum) scatter_kernel<<<blocks_for(in), kThreads, 0, s.stream>>>(mesh, to, in, recv);
  }
  cuda::check_launch("pmkit::DistributedPlan::halo_pass");
}

template <class T, int D>
void DeviceRank<T, D>::locate_exact(const std::array<View<const T>, D>& positions, std::size_t n) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  Columns<T, D> columns;
  for (int d = 0; d < D; ++d) {
    s.exact_base[d].reserve(std::max<std::size_t>(1, n), "deterministic stencils");
    s.exact_frac[d].reserve(std::max<std::size_t>(1, n), "deterministic stencils");
    columns.c[d] = positions[d];
  }
  if (n == 0) return;
  kernels::dispatch(s.kernel, [&](auto k) {
    locate_exact_kernel<decltype(k), T, D><<<blocks_for(n), kThreads, 0, s.stream>>>(columns, n, s.owners, s.first_cell,
                                                                                   s.exact_stencils());
  });
  cuda::check_launch("pmkit::DistributedPlan::locate_exact_kernel");
}

template <class T, int D>
void DeviceRank<T, D>::largest_values(Span<View<const T>> props, std::size_t n, std::vector<double>& max_abs) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  const std::size_t count = props.size();
  s.largest.reserve(std::max<std::size_t>(1, 2 * count), "deterministic maxima");
  std::vector<unsigned long long> found(2 * count);
  for (std::size_t j = 0; j < count; ++j) found[2 * j + 1] = n;
  check(cudaMemcpyAsync(s.largest.get(), found.data(), found.size() * sizeof(unsigned long long),
                        cudaMemcpyHostToDevice, s.stream),
        "spread");
  for (std::size_t j = 0; j < count && n > 0; ++j)
    largest_kernel<T><<<blocks_for(n), kThreads, 0, s.stream>>>(props[j], n, s.largest.get() + 2 * j);
  cuda::check_launch("pmkit::DistributedPlan::largest_kernel");
  check(cudaMemcpyAsync(found.data(), s.largest.get(), found.size() * sizeof(unsigned long long),
                        cudaMemcpyDeviceToHost, s.stream),
        "spread");
  check(cudaStreamSynchronize(s.stream), "spread");
  for (std::size_t j = 0; j < count; ++j) {
    const std::size_t bad = found[2 * j + 1];
    if (bad < n) {
      T v;
      check(cudaMemcpy(&v, props[j].data + bad * props[j].stride, sizeof(T), cudaMemcpyDeviceToHost), "spread");
      fail_not_finite(j, bad, static_cast<double>(v));
    }
    std::memcpy(&max_abs[j], &found[2 * j], sizeof(double));
  }
}

template <class T, int D>
void DeviceRank<T, D>::exact_meshes(int count) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  s.exact.reserve(static_cast<std::size_t>(count) * s.local_size, "fixed-point local meshes");
  const std::size_t lists = std::max<std::size_t>(1, std::max(s.ghost_offsets.back(), s.owned_offsets.back()));
  s.exact_send.reserve(lists, "fixed-point ghost buffer");
  s.exact_recv.reserve(lists, "fixed-point ghost buffer");
}

template <class T, int D>
void DeviceRank<T, D>::spread_exact(Span<View<const T>> props, std::size_t n, const std::vector<double>& scale) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  const std::size_t count = props.size();
  check(cudaMemsetAsync(s.exact.get(), 0, count * s.local_size * sizeof(ExactWords), s.stream), "spread");
  if (n == 0) return;
  const ExactStencils<T, D> stencils = s.exact_stencils();
  kernels::dispatch(s.kernel, [&](auto k) {
    for (std::size_t j = 0; j < count; ++j)
      deposit_exact_kernel<decltype(k), T, D><<<blocks_for(n), kThreads, 0, s.stream>>>(
          stencils, n, props[j], scale[j], s.local, s.exact.get() + j * s.local_size);
  });
  cuda::check_launch("pmkit::DistributedPlan::deposit_exact_kernel");
}

template <class T, int D>
void DeviceRank<T, D>::halo_sum_exact(int count) {
  halo_pass(state_->exact.get(), state_->exact_send.get(), state_->exact_recv.get(), count, true);
}

template <class T, int D>
void DeviceRank<T, D>::exact_to_block(T* const* blocks, int count, const std::vector<double>& inverse,
                                      Accumulate mode) {
  State& s = *state_;
  s.for_region(count, [&](int j) {
    return RoundNode<T>{blocks[j], s.exact.get() + j * s.local_size, inverse[j], mode == Accumulate::Add};
  });
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

// Classifies every particle on the device (reading only), agrees on the moves, packs the
// leaving ones by destination, wraps the staying ones in place where a periodic axis
// moves them and fills the leavers' slots below the kept count with the staying
// particles past it: work in the leaving particles' number beyond the one reading pass.
template <class T, int D>
std::size_t DeviceRank<T, D>::migrate(const std::array<View<T>, D>& positions, Span<View<T>> props,
                                      std::size_t count) {
  State& s = *state_;
  cuda::DeviceScope scope(s.device);
  const int values = D + static_cast<int>(props.size());
  const int counters = MigrationCounters::size(s.size);
  std::size_t capacity = 0, leaving = 0;
  unsigned long long wraps = 0;
  std::vector<long long> send_counts(s.size, 0);
  agree(s.comm, "migrate", [&] {
    capacity = check_migration_arrays<T, D>(positions, props, count);
    s.keys.reserve(std::max<std::size_t>(1, count), "migration keys");
    s.wrapping.reserve(std::max<std::size_t>(1, count), "migration keys");
    std::vector<View<T>> columns(positions.begin(), positions.end());
    columns.insert(columns.end(), props.begin(), props.end());
    s.columns.reserve(columns.size(), "migration columns");
    check(cudaMemcpyAsync(s.columns.get(), columns.data(), columns.size() * sizeof(View<T>), cudaMemcpyHostToDevice,
                          s.stream),
          "migrate");
    std::vector<unsigned long long> initial(counters, 0);
    initial[MigrationCounters::first_bad(s.size)] = count;
    check(cudaMemcpyAsync(s.counters.get(), initial.data(), counters * sizeof(unsigned long long),
                          cudaMemcpyHostToDevice, s.stream),
          "migrate");
    if (count > 0) {
      Columns<T, D> c;
      for (int d = 0; d < D; ++d) c.c[d] = positions[d];
      classify_kernel<T, D><<<blocks_for(count), kThreads, 0, s.stream>>>(c, count, s.owners, s.rank, s.size,
                                                                          s.keys.get(), s.wrapping.get(),
                                                                          s.counters.get());
      cuda::check_launch("pmkit::DistributedPlan::classify_kernel");
    }
    std::vector<unsigned long long> found(counters);
    check(cudaMemcpyAsync(found.data(), s.counters.get(), counters * sizeof(unsigned long long),
                          cudaMemcpyDeviceToHost, s.stream),
          "migrate");
    check(cudaStreamSynchronize(s.stream), "migrate");
    const std::size_t bad = found[MigrationCounters::first_bad(s.size)];
    if (bad < count) {  // the first bad particle: the host check names it
      double x[D], u[D];
      T wrapped[D];
      for (int d = 0; d < D; ++d) {
        T v;
        check(cudaMemcpy(&v, positions[d].data + bad * positions[d].stride, sizeof(T), cudaMemcpyDeviceToHost),
              "migrate");
        x[d] = static_cast<double>(v);
      }
      migration_coordinates<T, D>(s.global, x, bad, u, wrapped);
      fail(ErrorCode::InvalidArgument, "migrate: positions of particle ", bad, " rejected on the device");
    }
    for (int p = 0; p < s.size; ++p) {
      send_counts[p] = static_cast<long long>(found[p]);
      leaving += found[p];
    }
    wraps = found[MigrationCounters::wrapping(s.size)];
    if (leaving == 0) return;
    for (DeviceBuffer<unsigned>* b : {&s.leavers, &s.leaver_keys, &s.sorted_keys, &s.sorted_leavers, &s.tail})
      b->reserve(leaving, "migration lists");
    s.selected.reserve(2, "migration lists");
    s.rows.reserve(leaving * values, "migration rows");
    std::size_t select_bytes = 0, sort_bytes = 0;
    check(cub::DeviceSelect::If(nullptr, select_bytes, thrust::counting_iterator<unsigned>(0), s.leavers.get(),
                                s.selected.get(), static_cast<std::int64_t>(count), KeyIs{s.keys.get(), true},
                                s.stream),
          "migrate: select");
    check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, s.leaver_keys.get(), s.sorted_keys.get(),
                                          s.leavers.get(), s.sorted_leavers.get(), static_cast<std::int64_t>(leaving),
                                          0, key_bits(s.size), s.stream),
          "migrate: sort");
    s.cub_scratch.reserve(std::max<std::size_t>({1, select_bytes, sort_bytes}), "migration scratch");
  });
  const Moves m = agree_on_moves(s.comm, send_counts, count, capacity, sizeof(T) * values, [&](const Moves& moves) {
    s.arrivals.reserve(std::max<std::size_t>(1, (moves.total - moves.kept) * values), "migration arrivals");
  });
  const std::size_t arriving = m.total - m.kept;
  if (leaving > 0) {
    // The leaving particles in their order, then stably by destination, packed.
    std::size_t bytes = s.cub_scratch.size();
    check(cub::DeviceSelect::If(s.cub_scratch.get(), bytes, thrust::counting_iterator<unsigned>(0), s.leavers.get(),
                                s.selected.get(), static_cast<std::int64_t>(count), KeyIs{s.keys.get(), true},
                                s.stream),
          "migrate: select");
    gather_keys_kernel<<<blocks_for(leaving), kThreads, 0, s.stream>>>(s.leavers.get(), leaving, s.keys.get(),
                                                                      s.leaver_keys.get());
    bytes = s.cub_scratch.size();
    check(cub::DeviceRadixSort::SortPairs(s.cub_scratch.get(), bytes, s.leaver_keys.get(), s.sorted_keys.get(),
                                          s.leavers.get(), s.sorted_leavers.get(), static_cast<std::int64_t>(leaving),
                                          0, key_bits(s.size), s.stream),
          "migrate: sort");
    pack_kernel<T, D><<<blocks_for(leaving), kThreads, 0, s.stream>>>(s.sorted_leavers.get(), leaving, s.owners,
                                                                      s.columns.get(), values, s.rows.get());
    cuda::check_launch("pmkit::DistributedPlan::pack_kernel");
  }
  if (wraps > 0) {
    wrap_kernel<T, D><<<blocks_for(wraps), kThreads, 0, s.stream>>>(s.wrapping.get(), wraps, s.owners,
                                                                       s.columns.get());
    cuda::check_launch("pmkit::DistributedPlan::wrap_kernel");
  }
  if (leaving > 0) {
    // The staying particles in [kept, count) fill the leavers' slots below kept: as many
    // of each (the leavers, ascending, start with those below kept).
    std::size_t bytes = s.cub_scratch.size();
    check(cub::DeviceSelect::If(s.cub_scratch.get(), bytes, thrust::counting_iterator<unsigned>(m.kept), s.tail.get(),
                                s.selected.get() + 1, static_cast<std::int64_t>(leaving), KeyIs{s.keys.get(), false},
                                s.stream),
          "migrate: select");
    fill_kernel<T><<<blocks_for(leaving), kThreads, 0, s.stream>>>(s.leavers.get(), s.tail.get(), s.selected.get() + 1,
                                                                   leaving, s.columns.get(), values);
    cuda::check_launch("pmkit::DistributedPlan::fill_kernel");
  }
  const std::size_t row_bytes = sizeof(T) * values;
  std::vector<std::int64_t> send_bytes(s.size + 1), recv_bytes(s.size + 1);
  for (int p = 0; p <= s.size; ++p) {
    send_bytes[p] = m.send_offsets[p] * static_cast<std::int64_t>(row_bytes);
    recv_bytes[p] = m.recv_offsets[p] * static_cast<std::int64_t>(row_bytes);
  }
  s.exchange(transport_, reinterpret_cast<const unsigned char*>(s.rows.get()), send_bytes,
             reinterpret_cast<unsigned char*>(s.arrivals.get()), recv_bytes);
  if (arriving > 0) {
    unpack_kernel<<<blocks_for(arriving), kThreads, 0, s.stream>>>(s.arrivals.get(), arriving, s.columns.get(), values,
                                                                   m.kept);
    cuda::check_launch("pmkit::DistributedPlan::unpack_kernel");
  }
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
