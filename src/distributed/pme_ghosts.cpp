// DistributedPmePlan's ghosts (pme_ghosts.hpp): the choice of the charges near other
// slabs, their exchange, and the pair plan's arrays in the rank's memory.
#include "distributed/pme_ghosts.hpp"

#include <algorithm>
#include <cmath>

#include "distributed/collective.hpp"

#if defined(PMKIT_WITH_CUDA)
#include "cuda/runtime.hpp"
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

// The rank's arrays of own charges and ghosts: x, y, z, then q, count values each, and the
// pair plan's outputs; in host memory, and on CUDA ranks copied to device memory.
template <class T>
struct PmeGhosts<T>::Memory {
  std::vector<T> host, outputs;
  bool device = false;
  int device_id = 0;
  StreamHandle stream = nullptr;
#if defined(PMKIT_WITH_CUDA)
  cuda::DeviceBuffer<T> device_arrays, device_outputs;
#endif

  // The values of a view of the rank's memory, on the host.
  void to_host(View<const T> view, T* out) const {
#if defined(PMKIT_WITH_CUDA)
    if (device) {
      const cuda::DeviceScope on_device(device_id);
      const cudaStream_t s = cuda::to_cuda_stream(stream);
      cuda::check(cudaMemcpyAsync(out, view.data, view.size * sizeof(T), cudaMemcpyDeviceToHost, s),
                  "DistributedPmePlan: the ghosts' charges to the host");
      cuda::check(cudaStreamSynchronize(s), "DistributedPmePlan: the ghosts' charges to the host");
      return;
    }
#endif
    std::copy(view.data, view.data + view.size, out);
  }
  const T* arrays() const {
#if defined(PMKIT_WITH_CUDA)
    if (device) return device_arrays.get();
#endif
    return host.data();
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
  for (int d = 0; d < 3; ++d) {
    own_[d].resize(positions[d].size);
    memory_->to_host(positions[d], own_[d].data());
  }
}

template <class T>
void PmeGhosts<T>::exchange(View<const T> charges) {
  const std::size_t n = own_[0].size();
  std::vector<T> q(n);
  memory_->to_host(charges, q.data());
  // Each charge near a face of this rank's slab goes to every other rank whose slab it is
  // within the cutoff of: x, y, z, q.
  std::vector<std::vector<T>> send(static_cast<std::size_t>(size_));
  const double lo = slabs_[2 * rank_], hi = slabs_[2 * rank_ + 1];
  for (std::size_t i = 0; i < n && size_ > 1; ++i) {
    const double z = own_[2][i];
    if (std::min(z - lo, hi - z) >= reach_) continue;
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && periodic_distance(z, slabs_[2 * r], slabs_[2 * r + 1], length_) < reach_)
        send[r].insert(send[r].end(), {own_[0][i], own_[1][i], own_[2][i], q[i]});
  }
  std::vector<long long> sent(size_), received(size_);
  for (int r = 0; r < size_; ++r) sent[r] = static_cast<long long>(send[r].size() / 4);
  MPI_Alltoall(sent.data(), 1, MPI_LONG_LONG, received.data(), 1, MPI_LONG_LONG, comm_);
  std::vector<std::int64_t> send_offsets(size_ + 1, 0), recv_offsets(size_ + 1, 0);
  for (int r = 0; r < size_; ++r) {
    send_offsets[r + 1] = send_offsets[r] + 4 * sent[r];
    recv_offsets[r + 1] = recv_offsets[r] + 4 * received[r];
  }
  std::vector<T> out(static_cast<std::size_t>(send_offsets[size_])), in(static_cast<std::size_t>(recv_offsets[size_]));
  for (int r = 0; r < size_; ++r) std::copy(send[r].begin(), send[r].end(), out.begin() + send_offsets[r]);
  exchange_bytes(comm_, 0, reinterpret_cast<const unsigned char*>(out.data()), byte_offsets(send_offsets, sizeof(T)),
                 reinterpret_cast<unsigned char*>(in.data()), byte_offsets(recv_offsets, sizeof(T)));

  ghosts_ = in.size() / 4;
  count_ = n + ghosts_;
  std::vector<T>& host = memory_->host;
  host.resize(4 * count_);
  for (int d = 0; d < 3; ++d) std::copy(own_[d].begin(), own_[d].end(), host.begin() + d * count_);
  std::copy(q.begin(), q.end(), host.begin() + 3 * count_);
  for (std::size_t g = 0; g < ghosts_; ++g)
    for (int k = 0; k < 4; ++k) host[k * count_ + n + g] = in[4 * g + k];
#if defined(PMKIT_WITH_CUDA)
  if (memory_->device) {
    const cuda::DeviceScope on_device(memory_->device_id);
    memory_->device_arrays.reserve(host.size(), "DistributedPmePlan: ghosts");
    // On the plan's stream, in order before the pair plan reads them; `host` stays until
    // the next exchange, whose first copy waits for the stream.
    cuda::check(cudaMemcpyAsync(memory_->device_arrays.get(), host.data(), host.size() * sizeof(T),
                                cudaMemcpyHostToDevice, cuda::to_cuda_stream(memory_->stream)),
                "DistributedPmePlan: the ghosts to the device");
  }
#endif
}

template <class T>
std::array<View<const T>, 3> PmeGhosts<T>::positions() const {
  const T* a = memory_->arrays();
  return {View<const T>(a, count_), View<const T>(a + count_, count_), View<const T>(a + 2 * count_, count_)};
}

template <class T>
View<const T> PmeGhosts<T>::charges() const {
  return View<const T>(memory_->arrays() + 3 * count_, count_);
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
