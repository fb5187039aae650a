// The CUDA rank's migration (migration.cuh): its kernels (classify, sort, pack, wrap,
// select, fill, unpack) on the owner rules and wraps of owners.hpp, which the CPU ranks
// share, and set_points' search for the first particle outside the block.
#include "distributed/cuda/migration.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "distributed/collective.hpp"
#include "distributed/migration.hpp"

namespace pmkit::distributed {

using cuda::check;
using cuda::DeviceBuffer;
using detail::fail;

namespace {

// The first of n particles (a marker n - i, so that the largest marks the first; 0 for
// none) that set_points refuses.
template <class T, int D>
__global__ void stranger_kernel(Columns<T, D> positions, std::int64_t n, Owners<D> owners, int rank,
                                unsigned long long* first) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  if (is_stranger<T, D>(positions, i, owners, rank)) atomicMax(first, static_cast<unsigned long long>(n - i));
}

// The migration's counters, all zero before the pass: particles leaving for each rank,
// then the first particle with a bad position (as stranger_kernel marks it), the staying
// particles that a periodic wrap moves and the leaving ones listed.
struct MigrationCounters {
  __host__ __device__ static int first_bad(int ranks) { return ranks; }
  __host__ __device__ static int wrapping(int ranks) { return ranks + 1; }
  __host__ __device__ static int leaving(int ranks) { return ranks + 2; }
  __host__ __device__ static int size(int ranks) { return ranks + 3; }
};

// A slot in a list of length *counter for each lane of the warp that takes one: one
// atomic a warp. Every lane of the warp calls it.
__device__ unsigned long long warp_slot(bool take, unsigned long long* counter) {
  const unsigned lanes = __ballot_sync(0xffffffffu, take);
  if (lanes == 0) return 0;
  const int lane = static_cast<int>(threadIdx.x & 31u), leader = __ffs(lanes) - 1;
  unsigned long long base = 0;
  if (lane == leader) base = atomicAdd(counter, static_cast<unsigned long long>(__popc(lanes)));
  base = __shfl_sync(0xffffffffu, base, leader);
  return base + static_cast<unsigned>(__popc(lanes & ((1u << lane) - 1u)));
}

// The one pass over the positions (reading them only): each leaving particle listed with
// its destination (key (destination << index_bits) | i, in any order) and counted per
// destination, the staying particles that a periodic wrap moves listed (any order: each
// is rewritten in its own slot), the first particle with a bad position marked. Nothing
// is written for a particle that stays where it is. Launched in whole warps.
template <class T, int D>
__global__ void classify_kernel(Columns<T, D> positions, std::int64_t n, Owners<D> owners, int rank, int ranks,
                                int index_bits, unsigned long long* leavers, unsigned* wrapping,
                                unsigned long long* counters) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  bool leaves = false, moves = false;
  int destination = rank;
  if (i < n) {
    double u[D];
    T wrapped[D];
    if (!grid_coordinates<T, D>(positions, i, owners, true, u, wrapped)) {
      atomicMax(counters + MigrationCounters::first_bad(ranks), static_cast<unsigned long long>(n - i));
    } else {
      destination = owners.rank_of(u);
      leaves = destination != rank;
      PMKIT_UNROLL
      for (int d = 0; d < D; ++d) moves = moves || (!leaves && wrapped[d] != positions.c[d][i]);
    }
  }
  const unsigned leaving_lanes = __ballot_sync(0xffffffffu, leaves);
  const unsigned long long leaver = warp_slot(leaves, counters + MigrationCounters::leaving(ranks));
  const unsigned long long wrapper = warp_slot(moves, counters + MigrationCounters::wrapping(ranks));
  if (leaves) {
    leavers[leaver] = static_cast<unsigned long long>(destination) << index_bits | static_cast<unsigned long long>(i);
    const unsigned same = __match_any_sync(leaving_lanes, destination);
    if (static_cast<int>(threadIdx.x & 31u) == __ffs(same) - 1)
      atomicAdd(counters + destination, static_cast<unsigned long long>(__popc(same)));
  }
  if (moves) wrapping[wrapper] = static_cast<unsigned>(i);
}

