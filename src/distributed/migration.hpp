#pragma once
// Particle migration: every particle goes to the rank that owns its position, with its
// properties, in one all-to-all (a particle may cross any number of blocks). The counts
// are agreed and checked against every rank's capacity before any array changes.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <mpi.h>

#include "core/arguments.hpp"
#include "core/layout.hpp"
#include "core/wrap.hpp"
#include "distributed/collective.hpp"
#include "pmkit/view.hpp"

namespace pmkit::distributed {

// The grid coordinate of x on axis a, wrapped into [0, cells) on a periodic axis; false
// for a non-finite x or one outside a bounded axis.
inline bool wrapped_coordinate(const detail::Axis& a, double x, double& u) {
  u = a.exact_inverse != 0.0 ? (x - a.origin) * a.exact_inverse : (x - a.origin) / a.spacing;
  return detail::wrap_coordinate(u, a.cells, a.kind == detail::AxisKind::Periodic);
}

// x moved by whole periods into the periodic axis' domain: a value of T whose grid
// coordinate lies in [0, cells]. Returns it and sets u to its coordinate.
template <class T>
T wrap_position(const detail::Axis& a, double x, double& u) {
  const double length = a.cells * a.spacing;
  u = a.exact_inverse != 0.0 ? (x - a.origin) * a.exact_inverse : (x - a.origin) / a.spacing;
  if (u >= 0 && u <= a.cells) return static_cast<T>(x);
  T wrapped = static_cast<T>(x - std::floor(u / a.cells) * length);
  // The subtraction's rounding may leave it a step outside: step back in.
  for (int step = 0; step < 64; ++step) {
    u = a.exact_inverse != 0.0 ? (wrapped - a.origin) * a.exact_inverse : (wrapped - a.origin) / a.spacing;
    if (u < 0) wrapped = std::nextafter(wrapped, std::numeric_limits<T>::infinity());
    else if (u > a.cells) wrapped = std::nextafter(wrapped, -std::numeric_limits<T>::infinity());
    else break;
  }
  return wrapped;
}

template <class T, int D, class Owner>
std::size_t migrate(MPI_Comm comm, const std::array<View<T>, D>& positions, Span<View<T>> props, std::size_t count,
                    Owner&& owner_of, const detail::Layout<D>& layout) {
  using detail::fail;
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::size_t capacity = positions[0].size;
  const int values = D + static_cast<int>(props.size());  // values per particle
  std::vector<int> destination;
  std::array<std::vector<T>, D> moved;  // periodic axes: the wrapped positions
  std::vector<long long> send_counts(size, 0), recv_counts(size, 0);
  agree(comm, "migrate", [&] {
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
    if (count > capacity)
      fail(ErrorCode::SizeMismatch, "migrate: count = ", count, " but the arrays hold ", capacity, " slots");
    detail::check_point_count(capacity);
    destination.resize(count);
    for (int d = 0; d < D; ++d)
      if (layout.axis[d].kind == detail::AxisKind::Periodic) moved[d].resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      double u[D];
      for (int d = 0; d < D; ++d) {
        const detail::Axis& a = layout.axis[d];
        const double x = static_cast<double>(positions[d][i]);
        if (!std::isfinite(x))
          fail(ErrorCode::NonFinitePosition, "migrate: positions[", d, "][", i, "] = ", x,
               ": particle positions must be finite");
        if (a.kind == detail::AxisKind::Periodic) {
          moved[d][i] = wrap_position<T>(a, x, u[d]);
        } else if (!wrapped_coordinate(a, x, u[d])) {
          fail(ErrorCode::OutOfBounds, "migrate: positions[", d, "][", i, "] = ", x, " lies outside the bounded grid [",
               a.origin, ", ", a.origin + a.cells * a.spacing, "] of dimension ", d);
        }
      }
      destination[i] = owner_of(u);
      if (destination[i] != rank) ++send_counts[destination[i]];
    }
  });
  MPI_Alltoall(send_counts.data(), 1, MPI_LONG_LONG, recv_counts.data(), 1, MPI_LONG_LONG, comm);
  long long leaving = 0, arriving = 0;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    leaving += send_counts[p];
    arriving += recv_counts[p];
  }
  const std::size_t kept = count - static_cast<std::size_t>(leaving);
  const std::size_t total = kept + static_cast<std::size_t>(arriving);
  agree(comm, "migrate", [&] {
    if (total > capacity)
      fail(ErrorCode::OutOfMemory, "migrate: rank ", rank, " would hold ", total, " particles (", kept, " kept, ",
           arriving, " arriving) but its arrays hold ", capacity, ": no particle was moved; migrate again with larger "
           "arrays");
    const long long bytes = static_cast<long long>(sizeof(T)) * values;
    if (leaving * bytes > INT32_MAX || arriving * bytes > INT32_MAX)
      fail(ErrorCode::Unsupported, "migrate: rank ", rank, " would move more than 2^31 bytes of particles at once");
  });
  // Commit: wrap, pack the leavers by destination, compact the stayers, exchange.
  std::vector<long long> send_offsets(size + 1, 0), recv_offsets(size + 1, 0);
  for (int p = 0; p < size; ++p) {
    send_offsets[p + 1] = send_offsets[p] + (p == rank ? 0 : send_counts[p]);
    recv_offsets[p + 1] = recv_offsets[p] + (p == rank ? 0 : recv_counts[p]);
  }
  std::vector<T> outgoing(static_cast<std::size_t>(send_offsets[size]) * values);
  std::vector<T> incoming(static_cast<std::size_t>(recv_offsets[size]) * values);
  std::vector<long long> next(send_offsets.begin(), send_offsets.end() - 1);
  std::size_t write = 0;
  for (std::size_t i = 0; i < count; ++i) {
    auto value = [&](int v) -> T& { return v < D ? positions[v][i] : props[v - D][i]; };
    for (int d = 0; d < D; ++d)
      if (!moved[d].empty()) positions[d][i] = moved[d][i];
    if (destination[i] == rank) {
      if (write != i)
        for (int v = 0; v < values; ++v) (v < D ? positions[v][write] : props[v - D][write]) = value(v);
      ++write;
    } else {
      T* slot = outgoing.data() + static_cast<std::size_t>(next[destination[i]]++) * values;
      for (int v = 0; v < values; ++v) slot[v] = value(v);
    }
  }
  std::vector<int> sc(size), sd(size), rc(size), rd(size);
  const long long bytes = static_cast<long long>(sizeof(T)) * values;
  for (int p = 0; p < size; ++p) {
    sc[p] = static_cast<int>((send_offsets[p + 1] - send_offsets[p]) * bytes);
    sd[p] = static_cast<int>(send_offsets[p] * bytes);
    rc[p] = static_cast<int>((recv_offsets[p + 1] - recv_offsets[p]) * bytes);
    rd[p] = static_cast<int>(recv_offsets[p] * bytes);
  }
  MPI_Alltoallv(outgoing.data(), sc.data(), sd.data(), MPI_BYTE, incoming.data(), rc.data(), rd.data(), MPI_BYTE, comm);
  for (long long k = 0; k < recv_offsets[size]; ++k, ++write) {
    const T* slot = incoming.data() + static_cast<std::size_t>(k) * values;
    for (int v = 0; v < values; ++v) (v < D ? positions[v][write] : props[v - D][write]) = slot[v];
  }
  return total;
}

}  // namespace pmkit::distributed
