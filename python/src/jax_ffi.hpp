#pragma once
// The XLA FFI handlers of pmkit.jax (jax_ffi.cpp), compiled where the build finds the
// XLA FFI headers that jaxlib ships.
#include <nanobind/nanobind.h>

#include <cstddef>

namespace pmkit::python {

// _pmkit.jax_handlers(): {operation: (CPU handler, CUDA handler)} as PyCapsules for
// jax.ffi.register_ffi_target; _pmkit.jax_clear_plans() frees the handlers' cached plans (mesh and PME),
// _pmkit.jax_cached_plans() counts them.
void bind_jax(nanobind::module_& m);

// PME's handlers (jax_pme.cpp): adds {"pme": ..., "pme_charge_gradient": ...} to
// `handlers`; the PME plans they keep, freed and counted.
void add_pme_handlers(nanobind::dict& handlers);
void clear_pme_plans();
std::size_t cached_pme_plans();

}  // namespace pmkit::python