// The particle indices of n leaver keys: sorted (by destination, then index) into
// `by_destination`, as listed into `listed`.
__global__ void leaver_indices_kernel(const unsigned long long* sorted, const unsigned long long* keys, std::int64_t n,
                                      unsigned long long mask, unsigned* by_destination, unsigned* listed) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  by_destination[k] = static_cast<unsigned>(sorted[k] & mask);
  listed[k] = static_cast<unsigned>(keys[k] & mask);
}

// Whether slot i holds a particle that stays: i is not among the n leavers (ascending).
struct Stays {
  const unsigned* leavers;
  std::int64_t n;
  __device__ bool operator()(unsigned i) const {
    std::int64_t lo = 0, hi = n;
    while (lo < hi) {
      const std::int64_t mid = (lo + hi) / 2;
      if (leavers[mid] < i) lo = mid + 1;
      else hi = mid;
    }
    return lo == n || leavers[lo] != i;
  }
};

// The first D of a migration's columns as positions to read (device code: View's
// converting constructor is the host's).
template <class T, int D>
__device__ Columns<T, D> read_only(const View<T>* columns) {
  Columns<T, D> positions;
  for (int d = 0; d < D; ++d) {
    positions.c[d].data = columns[d].data;
    positions.c[d].size = columns[d].size;
    positions.c[d].stride = columns[d].stride;
  }
  return positions;
}

// Particle i's position wrapped into the domain, from the first D of a migration's
// columns (checked by classify_kernel already).
template <class T, int D>
__device__ void wrapped_position(const View<T>* columns, std::int64_t i, const Owners<D>& owners,
                                 T (&wrapped)[D]) {
  double u[D];
  grid_coordinates<T, D>(read_only<T, D>(columns), i, owners, true, u, wrapped);
}

// The position columns that migrate wraps in place.
template <class T, int D>
struct WritableColumns {
  View<T> c[D];
};

// The staying particles that classify_kernel listed as moved by a periodic wrap (the
// counters of `ranks` ranks hold their number) wrapped in place; none where it marked a
// bad position (so that no array changes), whose position the first thread copies into
// `bad` for the error. Any number of blocks: they stride over the list, whose length only
// the device may know (one rank: no wait).
template <class T, int D>
__global__ void wrap_listed_kernel(const unsigned* list, const unsigned long long* counters, int ranks,
                                   std::int64_t count, Owners<D> owners, WritableColumns<T, D> columns, double* bad) {
  const Columns<T, D> positions = read_only<T, D>(columns.c);
  const unsigned long long first_bad = counters[MigrationCounters::first_bad(ranks)];
  if (first_bad != 0) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
      for (int d = 0; d < D; ++d) bad[d] = static_cast<double>(positions.c[d][count - first_bad]);
    return;
  }
  const unsigned long long n = counters[MigrationCounters::wrapping(ranks)];
  for (unsigned long long k = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<unsigned long long>(gridDim.x) * blockDim.x) {
    const std::int64_t i = list[k];
    double u[D];
    T wrapped[D];
    grid_coordinates<T, D>(positions, i, owners, true, u, wrapped);
    for (int d = 0; d < D; ++d) columns.c[d][i] = wrapped[d];
  }
}

// Row k of the leaving particles: particle index[k]'s wrapped position and properties.
template <class T, int D>
__global__ void pack_kernel(const unsigned* index, std::int64_t n, Owners<D> owners, const View<T>* columns,
                            int values, T* rows) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const std::int64_t i = index[k];
  T wrapped[D];
  wrapped_position<T, D>(columns, i, owners, wrapped);
  for (int d = 0; d < D; ++d) rows[k * values + d] = wrapped[d];
  for (int v = D; v < values; ++v) rows[k * values + v] = columns[v][i];
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

