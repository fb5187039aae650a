// The ghost lists of halo.hpp, built once: each stored node mapped to the node and rank
// it stands for, axis by axis, the ghost nodes grouped by owner, and each owner told its
// lists in one all-to-all.
#include "distributed/halo.hpp"

#include <array>

namespace pmkit::distributed {

namespace {

// Per local index along one axis: the owner's rank coordinate and its local index of the
// node the stored node stands for, whether it takes part in the exchange (`valid`) and
// whether the node is this rank's own.
//
// The first and the last stored node of an axis take no part: no stencil of the rank's
// particles reaches them. A particle's coordinate in the local grid lies in [1, cells + 1]
// (the block's cells start one margin cell in), or a rounding outside; a kernel of
// support S starts its stencil at node floor(u + S % 2 / 2) - (S - 1) / 2 and ends S - 1
// further, so the stencils span the stored nodes 1 to n - 2 of the n = cells + 3 + 2g
// (g = S / 2) for every S: a plane less to send on either side of every axis. A whole
// axis (decomposition.hpp) stores its own nodes only, each taking part and each its own.
struct AxisMap {
  std::vector<int> owner;
  std::vector<std::int64_t> owner_index;
  std::vector<char> valid, own;
};

AxisMap map_axis(const AxisSplit& a, int c) {
  const std::int64_t n = a.local_nodes(c), begin = a.local_begin(c);
  AxisMap m;
  m.owner.resize(n);
  m.owner_index.resize(n);
  m.valid.resize(n);
  m.own.resize(n);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t node;
    m.valid[i] = (a.whole || (i > 0 && i < n - 1)) && a.canonical(begin + i, node);
    if (!m.valid[i]) continue;
    m.owner[i] = a.owner_of_node(node);
    m.owner_index[i] = node - a.local_begin(m.owner[i]);
    m.own[i] = m.owner[i] == c && m.owner_index[i] == i;
  }
  return m;
}

}  // namespace

template <int D>
Halo::Halo(const Decomposition<D>& decomposition, int rank, MPI_Comm comm) : comm_(comm), rank_(rank) {
  int size;
  MPI_Comm_size(comm, &size);
  const std::array<int, D> coords = decomposition.coords_of(rank);
  std::array<AxisMap, D> maps;
  std::array<std::int64_t, D> nodes{};
  for (int d = 0; d < D; ++d) {
    maps[d] = map_axis(decomposition.axis(d), coords[d]);
    nodes[d] = static_cast<std::int64_t>(maps[d].own.size());
  }
  // Every ghost node in storage order: (owner rank, local index, owner's local index).
  std::vector<int> owner_rank;
  std::vector<std::int64_t> local, remote;
  std::array<std::int64_t, D> i{};
  const std::int64_t rows = D == 2 ? nodes[1] : nodes[1] * nodes[2];
  for (std::int64_t row = 0; row < rows; ++row) {
    i[1] = row % nodes[1];
    if (D == 3) i[D - 1] = row / nodes[1];
    bool valid = true, own = true;
    for (int d = 1; d < D; ++d) {
      valid = valid && maps[d].valid[i[d]];
      own = own && maps[d].own[i[d]];
    }
    if (!valid) continue;
    for (i[0] = 0; i[0] < nodes[0]; ++i[0]) {
      if (!maps[0].valid[i[0]] || (own && maps[0].own[i[0]])) continue;
      std::array<int, D> owner{};
      std::int64_t index = 0, target = 0, stride = 1, target_stride = 1;
      for (int d = 0; d < D; ++d) {
        owner[d] = maps[d].owner[i[d]];
        index += i[d] * stride;
        target += maps[d].owner_index[i[d]] * target_stride;
        stride *= nodes[d];
        target_stride *= decomposition.axis(d).local_nodes(owner[d]);
      }
      owner_rank.push_back(decomposition.rank_of(owner));
      local.push_back(index);
      remote.push_back(target);
    }
  }
  // Group by owner, keeping storage order within each owner.
  send_.offsets.assign(size + 1, 0);
  for (int r : owner_rank) ++send_.offsets[r + 1];
  for (int p = 0; p < size; ++p) send_.offsets[p + 1] += send_.offsets[p];
  send_.index.resize(local.size());
  std::vector<std::int64_t> remote_sorted(local.size());
  std::vector<std::int64_t> next(send_.offsets.begin(), send_.offsets.end() - 1);
  for (std::size_t e = 0; e < local.size(); ++e) {
    const std::int64_t slot = next[owner_rank[e]]++;
    send_.index[slot] = local[e];
    remote_sorted[slot] = remote[e];
  }
  // The owners learn their indices from the senders.
  std::vector<int> send_counts(size), recv_counts(size), send_displs(size), recv_displs(size);
  for (int p = 0; p < size; ++p) {
    send_counts[p] = static_cast<int>(send_.offsets[p + 1] - send_.offsets[p]);
    send_displs[p] = static_cast<int>(send_.offsets[p]);
  }
  MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, comm);
  recv_.offsets.assign(size + 1, 0);
  for (int p = 0; p < size; ++p) {
    recv_.offsets[p + 1] = recv_.offsets[p] + recv_counts[p];
    recv_displs[p] = static_cast<int>(recv_.offsets[p]);
  }
  recv_.index.resize(recv_.offsets[size]);
  MPI_Alltoallv(remote_sorted.data(), send_counts.data(), send_displs.data(), MPI_INT64_T, recv_.index.data(),
                recv_counts.data(), recv_displs.data(), MPI_INT64_T, comm);
}

template Halo::Halo(const Decomposition<2>&, int, MPI_Comm);
template Halo::Halo(const Decomposition<3>&, int, MPI_Comm);

}  // namespace pmkit::distributed
