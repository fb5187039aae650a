#pragma once
// Errors of collective calls: every rank runs its part, then all agree whether any
// failed, so that a failure on one rank throws on all instead of leaving the others
// waiting in a message that never comes.
#include <exception>
#include <new>
#include <string>

#include <mpi.h>

#include "pmkit/error.hpp"

namespace pmkit::distributed {

// Runs work() on this rank, then agrees with the other ranks of comm. If work threw
// pmkit::Error (or std::bad_alloc) on any rank, every rank throws: the lowest failing
// rank's error, itself there, and on the others an Error of the same code that names
// `call`, that rank and its message.
template <class F>
void agree(MPI_Comm comm, const char* call, F&& work) {
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
  int first = code != 0 ? rank : size;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return;
  int length = static_cast<int>(message.size());
  MPI_Bcast(&code, 1, MPI_INT, first, comm);
  MPI_Bcast(&length, 1, MPI_INT, first, comm);
  message.resize(length);
  MPI_Bcast(message.data(), length, MPI_CHAR, first, comm);
  const std::string prefix = "pmkit: ";
  if (message.compare(0, prefix.size(), prefix) == 0) message.erase(0, prefix.size());
  if (rank == first && error) std::rethrow_exception(error);
  if (rank == first) detail::fail(ErrorCode::OutOfMemory, call, ": ", message);
  detail::fail(static_cast<ErrorCode>(code), call, " failed on rank ", first, ": ", message);
}

}  // namespace pmkit::distributed
