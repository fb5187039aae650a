#pragma once
// Installed with the public headers (the particle step's fused pass compiles it in the
// caller's file): pmkit/detail/stencil.hpp.
#include "pmkit/detail/stencil.hpp"
