// DistributedPmePlan's ghosts (pme_ghosts.hpp): the charges near the rank's slab's faces
// (on CUDA ranks found on the device: cuda/pme_ghosts.cu), the choice of the ranks each
// goes to, their exchange, and the pair plan's arrays in the rank's memory.
#include "distributed/pme_ghosts.hpp"

#include <algorithm>
#include <cmath>

#include "distributed/collective.hpp"

#if defined(PMKIT_WITH_CUDA)
#include "pmkit/cuda/runtime.hpp"
#endif

namespace pmkit::distributed {

namespace {

// The distance from z to [lo, hi) in a periodic length (0 inside).
double periodic_distance(double z, double lo, double hi, double length) {
  if (z >= lo && z < hi) return 0;
  auto wrap = [length](double d) { return d - length * std::floor(d / length); };
  return std::min(wrap(lo - z), wrap(z - hi));
}

}  // namespace

// The rank's charges and the pair plan's arrays: own positions (x, y, z, own_count values
// each), then own charges and ghosts (x, y, z, then q, count values each) and the pair
// plan's outputs; in host memory on CPU ranks, in device memory on CUDA ranks (with the
// ghosts' values staged on the host).
template <class T>
struct PmeGhosts<T>::Memory {
  bool device = false;
  int device_id = 0;
  StreamHandle stream = nullptr;
  std::vector<T> own, arrays, outputs;
  std::vector<T> staged;  // CUDA ranks: the ghosts' values on their way to the device
#if defined(PMKIT_WITH_CUDA)
  cuda::DeviceBuffer<T> device_own, device_arrays, device_outputs, near_values;
  cuda::DeviceBuffer<unsigned long long> near_indices, near_count;

  cudaStream_t cuda_stream() const { return cuda::to_cuda_stream(stream); }
  void copy(T* to, const T* from, std::size_t count, cudaMemcpyKind kind) const {
    if (count > 0)
      cuda::check(cudaMemcpyAsync(to, from, count * sizeof(T), kind, cuda_stream()), "DistributedPmePlan: ghosts");
  }
#endif

  T* own_data() {
#if defined(PMKIT_WITH_CUDA)
    if (device) return device_own.get();
#endif
    return own.data();
  }
  const T* arrays_data() const {
#if defined(PMKIT_WITH_CUDA)
    if (device) return device_arrays.get();
#endif
    return arrays.data();
  }
};

template <class T>
PmeGhosts<T>::PmeGhosts(MPI_Comm comm, std::vector<double> slabs, double length, double cutoff,
                        const ExecutionOptions& options)
    : comm_(comm), slabs_(std::move(slabs)), length_(length), memory_(std::make_unique<Memory>()) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // A margin over the cutoff, for the pair plan's rounding in T: an extra ghost costs
  // nothing but its pairs beyond the cutoff.
  reach_ = cutoff * (1 + 1e-5);
  memory_->device = options.backend == Backend::Cuda;
  memory_->device_id = options.device;
  memory_->stream = options.stream;
}

template <class T>
PmeGhosts<T>::~PmeGhosts() = default;
template <class T>
PmeGhosts<T>::PmeGhosts(PmeGhosts&&) noexcept = default;
template <class T>
PmeGhosts<T>& PmeGhosts<T>::operator=(PmeGhosts&&) noexcept = default;

template <class T>
void PmeGhosts<T>::set_positions(const std::array<View<const T>, 3>& positions) {
  Memory& m = *memory_;
  own_count_ = positions[0].size;
#if defined(PMKIT_WITH_CUDA)
  if (m.device) {
    const cuda::DeviceScope on_device(m.device_id);
    m.device_own.reserve(3 * own_count_, "DistributedPmePlan: positions");
    for (int d = 0; d < 3; ++d)
      m.copy(m.device_own.get() + d * own_count_, positions[d].data, own_count_, cudaMemcpyDeviceToDevice);
    return;
  }
#endif
  m.own.resize(3 * own_count_);
  for (int d = 0; d < 3; ++d) std::copy(positions[d].data, positions[d].data + own_count_, m.own.begin() + d * own_count_);
}