// Bits that hold the values 0 .. largest.
int bits_for(unsigned long long largest) {
  int bits = 1;
  while (bits < 64 && (largest >> bits) != 0) ++bits;
  return bits;
}

// Rows [0, n) into the caller's arrays from slot `first` on.
template <class T>
__global__ void unpack_kernel(const T* rows, std::int64_t n, const View<T>* columns, int values, std::int64_t first) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  for (int v = 0; v < values; ++v) columns[v][first + k] = rows[k * values + v];
}

}  // namespace

void FreePinned::operator()(unsigned long long* p) const {
  if (p) cudaFreeHost(p);
}

template <class T, int D>
DeviceMigration<T, D>::DeviceMigration(const DeviceContext& context, const Owners<D>& owners,
                                       const detail::Layout<D>& global)
    : context_(context), owners_(owners), global_(global) {
  const std::size_t counters = MigrationCounters::size(context_.size);
  counters_.reserve(counters, "migration counts");
  bad_position_.reserve(D, "migration counts");
  unsigned long long* found = nullptr;
  check(cudaMallocHost(reinterpret_cast<void**>(&found), counters * sizeof(unsigned long long)),
        "migration counts (pinned)");
  found_.reset(found);
}

// The counters of the last pass into found_ (pinned), read once the stream is there.
template <class T, int D>
void DeviceMigration<T, D>::read_counters(int counters, const char* call) {
  check(cudaMemcpyAsync(found_.get(), counters_.get(), counters * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                        context_.stream),
        call);
  check(cudaStreamSynchronize(context_.stream), call);
}

template <class T, int D>
std::size_t DeviceMigration<T, D>::first_stranger(const std::array<View<const T>, D>& positions, std::size_t n,
                                                  std::array<double, D>& position) {
  cuda::DeviceScope scope(context_.device);
  const cudaStream_t stream = context_.stream;
  if (n == 0) return 0;
  check(cudaMemsetAsync(counters_.get(), 0, sizeof(unsigned long long), stream), "set_points");
  Columns<T, D> columns;
  for (int d = 0; d < D; ++d) columns.c[d] = positions[d];
  stranger_kernel<T, D><<<blocks_for(n), kThreads, 0, stream>>>(columns, n, owners_, context_.rank, counters_.get());
  cuda::check_launch("pmkit::DistributedPlan::stranger_kernel");
  read_counters(1, "set_points");
  const unsigned long long mark = found_.get()[0];
  if (mark == 0) return n;
  const std::size_t first = n - static_cast<std::size_t>(mark);
  for (int d = 0; d < D; ++d) {
    T x;
    check(cudaMemcpy(&x, positions[d].data + first * positions[d].stride, sizeof(T), cudaMemcpyDeviceToHost),
          "set_points");
    position[d] = static_cast<double>(x);
  }
  return first;
}

// The caller's columns (positions, then properties) on the device, for the kernels that
// write them; uploaded only where they differ from the last call's.
template <class T, int D>
void DeviceMigration<T, D>::upload_columns(const std::array<View<T>, D>& positions, Span<View<T>> props) {
  std::vector<View<T>> columns(positions.begin(), positions.end());
  columns.insert(columns.end(), props.begin(), props.end());
  const bool same = columns.size() == uploaded_.size() &&
                    std::equal(columns.begin(), columns.end(), uploaded_.begin(), [](const View<T>& a, const View<T>& b) {
                      return a.data == b.data && a.size == b.size && a.stride == b.stride;
                    });
  if (same) return;
  columns_.reserve(columns.size(), "migration columns");
  check(cudaMemcpyAsync(columns_.get(), columns.data(), columns.size() * sizeof(View<T>), cudaMemcpyHostToDevice,
                        context_.stream),
        "migrate");
  uploaded_ = std::move(columns);  // (a copy from pageable memory has left it on return)
}

