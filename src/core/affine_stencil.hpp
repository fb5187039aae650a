#pragma once
// Installed with the public headers (the particle step's fused pass compiles it in the
// caller's file): pmkit/detail/affine_stencil.hpp.
#include "pmkit/detail/affine_stencil.hpp"
