#pragma once
// The XLA FFI handlers of pmkit.jax (jax_ffi.cpp), compiled where the build finds the
// XLA FFI headers that jaxlib ships.
#include <nanobind/nanobind.h>

namespace pmkit::python {

// _pmkit.jax_handlers(): {operation: (CPU handler, CUDA handler)} as PyCapsules for
// jax.ffi.register_ffi_target; _pmkit.jax_clear_plans() frees the handlers' cached plans,
// _pmkit.jax_cached_plans() counts them.
void bind_jax(nanobind::module_& m);

}  // namespace pmkit::python