// One rank owns every particle: migrate is the periodic wraps, queued on the stream with
// no wait (a graph captures it): classify_kernel lists them and marks a bad position, then
// wrap_listed_kernel writes them unless it found one. A bad position is reported by
// raise_deferred (synchronize) or, left as it is, by the local plan's next binning.
template <class T, int D>
std::size_t DeviceMigration<T, D>::migrate_alone(const std::array<View<T>, D>& positions, Span<View<T>> props,
                                                 std::size_t count) {
  const cudaStream_t stream = context_.stream;
  check_migration_arrays<T, D>(positions, props, count);
  if (count == 0) return 0;
  wrapping_.reserve(count, "migration lists");
  check(cudaMemsetAsync(counters_.get(), 0, MigrationCounters::size(1) * sizeof(unsigned long long), stream),
        "migrate");
  Columns<T, D> read;
  for (int d = 0; d < D; ++d) read.c[d] = positions[d];
  classify_kernel<T, D><<<blocks_for(count), kThreads, 0, stream>>>(read, count, owners_, 0, 1, bits_for(count - 1),
                                                                    nullptr, wrapping_.get(), counters_.get());
  cuda::check_launch("pmkit::DistributedPlan::classify_kernel");
  queue_wraps(positions, count, count);
  unchecked_count_ = count;
  return count;
}

// The wraps that the last classify_kernel listed (at most `bound`, of `count` particles),
// queued: wrap_listed_kernel on as many blocks as the bound needs, kWrapBlocks at most.
template <class T, int D>
void DeviceMigration<T, D>::queue_wraps(const std::array<View<T>, D>& positions, std::size_t count,
                                        std::size_t bound) {
  WritableColumns<T, D> write;
  for (int d = 0; d < D; ++d) write.c[d] = positions[d];
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>(blocks_for(bound), kWrapBlocks));
  wrap_listed_kernel<T, D><<<blocks, kThreads, 0, context_.stream>>>(wrapping_.get(), counters_.get(), context_.size,
                                                                      count, owners_, write, bad_position_.get());
  cuda::check_launch("pmkit::DistributedPlan::wrap_listed_kernel");
}

// The bad position that migrate_alone's pass marked, if any, reported (a wait).
template <class T, int D>
void DeviceMigration<T, D>::raise_deferred() {
  if (unchecked_count_ == 0) return;
  cuda::DeviceScope scope(context_.device);
  const std::size_t count = unchecked_count_;
  unchecked_count_ = 0;
  read_counters(MigrationCounters::size(1), "synchronize");
  const unsigned long long bad = found_.get()[MigrationCounters::first_bad(1)];
  if (bad == 0) return;
  double x[D];
  check(cudaMemcpy(x, bad_position_.get(), D * sizeof(double), cudaMemcpyDeviceToHost), "synchronize");
  reject_bad(x, count - static_cast<std::size_t>(bad));
}

// Particle `first` at x, which the pass over the positions marked as bad: the host's
// check names it.
template <class T, int D>
void DeviceMigration<T, D>::reject_bad(const double (&x)[D], std::size_t first) {
  double u[D];
  T wrapped[D];
  migration_coordinates<T, D>(owners_, global_, x, first, u, wrapped);
  fail(ErrorCode::InvalidArgument, "migrate: positions of particle ", first, " rejected on the device");
}

