#pragma once
// Particle migration: every particle goes to the rank that owns its position, with its
// properties, in one all-to-all (a particle may cross any number of blocks). The counts
// are agreed and checked against every rank's capacity before any array changes.
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include <mpi.h>

#include "core/arguments.hpp"
#include "core/checks.hpp"
#include "pmkit/detail/layout.hpp"
#include "distributed/collective.hpp"
#include "distributed/owners.hpp"
#include "pmkit/view.hpp"

namespace pmkit::distributed {

// Particle i at x, checked for migrate by owners.hpp's rule (locate): its grid coordinates
// u and its position as migrate places it. A particle that is not finite, too far from a
// periodic axis' origin to wrap or outside a bounded axis fails with the mesh plan's
// error for it.
template <class T, int D>
void migration_coordinates(const Owners<D>& owners, const detail::Layout<D>& layout, const double (&x)[D],
                           std::size_t i, double (&u)[D], T (&placed)[D]) {
  if (!locate<T, D>(owners, x, true, u, placed)) detail::reject_particle<D>(layout, x, i);
}

// The arrays of a migrate call: D positions and any number of properties of one capacity
// (their size), count <= capacity in use. Returns the capacity.
template <class T, int D>
std::size_t check_migration_arrays(const std::array<View<T>, D>& positions, Span<View<T>> props, std::size_t count) {
  using detail::fail;
  const std::size_t capacity = positions[0].size;
  auto check = [&](const char* what, std::size_t i, const View<T>& v) {
    if (v.size != capacity)
      fail(ErrorCode::SizeMismatch, "migrate: ", what, "[", i, "].size = ", v.size, " but positions[0].size = ",
           capacity, ": every array holds the same number of slots");
    if (capacity > 0 && v.data == nullptr) fail(ErrorCode::InvalidArgument, "migrate: ", what, "[", i, "].data is null");
    if (v.stride <= 0 && capacity > 1)
      fail(ErrorCode::InvalidArgument, "migrate: ", what, "[", i, "].stride = ", v.stride, ": strides must be positive");
  };
  for (int d = 0; d < D; ++d) check("positions", d, positions[d]);
  for (std::size_t j = 0; j < props.size(); ++j) check("props", j, props[j]);
  if (count > capacity) fail(ErrorCode::SizeMismatch, "migrate: count = ", count, " but the arrays hold ", capacity, " slots");
  detail::check_point_count(capacity);
  return capacity;
}

// Who sends how many particles to whom, agreed by all ranks: offsets per peer (this rank's
// own count is 0 there: its staying particles do not travel), the particles kept and the
// new count.
struct Moves {
  std::vector<long long> send_offsets, recv_offsets;  // size + 1 each, in particles
  std::size_t kept = 0, total = 0;
};

// From each rank's counts of leaving particles by destination: exchanges the counts and
// checks every rank's new count against its capacity (every rank throws if one
// overflows, before anything moved). `prepare` (optional) makes room for the moves
// inside the same agreement.
inline Moves agree_on_moves(MPI_Comm comm, const std::vector<long long>& send_counts, std::size_t count,
                            std::size_t capacity, std::size_t particle_bytes,
                            const std::function<void(const Moves&)>& prepare = {}) {
  using detail::fail;
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<long long> recv_counts(size, 0);
  MPI_Alltoall(send_counts.data(), 1, MPI_LONG_LONG, recv_counts.data(), 1, MPI_LONG_LONG, comm);
  Moves m;
  m.send_offsets.assign(size + 1, 0);
  m.recv_offsets.assign(size + 1, 0);
  for (int p = 0; p < size; ++p) {
    m.send_offsets[p + 1] = m.send_offsets[p] + (p == rank ? 0 : send_counts[p]);
    m.recv_offsets[p + 1] = m.recv_offsets[p] + (p == rank ? 0 : recv_counts[p]);
  }
  const long long leaving = m.send_offsets[size], arriving = m.recv_offsets[size];
  m.kept = count - static_cast<std::size_t>(leaving);
  m.total = m.kept + static_cast<std::size_t>(arriving);
  agree(comm, "migrate", [&] {
    if (m.total > capacity)
      fail(ErrorCode::OutOfMemory, "migrate: rank ", rank, " would hold ", m.total, " particles (", m.kept, " kept, ",
           arriving, " arriving) but its arrays hold ", capacity,
           ": no particle was moved; migrate again with larger arrays");
    const long long bytes = static_cast<long long>(particle_bytes);
    if (leaving * bytes > INT32_MAX || arriving * bytes > INT32_MAX)
      fail(ErrorCode::Unsupported, "migrate: rank ", rank, " would move more than 2^31 bytes of particles at once");
    if (prepare) prepare(m);
  });
  return m;
}

// The staying particles past the kept count fill, in their order, the slots that the
// leaving ones (ascending, `leaving` of them) left below it: fill(hole, from) for each
// pair, in order. Walks the leavers and as many slots past `kept`: work in their number.
template <class Fill>
void fill_holes(const std::vector<std::size_t>& leaving, std::size_t kept, Fill&& fill) {
  std::size_t from = kept, next_leaver = 0;
  while (next_leaver < leaving.size() && leaving[next_leaver] < kept) ++next_leaver;
  for (std::size_t k = 0; k < leaving.size() && leaving[k] < kept; ++k) {
    // The next slot past `kept` that holds no leaver (the leavers there are ascending too).
    while (next_leaver < leaving.size() && leaving[next_leaver] == from) ++from, ++next_leaver;
    fill(leaving[k], from++);
  }
}

// migrate on host arrays. One pass finds the leaving particles (with their destinations)
// and the staying ones that a periodic wrap moves, and checks every position; one
// all-reduce agrees on the errors, on the number of property arrays (every rank the
// same) and on whether any rank has a particle to send. If
// none has, the wraps are written and the call ends: no other message, no copy. Else the
// counts are exchanged and checked, the leavers packed by destination, the wraps
// written, the leavers' slots below the kept count filled with the staying particles
// past it (in order), and the rows exchanged: the work beyond the one pass is in the
// number of particles that move. `changed`: whether a particle left or arrived here.
template <class T, int D>
std::size_t migrate(MPI_Comm comm, const std::array<View<T>, D>& positions, Span<View<T>> props, std::size_t count,
                    const Owners<D>& owners, const detail::Layout<D>& layout, bool& changed) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int values = D + static_cast<int>(props.size());  // values per particle
  std::size_t capacity = 0;
  std::vector<std::size_t> leaving, wrapping;  // ascending
  std::vector<int> destination;                // of each leaving particle
  std::vector<long long> send_counts(size, 0);
  long long leaving_count = 0;
  // Particle i's coordinates as migrate places them (checked in the first pass).
  auto place = [&](std::size_t i, double (&u)[D], T (&wrapped)[D]) {
    double x[D];
    for (int d = 0; d < D; ++d) x[d] = static_cast<double>(positions[d][i]);
    migration_coordinates<T, D>(owners, layout, x, i, u, wrapped);
  };
  const long long anyone_leaving = agree_on_count(
      comm, "migrate", "property arrays", props.size(),
      [&] {
        capacity = check_migration_arrays<T, D>(positions, props, count);
        for (std::size_t i = 0; i < count; ++i) {
          double u[D];
          T wrapped[D];
          place(i, u, wrapped);
          const int to = owners.rank_of(u);
          if (to != rank) {
            leaving.push_back(i);
            destination.push_back(to);
            ++send_counts[to];
            continue;
          }
          bool moves = false;
          for (int d = 0; d < D; ++d) moves = moves || wrapped[d] != positions[d][i];
          if (moves) wrapping.push_back(i);
        }
        leaving_count = static_cast<long long>(leaving.size());
      },
      leaving_count);
  auto write_wraps = [&] {
    for (const std::size_t i : wrapping) {
      double u[D];
      T wrapped[D];
      place(i, u, wrapped);
      for (int d = 0; d < D; ++d) positions[d][i] = wrapped[d];
    }
  };
  changed = false;
  if (anyone_leaving == 0) {
    write_wraps();
    return count;
  }
  const Moves m = agree_on_moves(comm, send_counts, count, capacity, sizeof(T) * values);
  changed = m.total != m.kept || !leaving.empty();
  std::vector<T> outgoing(static_cast<std::size_t>(m.send_offsets[size]) * values);
  std::vector<T> incoming(static_cast<std::size_t>(m.recv_offsets[size]) * values);
  std::vector<long long> next(m.send_offsets.begin(), m.send_offsets.end() - 1);
  auto value = [&](int v, std::size_t i) -> T& { return v < D ? positions[v][i] : props[v - D][i]; };
  for (std::size_t k = 0; k < leaving.size(); ++k) {
    const std::size_t i = leaving[k];
    double u[D];
    T wrapped[D];
    place(i, u, wrapped);
    T* slot = outgoing.data() + static_cast<std::size_t>(next[destination[k]]++) * values;
    for (int d = 0; d < D; ++d) slot[d] = wrapped[d];
    for (int v = D; v < values; ++v) slot[v] = value(v, i);
  }
  write_wraps();
  fill_holes(leaving, m.kept, [&](std::size_t hole, std::size_t from) {
    for (int v = 0; v < values; ++v) value(v, hole) = value(v, from);
  });
  std::size_t write = m.kept;
  std::vector<int> sc(size), sd(size), rc(size), rd(size);
  const long long bytes = static_cast<long long>(sizeof(T)) * values;
  for (int p = 0; p < size; ++p) {
    sc[p] = static_cast<int>((m.send_offsets[p + 1] - m.send_offsets[p]) * bytes);
    sd[p] = static_cast<int>(m.send_offsets[p] * bytes);
    rc[p] = static_cast<int>((m.recv_offsets[p + 1] - m.recv_offsets[p]) * bytes);
    rd[p] = static_cast<int>(m.recv_offsets[p] * bytes);
  }
  MPI_Alltoallv(outgoing.data(), sc.data(), sd.data(), MPI_BYTE, incoming.data(), rc.data(), rd.data(), MPI_BYTE, comm);
  for (long long k = 0; k < m.recv_offsets[size]; ++k, ++write) {
    const T* slot = incoming.data() + static_cast<std::size_t>(k) * values;
    for (int v = 0; v < values; ++v) value(v, write) = slot[v];
  }
  return m.total;
}

}  // namespace pmkit::distributed