template <class T>
void PmeGhosts<T>::exchange(View<const T> charges) {
  Memory& m = *memory_;
  const std::size_t n = own_count_;
  const T* own = m.own_data();
  const double lo = slabs_[2 * rank_], hi = slabs_[2 * rank_ + 1];
  // The charges near a face of this rank's slab (x, y, z, q each): only they can be
  // within the cutoff of another slab.
  std::vector<T> near;
  if (size_ > 1) {
#if defined(PMKIT_WITH_CUDA)
    if (m.device) {
      device_near_faces(GhostDeviceArrays<T>{own, own + n, own + 2 * n, charges.data, &m.near_values, &m.near_indices,
                                             &m.near_count, m.device_id, m.stream},
                        n, lo, hi, reach_, near);
    }
#endif
    if (!m.device)
      for (std::size_t i = 0; i < n; ++i) {
        const double z = own[2 * n + i];
        if (z - lo < reach_ || hi - z < reach_) near.insert(near.end(), {own[i], own[n + i], own[2 * n + i], charges[i]});
      }
  }
  // Each goes to every other rank whose slab it is within the cutoff of.
  std::vector<std::vector<T>> send(static_cast<std::size_t>(size_));
  for (std::size_t k = 0; k < near.size(); k += 4)
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && periodic_distance(near[k + 2], slabs_[2 * r], slabs_[2 * r + 1], length_) < reach_)
        send[r].insert(send[r].end(), near.begin() + k, near.begin() + k + 4);
  std::vector<long long> sent(size_), received(size_);
  for (int r = 0; r < size_; ++r) sent[r] = static_cast<long long>(send[r].size() / 4);
  if (size_ > 1) MPI_Alltoall(sent.data(), 1, MPI_LONG_LONG, received.data(), 1, MPI_LONG_LONG, comm_);
  std::vector<std::int64_t> send_offsets(size_ + 1, 0), recv_offsets(size_ + 1, 0);
  for (int r = 0; r < size_; ++r) {
    send_offsets[r + 1] = send_offsets[r] + 4 * sent[r];
    recv_offsets[r + 1] = recv_offsets[r] + 4 * received[r];
  }
  std::vector<T> out(static_cast<std::size_t>(send_offsets[size_])), in(static_cast<std::size_t>(recv_offsets[size_]));
  for (int r = 0; r < size_; ++r) std::copy(send[r].begin(), send[r].end(), out.begin() + send_offsets[r]);
  if (size_ > 1)
    exchange_bytes(comm_, 0, reinterpret_cast<const unsigned char*>(out.data()), byte_offsets(send_offsets, sizeof(T)),
                   reinterpret_cast<unsigned char*>(in.data()), byte_offsets(recv_offsets, sizeof(T)));

  // The pair plan's arrays: x, y, z, q of the own charges, then of the ghosts.
  ghosts_ = in.size() / 4;
  count_ = n + ghosts_;
  std::vector<T>& ghost_values = m.device ? m.staged : m.arrays;
  const std::size_t stride = m.device ? ghosts_ : count_, first = m.device ? 0 : n;
  ghost_values.resize(4 * stride);
  for (std::size_t g = 0; g < ghosts_; ++g)
    for (int c = 0; c < 4; ++c) ghost_values[c * stride + first + g] = in[4 * g + c];
#if defined(PMKIT_WITH_CUDA)
  if (m.device) {
    const cuda::DeviceScope on_device(m.device_id);
    m.device_arrays.reserve(4 * count_, "DistributedPmePlan: ghosts");
    T* to = m.device_arrays.get();
    // On the plan's stream, in order before the pair plan reads them; `staged` stays
    // until the next exchange, whose copies to the host wait for the stream.
    for (int c = 0; c < 4; ++c) {
      m.copy(to + c * count_, c < 3 ? own + c * n : charges.data, n, cudaMemcpyDeviceToDevice);
      m.copy(to + c * count_ + n, m.staged.data() + c * ghosts_, ghosts_, cudaMemcpyHostToDevice);
    }
    return;
  }
#endif
  for (int d = 0; d < 3; ++d) std::copy(own + d * n, own + (d + 1) * n, m.arrays.begin() + d * count_);
  std::copy(charges.data, charges.data + n, m.arrays.begin() + 3 * count_);
}

template <class T>
std::array<View<const T>, 3> PmeGhosts<T>::positions() const {
  const T* a = memory_->arrays_data();
  return {View<const T>(a, count_), View<const T>(a + count_, count_), View<const T>(a + 2 * count_, count_)};
}

template <class T>
View<const T> PmeGhosts<T>::charges() const {
  return View<const T>(memory_->arrays_data() + 3 * count_, count_);
}

template <class T>
T* PmeGhosts<T>::outputs(int components) {
  const std::size_t size = static_cast<std::size_t>(components) * count_;
#if defined(PMKIT_WITH_CUDA)
  if (memory_->device) {
    const cuda::DeviceScope on_device(memory_->device_id);
    memory_->device_outputs.reserve(size, "DistributedPmePlan: real-space outputs");
    return memory_->device_outputs.get();
  }
#endif
  if (memory_->outputs.size() < size) memory_->outputs.resize(size);
  return memory_->outputs.data();
}

template class PmeGhosts<float>;
template class PmeGhosts<double>;

}  // namespace pmkit::distributed
