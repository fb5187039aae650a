// The CUDA rank's migration (migration.cuh): its kernels (classify, select, sort, pack,
// wrap, fill, unpack) on the owner rules and wraps of owners.hpp, which the CPU ranks
// share, and set_points' search for the first particle outside the block.
#include "distributed/cuda/migration.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <vector>

#include "distributed/collective.hpp"
#include "distributed/migration.hpp"

namespace pmkit::distributed {

using cuda::check;
using cuda::DeviceBuffer;
using detail::fail;

namespace {

template <class T, int D>
__global__ void stranger_kernel(Columns<T, D> positions, std::int64_t n, Owners<D> owners, int rank,
                                unsigned long long* first) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  if (is_stranger<T, D>(positions, i, owners, rank)) atomicMin(first, static_cast<unsigned long long>(i));
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
__global__ void classify_kernel(Columns<T, D> positions, std::int64_t n, Owners<D> owners, int rank,
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
__device__ void wrapped_position(const View<T>* columns, std::int64_t i, const Owners<D>& owners,
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

// The listed staying particles' positions wrapped in place.
template <class T, int D>
__global__ void wrap_kernel(const unsigned* list, std::int64_t n, Owners<D> owners, const View<T>* columns) {
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

}  // namespace

template <class T, int D>
DeviceMigration<T, D>::DeviceMigration(const DeviceContext& context, const Owners<D>& owners,
                                       const detail::Layout<D>& global)
    : context_(context), owners_(owners), global_(global) {
  counters_.reserve(MigrationCounters::size(context_.size), "migration counts");
}

template <class T, int D>
std::size_t DeviceMigration<T, D>::first_stranger(const std::array<View<const T>, D>& positions, std::size_t n,
                                                  std::array<double, D>& position) {
  cuda::DeviceScope scope(context_.device);
  const cudaStream_t stream = context_.stream;
  if (n == 0) return 0;
  const unsigned long long none = n;
  check(cudaMemcpyAsync(counters_.get(), &none, sizeof(none), cudaMemcpyHostToDevice, stream), "set_points");
  Columns<T, D> columns;
  for (int d = 0; d < D; ++d) columns.c[d] = positions[d];
  stranger_kernel<T, D><<<blocks_for(n), kThreads, 0, stream>>>(columns, n, owners_, context_.rank, counters_.get());
  cuda::check_launch("pmkit::DistributedPlan::stranger_kernel");
  unsigned long long first = n;
  check(cudaMemcpyAsync(&first, counters_.get(), sizeof(first), cudaMemcpyDeviceToHost, stream), "set_points");
  check(cudaStreamSynchronize(stream), "set_points");
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
std::size_t DeviceMigration<T, D>::migrate(DeviceTransport& transport, const std::array<View<T>, D>& positions,
                                           Span<View<T>> props, std::size_t count) {
  cuda::DeviceScope scope(context_.device);
  const cudaStream_t stream = context_.stream;
  const int values = D + static_cast<int>(props.size());
  const int counters = MigrationCounters::size(context_.size);
  std::size_t capacity = 0, leaving = 0;
  unsigned long long wraps = 0;
  std::vector<long long> send_counts(context_.size, 0);
  agree(context_.comm, "migrate", [&] {
    capacity = check_migration_arrays<T, D>(positions, props, count);
    keys_.reserve(std::max<std::size_t>(1, count), "migration keys");
    wrapping_.reserve(std::max<std::size_t>(1, count), "migration keys");
    std::vector<View<T>> columns(positions.begin(), positions.end());
    columns.insert(columns.end(), props.begin(), props.end());
    columns_.reserve(columns.size(), "migration columns");
    check(cudaMemcpyAsync(columns_.get(), columns.data(), columns.size() * sizeof(View<T>), cudaMemcpyHostToDevice,
                          stream),
          "migrate");
    std::vector<unsigned long long> initial(counters, 0);
    initial[MigrationCounters::first_bad(context_.size)] = count;
    check(cudaMemcpyAsync(counters_.get(), initial.data(), counters * sizeof(unsigned long long),
                          cudaMemcpyHostToDevice, stream),
          "migrate");
    if (count > 0) {
      Columns<T, D> c;
      for (int d = 0; d < D; ++d) c.c[d] = positions[d];
      classify_kernel<T, D><<<blocks_for(count), kThreads, 0, stream>>>(
          c, count, owners_, context_.rank, context_.size, keys_.get(), wrapping_.get(), counters_.get());
      cuda::check_launch("pmkit::DistributedPlan::classify_kernel");
    }
    std::vector<unsigned long long> found(counters);
    check(cudaMemcpyAsync(found.data(), counters_.get(), counters * sizeof(unsigned long long),
                          cudaMemcpyDeviceToHost, stream),
          "migrate");
    check(cudaStreamSynchronize(stream), "migrate");
    const std::size_t bad = found[MigrationCounters::first_bad(context_.size)];
    if (bad < count) {  // the first bad particle: the host check names it
      double x[D], u[D];
      T wrapped[D];
      for (int d = 0; d < D; ++d) {
        T v;
        check(cudaMemcpy(&v, positions[d].data + bad * positions[d].stride, sizeof(T), cudaMemcpyDeviceToHost),
              "migrate");
        x[d] = static_cast<double>(v);
      }
      migration_coordinates<T, D>(owners_, global_, x, bad, u, wrapped);
      fail(ErrorCode::InvalidArgument, "migrate: positions of particle ", bad, " rejected on the device");
    }
    for (int p = 0; p < context_.size; ++p) {
      send_counts[p] = static_cast<long long>(found[p]);
      leaving += found[p];
    }
    wraps = found[MigrationCounters::wrapping(context_.size)];
    if (leaving == 0) return;
    for (DeviceBuffer<unsigned>* b : {&leavers_, &leaver_keys_, &sorted_keys_, &sorted_leavers_, &tail_})
      b->reserve(leaving, "migration lists");
    selected_.reserve(2, "migration lists");
    rows_.reserve(leaving * values, "migration rows");
    std::size_t select_bytes = 0, sort_bytes = 0;
    check(cub::DeviceSelect::If(nullptr, select_bytes, thrust::counting_iterator<unsigned>(0), leavers_.get(),
                                selected_.get(), static_cast<std::int64_t>(count), KeyIs{keys_.get(), true},
                                stream),
          "migrate: select");
    check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, leaver_keys_.get(), sorted_keys_.get(),
                                          leavers_.get(), sorted_leavers_.get(), static_cast<std::int64_t>(leaving),
                                          0, key_bits(context_.size), stream),
          "migrate: sort");
    cub_scratch_.reserve(std::max<std::size_t>({1, select_bytes, sort_bytes}), "migration scratch");
  });
  const Moves m =
      agree_on_moves(context_.comm, send_counts, count, capacity, sizeof(T) * values, [&](const Moves& moves) {
        arrivals_.reserve(std::max<std::size_t>(1, (moves.total - moves.kept) * values), "migration arrivals");
      });
  const std::size_t arriving = m.total - m.kept;
  if (leaving > 0) {
    // The leaving particles in their order, then stably by destination, packed.
    std::size_t bytes = cub_scratch_.size();
    check(cub::DeviceSelect::If(cub_scratch_.get(), bytes, thrust::counting_iterator<unsigned>(0), leavers_.get(),
                                selected_.get(), static_cast<std::int64_t>(count), KeyIs{keys_.get(), true},
                                stream),
          "migrate: select");
    gather_keys_kernel<<<blocks_for(leaving), kThreads, 0, stream>>>(leavers_.get(), leaving, keys_.get(),
                                                                    leaver_keys_.get());
    bytes = cub_scratch_.size();
    check(cub::DeviceRadixSort::SortPairs(cub_scratch_.get(), bytes, leaver_keys_.get(), sorted_keys_.get(),
                                          leavers_.get(), sorted_leavers_.get(), static_cast<std::int64_t>(leaving),
                                          0, key_bits(context_.size), stream),
          "migrate: sort");
    pack_kernel<T, D><<<blocks_for(leaving), kThreads, 0, stream>>>(sorted_leavers_.get(), leaving, owners_,
                                                                    columns_.get(), values, rows_.get());
    cuda::check_launch("pmkit::DistributedPlan::pack_kernel");
  }
  if (wraps > 0) {
    wrap_kernel<T, D><<<blocks_for(wraps), kThreads, 0, stream>>>(wrapping_.get(), wraps, owners_, columns_.get());
    cuda::check_launch("pmkit::DistributedPlan::wrap_kernel");
  }
  if (leaving > 0) {
    // The staying particles in [kept, count) fill the leavers' slots below kept: as many
    // of each (the leavers, ascending, start with those below kept).
    std::size_t bytes = cub_scratch_.size();
    check(cub::DeviceSelect::If(cub_scratch_.get(), bytes, thrust::counting_iterator<unsigned>(m.kept), tail_.get(),
                                selected_.get() + 1, static_cast<std::int64_t>(leaving), KeyIs{keys_.get(), false},
                                stream),
          "migrate: select");
    fill_kernel<T><<<blocks_for(leaving), kThreads, 0, stream>>>(leavers_.get(), tail_.get(), selected_.get() + 1,
                                                                 leaving, columns_.get(), values);
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
  check(cudaStreamSynchronize(stream), "migrate");
  return m.total;
}

template class DeviceMigration<float, 2>;
template class DeviceMigration<float, 3>;
template class DeviceMigration<double, 2>;
template class DeviceMigration<double, 3>;

}  // namespace pmkit::distributed
