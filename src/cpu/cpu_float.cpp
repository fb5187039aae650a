#include "cpu/cpu_backend.hpp"
PMKIT_INSTANTIATE_CPU_BACKEND(float)