// On several ranks: one pass classifies every particle on the device (reading only: it lists the leaving
// particles and the staying ones a wrap moves), one host wait reads the counts, and one
// all-reduce agrees on the errors, on the number of property arrays and on whether any
// rank has a particle to send. If
// none has, the wraps are queued and the call returns. Else, after the count exchange,
// the work is in the number of particles that move: the leavers sorted by destination
// and packed, the wraps, the leavers' slots below the kept count filled with the staying
// particles past it, the messages and the arrivals. The work is queued on the rank's
// stream (the host-staged transport waits for it before its messages).
template <class T, int D>
std::size_t DeviceMigration<T, D>::migrate(DeviceTransport& transport, const std::array<View<T>, D>& positions,
                                           Span<View<T>> props, std::size_t count, bool& changed) {
  cuda::DeviceScope scope(context_.device);
  const cudaStream_t stream = context_.stream;
  changed = false;
  if (context_.size == 1) return migrate_alone(positions, props, count);
  const int values = D + static_cast<int>(props.size());
  const int counters = MigrationCounters::size(context_.size);
  const int index_bits = bits_for(count > 0 ? count - 1 : 0);
  const int key_bits = index_bits + bits_for(static_cast<unsigned long long>(context_.size));
  const unsigned long long index_mask = (1ull << index_bits) - 1;
  std::size_t capacity = 0, leaving = 0;
  unsigned long long wraps = 0;
  std::vector<long long> send_counts(context_.size, 0);
  long long leaving_here = 0;
  const long long anyone_leaving = agree_on_count(
      context_.comm, "migrate", "property arrays", props.size(),
      [&] {
        capacity = check_migration_arrays<T, D>(positions, props, count);
        leavers_.reserve(std::max<std::size_t>(1, count), "migration lists");
        wrapping_.reserve(std::max<std::size_t>(1, count), "migration lists");
        check(cudaMemsetAsync(counters_.get(), 0, counters * sizeof(unsigned long long), stream), "migrate");
        Columns<T, D> c;
        for (int d = 0; d < D; ++d) c.c[d] = positions[d];
        if (count > 0) {
          classify_kernel<T, D><<<blocks_for(count), kThreads, 0, stream>>>(c, count, owners_, context_.rank,
                                                                            context_.size, index_bits, leavers_.get(),
                                                                            wrapping_.get(), counters_.get());
          cuda::check_launch("pmkit::DistributedPlan::classify_kernel");
        }
        read_counters(counters, "migrate");
        const unsigned long long* found = found_.get();
        const unsigned long long bad = found[MigrationCounters::first_bad(context_.size)];
        if (bad > 0) {
          const std::size_t first = count - static_cast<std::size_t>(bad);
          double x[D];
          for (int d = 0; d < D; ++d) {
            T v;
            check(cudaMemcpy(&v, positions[d].data + first * positions[d].stride, sizeof(T), cudaMemcpyDeviceToHost),
                  "migrate");
            x[d] = static_cast<double>(v);
          }
          reject_bad(x, first);
        }
        for (int p = 0; p < context_.size; ++p) send_counts[p] = static_cast<long long>(found[p]);
        leaving = found[MigrationCounters::leaving(context_.size)];
        wraps = found[MigrationCounters::wrapping(context_.size)];
        leaving_here = static_cast<long long>(leaving);
        if (leaving > 0) upload_columns(positions, props);
        if (leaving == 0) return;
        for (DeviceBuffer<unsigned>* b : {&by_destination_, &listed_, &holes_, &tail_}) b->reserve(leaving, "migration lists");
        sorted_keys_.reserve(leaving, "migration lists");
        selected_.reserve(1, "migration lists");
        rows_.reserve(leaving * values, "migration rows");
        std::size_t sort_bytes = 0, index_bytes = 0, select_bytes = 0;
        check(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, leavers_.get(), sorted_keys_.get(),
                                             static_cast<std::int64_t>(leaving), 0, key_bits, stream),
              "migrate: sort");
        check(cub::DeviceRadixSort::SortKeys(nullptr, index_bytes, listed_.get(), holes_.get(),
                                             static_cast<std::int64_t>(leaving), 0, index_bits, stream),
              "migrate: sort");
        check(cub::DeviceSelect::If(nullptr, select_bytes, thrust::counting_iterator<unsigned>(0), tail_.get(),
                                    selected_.get(), static_cast<std::int64_t>(leaving), Stays{holes_.get(), 0},
                                    stream),
              "migrate: select");
        cub_scratch_.reserve(std::max<std::size_t>({1, sort_bytes, index_bytes, select_bytes}), "migration scratch");
      },
      leaving_here);
  if (anyone_leaving == 0) {
    if (wraps > 0) queue_wraps(positions, count, wraps);
    return count;
  }
  const Moves m =
      agree_on_moves(context_.comm, send_counts, count, capacity, sizeof(T) * values, [&](const Moves& moves) {
        arrivals_.reserve(std::max<std::size_t>(1, (moves.total - moves.kept) * values), "migration arrivals");
        if (moves.total > moves.kept) upload_columns(positions, props);
      });
  const std::size_t arriving = m.total - m.kept;
  changed = leaving > 0 || arriving > 0;
  if (leaving > 0) {
    // The leavers by destination, each destination's in their order, packed; and in
    // their order, the slots to fill.
    std::size_t bytes = cub_scratch_.size();
    check(cub::DeviceRadixSort::SortKeys(cub_scratch_.get(), bytes, leavers_.get(), sorted_keys_.get(),
                                         static_cast<std::int64_t>(leaving), 0, key_bits, stream),
          "migrate: sort");
    leaver_indices_kernel<<<blocks_for(leaving), kThreads, 0, stream>>>(
        sorted_keys_.get(), leavers_.get(), leaving, index_mask, by_destination_.get(), listed_.get());
    cuda::check_launch("pmkit::DistributedPlan::leaver_indices_kernel");
    bytes = cub_scratch_.size();
    check(cub::DeviceRadixSort::SortKeys(cub_scratch_.get(), bytes, listed_.get(), holes_.get(),
                                         static_cast<std::int64_t>(leaving), 0, index_bits, stream),
          "migrate: sort");
    pack_kernel<T, D><<<blocks_for(leaving), kThreads, 0, stream>>>(by_destination_.get(), leaving, owners_,
                                                                    columns_.get(), values, rows_.get());
    cuda::check_launch("pmkit::DistributedPlan::pack_kernel");
  }
  if (wraps > 0) queue_wraps(positions, count, wraps);
  if (leaving > 0) {
    // The staying particles in [kept, count) fill the leavers' slots below kept: as many
    // of each (the leavers, ascending, start with those below kept).
    std::size_t bytes = cub_scratch_.size();
    check(cub::DeviceSelect::If(cub_scratch_.get(), bytes, thrust::counting_iterator<unsigned>(m.kept), tail_.get(),
                                selected_.get(), static_cast<std::int64_t>(leaving),
                                Stays{holes_.get(), static_cast<std::int64_t>(leaving)}, stream),
          "migrate: select");
    fill_kernel<T><<<blocks_for(leaving), kThreads, 0, stream>>>(holes_.get(), tail_.get(), selected_.get(), leaving,
                                                                 columns_.get(), values);
    cuda::check_launch("pmkit::DistributedPlan::fill_kernel");
  }
  const std::size_t row_bytes = sizeof(T) * values;
  std::vector<std::int64_t> send_bytes(context_.size + 1), recv_bytes(context_.size + 1);
  for (int p = 0; p <= context_.size; ++p) {
    send_bytes[p] = m.send_offsets[p] * static_cast<std::int64_t>(row_bytes);
    recv_bytes[p] = m.recv_offsets[p] * static_cast<std::int64_t>(row_bytes);
  }
  transport.exchange(reinterpret_cast<const unsigned char*>(rows_.get()), send_bytes,
                     reinterpret_cast<unsigned char*>(arrivals_.get()), recv_bytes);
  if (arriving > 0) {
    unpack_kernel<<<blocks_for(arriving), kThreads, 0, stream>>>(arrivals_.get(), arriving, columns_.get(), values,
                                                                 m.kept);
    cuda::check_launch("pmkit::DistributedPlan::unpack_kernel");
  }
  return m.total;
}

template class DeviceMigration<float, 2>;
template class DeviceMigration<float, 3>;
template class DeviceMigration<double, 2>;
template class DeviceMigration<double, 3>;

}  // namespace pmkit::distributed
