#pragma once
#define PMKIT_VERSION_MAJOR 0
#define PMKIT_VERSION_MINOR 1
#define PMKIT_VERSION_PATCH 0
namespace pmkit {
// True when this build of the library contains the CUDA backend.
bool built_with_cuda() noexcept;
}  // namespace pmkit
