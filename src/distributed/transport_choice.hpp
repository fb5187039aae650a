#pragma once
// Which transport a CUDA rank's messages take (pmkit::Transport), decided alike on every
// rank from every rank's GPU before any NCCL set-up: NCCL refuses two ranks of one
// communicator on one GPU ("invalid usage"), so ranks that share a GPU take the
// host-staged transport. Host code only (no CUDA): the tests run the rule on CPU ranks.
#include <map>
#include <string>
#include <vector>

#include <mpi.h>

#include "pmkit/distributed.hpp"
#include "pmkit/error.hpp"

namespace pmkit::distributed {

// The transport for `requested`, given whether this build has NCCL and each rank's GPU
// (gpus[r]: rank r's host name and its GPU's PCI bus id; equal for two ranks on one GPU,
// as NCCL tells GPUs apart). Auto: NCCL where the build has it and no two ranks share a
// GPU, else HostMpi. Nccl without NCCL, or with two ranks on one GPU, fails naming the
// option; HostMpi is taken as asked.
inline Transport choose_transport(Transport requested, bool have_nccl, const std::vector<std::string>& gpus) {
  int first = -1, second = -1;  // the first two ranks on one GPU
  std::map<std::string, int> seen;
  for (int r = 0; r < static_cast<int>(gpus.size()) && first < 0; ++r) {
    const auto [it, added] = seen.emplace(gpus[r], r);
    if (!added) first = it->second, second = r;
  }
  const bool shared = first >= 0;
  switch (requested) {
    case Transport::Auto:
      return have_nccl && !shared ? Transport::Nccl : Transport::HostMpi;
    case Transport::HostMpi:
      return Transport::HostMpi;
    case Transport::Nccl:
      if (!have_nccl)
        detail::fail(ErrorCode::Unsupported,
                     "transport = Transport::Nccl: this build of pmkit found no NCCL; pass Transport::Auto or "
                     "Transport::HostMpi (host-staged MPI)");
      if (shared)
        detail::fail(ErrorCode::Unsupported, "transport = Transport::Nccl: ranks ", first, " and ", second,
                     " share one GPU (", gpus[second], "), which NCCL refuses; pass Transport::Auto, which takes ",
                     "Transport::HostMpi (host-staged MPI) for ranks that share a GPU, or Transport::HostMpi, or ",
                     "give each rank a GPU of its own (options.device)");
      return Transport::Nccl;
  }
  detail::fail(ErrorCode::InvalidArgument, "transport = ", static_cast<int>(requested),
               ": Transport::Auto, Transport::Nccl or Transport::HostMpi");
}

// Every rank's `mine`, in rank order (collective).
inline std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine) {
  int size;
  MPI_Comm_size(comm, &size);
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size), offsets(size + 1, 0);
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm);
  for (int p = 0; p < size; ++p) offsets[p + 1] = offsets[p] + lengths[p];
  std::string all(static_cast<std::size_t>(offsets[size]), '\0');
  MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm);
  std::vector<std::string> out;
  for (int p = 0; p < size; ++p) out.push_back(all.substr(offsets[p], lengths[p]));
  return out;
}

// This rank's GPU as choose_transport names it: the host's name and the PCI bus id.
inline std::string gpu_name(const std::string& pci_bus_id) {
  char host[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(host, &length);
  return "GPU " + pci_bus_id + " of host " + std::string(host, length);
}

// choose_transport on every rank of comm from each rank's GPU (gpu_name; empty on a rank
// that could not read it: then every rank fails, before any NCCL set-up).
inline Transport agree_on_transport(MPI_Comm comm, Transport requested, bool have_nccl, const std::string& gpu) {
  const std::vector<std::string> gpus = gather_strings(comm, gpu);
  for (std::size_t r = 0; r < gpus.size(); ++r)
    if (gpus[r].empty())
      detail::fail(ErrorCode::Device, "DistributedPlan: rank ", r, " could not read its GPU's PCI bus id");
  return choose_transport(requested, have_nccl, gpus);
}

}  // namespace pmkit::distributed
