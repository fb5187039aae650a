#pragma once
// The ghost lists of one rank's local meshes and their exchange in host memory (the CPU
// ranks'; a CUDA rank copies the lists to the device: cuda/halo.cuh).
//
// Built once from the decomposition: every ghost node of the local mesh (a stored node
// outside the rank's own block and inside the global mesh) is listed with the rank that
// owns the node it stands for and that node's index in the owner's local mesh. The
// owners learn their lists from the senders at construction (one all-to-all), so both
// sides walk the same entries in the same order.
//
// sum: each ghost node's values are added to its owner's node, the peers' lists in rank
// order (this rank's own wrapped or folded ghosts among them), so the additions run in
// the same order on every run. fill: the reverse, every ghost node takes its owner's
// value. Each in two halves, so that work runs while the messages travel: start gathers
// what it sends and posts the messages; finish waits for them and adds (sum) or writes
// (fill) what arrived. In between the caller may add to any node but a ghost node (sum),
// or read any node but a ghost node (fill).
#include <cstdint>
#include <cstring>
#include <vector>

#include <mpi.h>

#include "distributed/collective.hpp"
#include "distributed/decomposition.hpp"
#include "pmkit/error.hpp"

namespace pmkit::distributed {

// Entries below which a gather or scatter loop stays on one thread: starting a parallel
// region costs microseconds, about what this many copies take (docs/tuning.md#kparallelentries).
constexpr std::int64_t kParallelEntries = 65536;

class Halo {
 public:
  // Lists of local indices, grouped by peer rank: offsets[p] .. offsets[p + 1].
  struct Lists {
    std::vector<std::int64_t> index;
    std::vector<std::int64_t> offsets;
    std::int64_t count(int p) const { return offsets[p + 1] - offsets[p]; }
  };

  template <int D>
  Halo(const Decomposition<D>& decomposition, int rank, MPI_Comm comm);

  // meshes: `count` local meshes of `local_size` values each, one after another.
  template <class V>
  void start(const V* meshes, int count, std::int64_t local_size, bool sum);
  template <class V>
  void finish(V* meshes, int count, std::int64_t local_size, bool sum);
  template <class V>
  void sum(V* meshes, int count, std::int64_t local_size) {
    start(meshes, count, local_size, true);
    finish(meshes, count, local_size, true);
  }
  template <class V>
  void fill(V* meshes, int count, std::int64_t local_size) {
    start(meshes, count, local_size, false);
    finish(meshes, count, local_size, false);
  }

  std::size_t ghost_nodes() const { return send_.index.size(); }
  // This rank's ghost nodes by owner, and the nodes it owns of the peers' ghost nodes by
  // sender: the lists a device rank copies (cuda/halo.cuh).
  const Lists& ghosts() const { return send_; }
  const Lists& owned() const { return recv_; }

 private:
  MPI_Comm comm_;
  int rank_;
  Lists send_;  // this rank's ghost nodes, by owner
  Lists recv_;  // the owners' nodes of the peers' ghost nodes, by sender
  std::vector<unsigned char> send_buffer_, recv_buffer_;
  std::vector<MPI_Request> requests_;  // the messages a start posted
};

// start: sum sends the ghost nodes (send_ lists) to their owners, fill the owned nodes
// (recv_ lists) to the ranks that hold them as ghosts. Per peer p its block of count x
// from.count(p) values, mesh by mesh; this rank's own part is copied at once.
template <class V>
void Halo::start(const V* meshes, int count, std::int64_t local_size, bool sum) {
  const Lists& from = sum ? send_ : recv_;
  const Lists& to = sum ? recv_ : send_;
  const int peers = static_cast<int>(from.offsets.size()) - 1;
  send_buffer_.resize(from.index.size() * count * sizeof(V));
  recv_buffer_.resize(to.index.size() * count * sizeof(V));
  V* out = reinterpret_cast<V*>(send_buffer_.data());
  for (int p = 0; p < peers; ++p) {
    const std::int64_t n = from.count(p), base = from.offsets[p] * count;
    for (int k = 0; k < count; ++k) {
      const V* mesh = meshes + k * local_size;
      V* dst = out + base + k * n;
      const std::int64_t* idx = from.index.data() + from.offsets[p];
#pragma omp parallel for schedule(static) if (n > kParallelEntries)
      for (std::int64_t e = 0; e < n; ++e) dst[e] = mesh[idx[e]];
    }
  }
  const std::int64_t unit = count * static_cast<std::int64_t>(sizeof(V));
  const std::vector<std::int64_t> send_bytes = byte_offsets(from.offsets, unit), recv_bytes = byte_offsets(to.offsets, unit);
  post_bytes(comm_, 0, send_buffer_.data(), send_bytes, recv_buffer_.data(), recv_bytes, requests_);
  if (from.count(rank_) > 0)
    std::memcpy(recv_buffer_.data() + recv_bytes[rank_], send_buffer_.data() + send_bytes[rank_],
                static_cast<std::size_t>(send_bytes[rank_ + 1] - send_bytes[rank_]));
}

template <class V>
void Halo::finish(V* meshes, int count, std::int64_t local_size, bool sum) {
  MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  requests_.clear();
  const Lists& to = sum ? recv_ : send_;
  const V* in = reinterpret_cast<const V*>(recv_buffer_.data());
  const int peers = static_cast<int>(to.offsets.size()) - 1;
  // Mesh k's arrivals from peer p: f(mesh, the nodes' indices, the values, their count).
  auto arrivals = [&](int k, int p, auto&& f) {
    const std::int64_t n = to.count(p);
    f(meshes + k * local_size, to.index.data() + to.offsets[p], in + to.offsets[p] * count + k * n, n);
  };
  if (sum) {
    // Serial per mesh: two ghost nodes of one sender may stand for the same node (a
    // folded edge, a periodic axis shorter than the ghost layers).
#pragma omp parallel for schedule(static, 1) if (count > 1)
    for (int k = 0; k < count; ++k)
      for (int p = 0; p < peers; ++p)
        arrivals(k, p, [](V* mesh, const std::int64_t* idx, const V* src, std::int64_t n) {
          for (std::int64_t e = 0; e < n; ++e) mesh[idx[e]] += src[e];
        });
    return;
  }
  for (int k = 0; k < count; ++k)
    for (int p = 0; p < peers; ++p)
      arrivals(k, p, [](V* mesh, const std::int64_t* idx, const V* src, std::int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelEntries)
        for (std::int64_t e = 0; e < n; ++e) mesh[idx[e]] = src[e];
      });
}

}  // namespace pmkit::distributed
