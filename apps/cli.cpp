// The set-up checks and the output file that the commands share (cli.hpp).
#include "cli.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "pmkit/version.hpp"
#if defined(PMKIT_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace pmkit::cli {

namespace {

// Bytes as "12.3 GiB".
std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// The host memory a new allocation can have: MemAvailable of /proc/meminfo (Linux), or
// the physical memory where that is missing.
double host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024.0;
    meminfo.ignore(64, '\n');
  }
  return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
}

}  // namespace

void check_backend(Backend backend) {
  if (backend != Backend::Cuda) return;
  if (!built_with_cuda())
    throw UsageError("--backend cuda: this build of pmkit has no CUDA backend (configure with PMKIT_CUDA=ON)");
#if defined(PMKIT_WITH_CUDA)
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    throw UsageError("--backend cuda: no CUDA device is available");
  }
#endif
}

void check_memory(double bytes, Backend backend) {
  double available = host_available_bytes();
  const char* where = "host memory";
#if defined(PMKIT_WITH_CUDA)
  if (backend == Backend::Cuda) {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      available = double(free_bytes);
      where = "free memory of the CUDA device";
    }
    cudaGetLastError();
  }
#else
  (void)backend;
#endif
  if (bytes > available)
    throw UsageError("these options cannot run: their arrays need about " + gib(bytes) + ", more than the " +
                     gib(available) + " of " + where);
}

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  // An existing destination must be writable: the rename would replace even a file that
  // the user may not write.
  if (::access(path_.c_str(), F_OK) == 0 && ::access(path_.c_str(), W_OK) != 0)
    throw std::runtime_error("cannot open '" + path_ + "' for writing: " + std::strerror(errno));
  temporary_ = path_ + ".partial-" + std::to_string(::getpid());
  errno = 0;
  out_.open(temporary_, std::ios::binary | std::ios::trunc);
  if (!out_) {
    const std::string why = errno != 0 ? std::strerror(errno) : "unknown reason";
    throw std::runtime_error("cannot open '" + path_ + "' for writing: " + why);
  }
}

OutputFile::~OutputFile() {
  if (committed_) return;
  out_.close();
  std::error_code ec;
  std::filesystem::remove(temporary_, ec);
}

void OutputFile::commit() {
  out_.close();
  if (!out_) throw std::runtime_error("error while writing '" + path_ + "'");
  std::error_code ec;
  std::filesystem::rename(temporary_, path_, ec);
  if (ec) throw std::runtime_error("cannot write '" + path_ + "': " + ec.message());
  committed_ = true;
}

}  // namespace pmkit::cli
