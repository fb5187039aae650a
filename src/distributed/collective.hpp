#pragma once
// Errors of collective calls: every rank runs its part, then all agree whether any
// failed, so that a failure on one rank throws on all instead of leaving the others
// waiting in a message that never comes.
#include <array>
#include <cstdint>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

#include "pmkit/error.hpp"

namespace pmkit::distributed {

// Runs work() on this rank, then agrees with the other ranks of comm. If work threw
// pmkit::Error (or std::bad_alloc) on any rank, every rank throws: the lowest failing
// rank's error, itself there, and on the others an Error of the same code that names
// `call`, that rank and its message. Otherwise returns each of `values` (as work leaves
// them) at its largest over the ranks, agreed in the same all-reduce; on a communicator
// of one rank no message at all.
template <std::size_t K, class F>
std::array<long long, K> agree_on_max(MPI_Comm comm, const char* call, F&& work, std::array<long long, K>& values) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::exception_ptr error;
  int code = 0;
  std::string message;
  try {
    work();
  } catch (const Error& e) {
    error = std::current_exception();
    code = static_cast<int>(e.code());
    message = e.what();
  } catch (const std::bad_alloc&) {
    code = static_cast<int>(ErrorCode::OutOfMemory);
    message = "out of host memory";
  }
  // The lowest failing rank, then each value negated: one all-reduce of minima.
  std::array<long long, K + 1> agreed;
  agreed[0] = code != 0 ? rank : size;
  for (std::size_t k = 0; k < K; ++k) agreed[k + 1] = -values[k];
  if (size > 1) MPI_Allreduce(MPI_IN_PLACE, agreed.data(), static_cast<int>(K + 1), MPI_LONG_LONG, MPI_MIN, comm);
  if (agreed[0] == size) {
    std::array<long long, K> largest;
    for (std::size_t k = 0; k < K; ++k) largest[k] = -agreed[k + 1];
    return largest;
  }
  const int first = static_cast<int>(agreed[0]);
  const std::string prefix = "pmkit: ";
  if (size > 1) {
    int length = static_cast<int>(message.size());
    MPI_Bcast(&code, 1, MPI_INT, first, comm);
    MPI_Bcast(&length, 1, MPI_INT, first, comm);
    message.resize(length);
    MPI_Bcast(message.data(), length, MPI_CHAR, first, comm);
  }
  if (message.compare(0, prefix.size(), prefix) == 0) message.erase(0, prefix.size());
  if (rank == first && error) std::rethrow_exception(error);
  if (rank == first) detail::fail(ErrorCode::OutOfMemory, call, ": ", message);
  detail::fail(static_cast<ErrorCode>(code), call, " failed on rank ", first, ": ", message);
}

template <class F>
void agree(MPI_Comm comm, const char* call, F&& work) {
  std::array<long long, 1> none = {0};
  agree_on_max(comm, call, std::forward<F>(work), none);
}

// agree, in the same all-reduce with every rank's `count` (of `what`: arrays of a call
// that every rank passes alike): where work failed nowhere but the counts differ, every
// rank throws SizeMismatch naming the range. Returns the largest `value` (work may set it).
template <class F>
long long agree_on_count(MPI_Comm comm, const char* call, const char* what, std::size_t count, F&& work,
                         const long long& value = 0) {
  const long long n = static_cast<long long>(count);
  std::array<long long, 3> values = {0, n, -n};
  const std::array<long long, 3> largest = agree_on_max(
      comm, call,
      [&] {
        work();
        values[0] = value;
      },
      values);
  if (largest[1] != -largest[2])
    detail::fail(ErrorCode::SizeMismatch, call, ": the ranks pass different numbers of ", what, " (", -largest[2],
                 " to ", largest[1], "): every rank passes the same number");
  return largest[0];
}

// Offsets counted in items of `unit` bytes, as byte offsets.
inline std::vector<std::int64_t> byte_offsets(const std::vector<std::int64_t>& offsets, std::int64_t unit) {
  std::vector<std::int64_t> bytes(offsets.size());
  for (std::size_t p = 0; p < offsets.size(); ++p) bytes[p] = offsets[p] * unit;
  return bytes;
}

// Sends bytes [send_offsets[p], send_offsets[p + 1]) of `out` to each other rank p of comm
// and receives bytes [recv_offsets[p], recv_offsets[p + 1]) of `in` from it (offsets: one
// more than the ranks), one message a peer with something to move; this rank's own part
// is the caller's to copy. A message of 2^31 bytes or more is an Unsupported error, raised
// before any message is posted. post_bytes posts the messages into `requests` and returns
// (the caller waits for them, MPI_Waitall, before it touches `out` or reads `in`);
// exchange_bytes waits too.
inline void post_bytes(MPI_Comm comm, int tag, const unsigned char* out, const std::vector<std::int64_t>& send_offsets,
                       unsigned char* in, const std::vector<std::int64_t>& recv_offsets,
                       std::vector<MPI_Request>& requests) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  auto bytes = [](const std::vector<std::int64_t>& offsets, int p) { return offsets[p + 1] - offsets[p]; };
  for (int p = 0; p < size; ++p)
    for (const std::int64_t b : {bytes(send_offsets, p), bytes(recv_offsets, p)})
      if (p != rank && b > std::numeric_limits<int>::max())
        detail::fail(ErrorCode::Unsupported, "a message of ", b, " bytes between two ranks: at most 2^31 - 1");
  requests.clear();
  for (int p = 0; p < size; ++p)
    if (p != rank && bytes(recv_offsets, p) > 0) {
      requests.emplace_back();
      MPI_Irecv(in + recv_offsets[p], static_cast<int>(bytes(recv_offsets, p)), MPI_BYTE, p, tag, comm, &requests.back());
    }
  for (int p = 0; p < size; ++p)
    if (p != rank && bytes(send_offsets, p) > 0) {
      requests.emplace_back();
      MPI_Isend(out + send_offsets[p], static_cast<int>(bytes(send_offsets, p)), MPI_BYTE, p, tag, comm,
                &requests.back());
    }
}

inline void exchange_bytes(MPI_Comm comm, int tag, const unsigned char* out, const std::vector<std::int64_t>& send_offsets,
                           unsigned char* in, const std::vector<std::int64_t>& recv_offsets) {
  std::vector<MPI_Request> requests;
  post_bytes(comm, tag, out, send_offsets, in, recv_offsets, requests);
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
}

}  // namespace pmkit::distributed
