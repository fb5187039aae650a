#pragma once
// Installed with the public headers (the particle step's fused pass compiles it in the
// caller's file): pmkit/detail/wrap.hpp.
#include "pmkit/detail/wrap.hpp"
