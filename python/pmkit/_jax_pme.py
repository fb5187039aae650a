"""Smooth particle-mesh Ewald for JAX (pmkit.jax.pme): pmkit::PmePlan as an XLA FFI custom
call, differentiable by ``jax.custom_vjp``, under ``jit``, ``grad`` and ``vmap``.

The custom call (python/src/jax_pme.cpp) takes positions (N, 3), charges (N,) and cells
(S, 3): S systems of static sizes, each its consecutive charges in its orthorhombic cell
(box lengths), and returns each system's energy, the potentials, the forces and, where
asked, each system's virial. Derivatives, exact at the plan's mesh:

- positions: dE/dx = -F;
- charges: dE/dq = phi, the potentials;
- cell: dE/dL_a = (-W_aa + sum_i x_ia F_ia) / L_a at fixed positions, W the virial
  (computed in the forward pass where the cell is differentiated);
- the potentials' own derivatives (a loss that uses them) by the polarisation identity
  g . phi(q) = (E(q + s g) - E(q - s g)) / (2 s): one more call of two evaluations on one
  binning;
- the forces' derivative in the charges (a loss on forces, a charge model trained on
  them) by PmePlan.charge_gradient_of_forces. Their derivatives in the positions and the
  cell (the Hessian) are not computed: asking for them raises NotImplementedError, as
  asking for the virial's derivative does.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence, Tuple

import numpy as np

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from ._pme import PmeParameters

__all__ = ["PmeOutput", "pme"]


class PmeOutput(NamedTuple):
    """What ``pme`` returns, in the positions' dtype. ``energy`` and ``potential`` are
    differentiable in positions, charges and cell; ``forces`` (-dE/dx) in the charges;
    ``virial`` carries no derivative."""

    energy: Any  # () for one system, (S,) with sizes: each system's energy
    potential: Any  # (N,): dE/dq_i, the electrostatic potential at each charge
    forces: Any  # (N, 3): -dE/dx_i
    virial: Any  # (6,) or (S, 6): W = -dE/d(strain), Voigt xx, yy, zz, yz, xz, xy; None unless asked


class _Settings(NamedTuple):
    """What the custom call is told (static, hashable): the parameters (alpha 0: chosen
    per cell from cutoff, tolerance and order), the options, the systems' sizes and
    whether the virial is computed."""

    alpha: float
    mesh: Tuple[int, int, int]
    order: int
    cutoff: float
    tolerance: float
    coulomb_constant: float
    reciprocal_only: bool
    threads: int
    deterministic: bool
    sizes: Tuple[int, ...]
    virial: bool

    def attributes(self) -> dict:
        return dict(
            alpha=np.float64(self.alpha),
            mesh=np.array(self.mesh, dtype=np.int64),
            order=np.int64(self.order),
            cutoff=np.float64(self.cutoff),
            tolerance=np.float64(self.tolerance),
            coulomb_constant=np.float64(self.coulomb_constant),
            reciprocal_only=np.int64(self.reciprocal_only),
            threads=np.int64(self.threads),
            deterministic=np.int64(self.deterministic),
            sizes=np.array(self.sizes, dtype=np.int64),
        )

    def system_of_charge(self, n: int):
        """Each charge's system, (N,) int32, computed when the program runs: built from the
        static sizes alone it would be an N-long constant, which XLA folds at compile time
        (seconds at 10^5 charges)."""
        sizes = jax.lax.optimization_barrier(jnp.asarray(self.sizes, jnp.int32))
        return jnp.repeat(jnp.arange(len(self.sizes), dtype=jnp.int32), sizes, total_repeat_length=n)


def _call(settings: _Settings, positions, charges, cells, virial: bool):
    """The custom call on canonical shapes (positions (..., N, 3), charges (..., M, N),
    cells (..., S, 3), any leading axes of extent 1 or the charges'): energies, potentials,
    forces and virials (zeros where not asked for)."""
    batch = charges.shape[:-1]
    n, s, dtype = charges.shape[-1], cells.shape[-2], charges.dtype
    shapes = [batch + (s,), batch + (n,), batch + (n, 3)] + ([batch + (s, 6)] if virial else [])
    results = [jax.ShapeDtypeStruct(shape, dtype) for shape in shapes]
    outputs = jax.ffi.ffi_call("pmkit_pme", results, vmap_method="expand_dims")(
        positions, charges, cells, **settings.attributes()
    )
    if not virial:
        outputs = list(outputs) + [jnp.zeros(batch + (s, 6), dtype)]
    return tuple(outputs)


def _charge_gradient(settings: _Settings, positions, charges, cells, weights):
    result = jax.ShapeDtypeStruct(charges.shape, charges.dtype)
    call = jax.ffi.ffi_call("pmkit_pme_charge_gradient", result, vmap_method="expand_dims")
    return call(positions, charges, cells, weights, **settings.attributes())


def _per_charge(settings: _Settings, values, n: int):
    """Each system's value (S, ...) at each of its charges (N, ...)."""
    if len(settings.sizes) == 1:
        return jnp.broadcast_to(values[0], (n,) + values.shape[1:])
    return jnp.take(values, settings.system_of_charge(n), axis=0)


def _cell_derivative(settings: _Settings, positions, cells, forces, virial):
    """dE/dL_a at fixed positions, (S, 3): (-W_aa + sum_i x_ia F_ia) / L_a."""
    if len(settings.sizes) == 1:
        moments = jnp.sum(positions * forces, axis=0, keepdims=True)
    else:
        n = positions.shape[0]
        moments = jax.ops.segment_sum(positions * forces, settings.system_of_charge(n), len(settings.sizes))
    return (-virial[:, :3] + moments) / cells


def _core(settings: _Settings, positions, charges, cells):
    return _call(settings, positions, charges, cells, settings.virial)


_core = jax.custom_vjp(_core, nondiff_argnums=(0,))


def _core_forward(settings, positions, charges, cells):
    x, q, c = positions.value, charges.value, cells.value
    # The cell's derivative needs the virial: computed where the cell is differentiated.
    outputs = _core(settings._replace(virial=settings.virial or cells.perturbed), x, q, c)
    marks = (() if positions.perturbed else None, () if cells.perturbed else None)
    return outputs, (x, q, c) + tuple(outputs[1:]) + marks


def _zero(t) -> bool:
    return t is None or isinstance(t, SymbolicZero)


def _core_backward(settings, residuals, cotangents):
    x, q, cells, potential, forces, virial, x_marked, cell_marked = residuals
    g_energy, g_potential, g_forces, g_virial = cotangents
    x_perturbed, cell_perturbed = x_marked is not None, cell_marked is not None
    n = q.shape[0]
    if not _zero(g_virial):
        raise NotImplementedError(
            "pmkit.jax.pme: the virial carries no derivative; stop its gradient (jax.lax.stop_gradient)"
        )
    grad_x = jnp.zeros_like(x)
    grad_q = jnp.zeros_like(q)
    grad_cell = jnp.zeros_like(cells)
    if not _zero(g_energy):
        per = _per_charge(settings, g_energy, n)
        grad_q = grad_q + per * potential
        grad_x = grad_x - per[:, None] * forces
        if cell_perturbed:
            grad_cell = grad_cell + g_energy[:, None] * _cell_derivative(settings, x, cells, forces, virial)
    if not _zero(g_potential):
        # g . phi(q) = (E(q + s g) - E(q - s g)) / (2 s), s making s g as large as q (for
        # the differences' rounding): both evaluations in one call, on one binning.
        largest = jnp.max(jnp.abs(g_potential))
        scale = jnp.where(largest > 0, jnp.maximum(jnp.max(jnp.abs(q)), 1e-30) / largest, 1.0).astype(q.dtype)
        pair = jnp.stack([q + scale * g_potential, q - scale * g_potential])
        _, phis, fs, ws = _call(settings, x[None], pair, cells[None], cell_perturbed)
        half = 0.5 / scale
        grad_q = grad_q + (phis[0] - phis[1]) * half
        grad_x = grad_x - (fs[0] - fs[1]) * half
        if cell_perturbed:
            grad_cell = grad_cell + _cell_derivative(settings, x, cells, (fs[0] - fs[1]) * half, (ws[0] - ws[1]) * half)
    if not _zero(g_forces):
        if x_perturbed or cell_perturbed:
            raise NotImplementedError(
                "pmkit.jax.pme: a loss on forces reaches the charges, not the positions or the cell: their second "
                "derivatives (the Hessian) are not computed; stop the gradient of the positions and cell "
                "(jax.lax.stop_gradient)"
            )
        grad_q = grad_q + _charge_gradient(settings, x, q, cells, g_forces)
    return (grad_x if x_perturbed else None, grad_q, grad_cell if cell_perturbed else None)


_core.defvjp(_core_forward, _core_backward, symbolic_zeros=True)


def _settings(
    parameters: Optional[PmeParameters], cutoff, tolerance, order, coulomb_constant, reciprocal_only, threads,
    deterministic, sizes, virial,
) -> _Settings:
    if parameters is not None:
        if not isinstance(parameters, PmeParameters):
            raise TypeError(f"parameters must be a pmkit.PmeParameters, not {type(parameters).__name__}")
        alpha, mesh, order, cutoff, tolerance = (
            float(parameters.alpha), tuple(int(m) for m in parameters.mesh), int(parameters.order),
            float(parameters.cutoff), 0.0,
        )
        if not alpha > 0:
            raise ValueError(f"parameters.alpha = {alpha}; it must be positive")
    else:
        if cutoff is None:
            raise TypeError("pmkit.jax.pme needs cutoff= (the parameters then follow from tolerance and order) "
                            "or parameters=")
        alpha, mesh = 0.0, (0, 0, 0)
        if not float(cutoff) > 0:
            raise ValueError(f"cutoff = {cutoff}; it must be positive")
        if not 0 < float(tolerance) < 0.5:
            raise ValueError(f"tolerance = {tolerance}; it must lie in (0, 0.5)")
    return _Settings(alpha, mesh, int(order), float(cutoff), float(tolerance), float(coulomb_constant),
                     bool(reciprocal_only), int(threads), bool(deterministic), sizes, bool(virial))


def _array(value, name: str, dtype):
    """A JAX array as it is (its dtype checked), anything else in the positions' dtype."""
    if isinstance(value, jax.Array):
        if value.dtype != dtype:
            raise TypeError(f"{name} has dtype {value.dtype}; it must be the positions' dtype, {dtype}")
        return value
    return jnp.asarray(value, dtype=dtype)


def pme(
    positions,
    charges,
    cell,
    *,
    sizes: Optional[Sequence[int]] = None,
    cutoff: Optional[float] = None,
    tolerance: float = 5e-4,
    order: int = 5,
    parameters: Optional[PmeParameters] = None,
    coulomb_constant: float = 1.0,
    reciprocal_only: bool = False,
    virial: bool = False,
    threads: int = 0,
    deterministic: bool = False,
) -> PmeOutput:
    """The Ewald energy, potentials and forces of point charges in periodic orthorhombic
    cells by smooth PME (pmkit::PmePlan), as an XLA custom call.

        out = pmkit.jax.pme(x, q, box, cutoff=1.0)          # x (N, 3), q (N,), box (3,)
        forces = -jax.grad(lambda x: pme(x, q, box, cutoff=1.0).energy)(x)

    ``cell`` is the box lengths, (3,) for one system. Several systems of different sizes
    in one call: concatenate their charges, give ``sizes`` (each system's charge count,
    static: a tuple of ints, ``np.bincount(batch)`` of a sorted batch vector) and ``cell``
    (S, 3); ``energy`` is then (S,). Positions may lie anywhere (the plan wraps them into
    the cell).

    The parameters: ``PmeParameters.choose(cell, cutoff, tolerance, order)`` per cell (as
    OpenMM), or ``parameters`` for every cell. Energies in Gaussian units (q_i q_j / r)
    times ``coulomb_constant``. ``reciprocal_only``: E_rec alone (no real-space pairs, self
    term or background). ``virial=True`` adds ``PmeOutput.virial``, (6,) or (S, 6) (it is
    computed anyway where the cell is differentiated).

    Differentiable (``custom_vjp``) in positions, charges and cell, under ``jit`` and
    ``vmap``: a batch of systems of one size is one custom call over per-entry positions,
    charges and cells (each entry its own plan, cached per cell). The plans are cached
    per cell, parameters, dtype, size and device (the last 128 of a dtype): a cell that changes every
    call builds a plan (its FFT plan) every call.
    """
    positions = jnp.asarray(positions) if not isinstance(positions, jax.Array) else positions
    if positions.dtype not in (jnp.float32, jnp.float64):
        raise TypeError(f"positions has dtype {positions.dtype}; pmkit.jax.pme takes float32 or float64")
    if positions.ndim != 2 or positions.shape[1] != 3:
        raise ValueError(f"positions has shape {positions.shape}; it must be (N, 3)")
    n = positions.shape[0]
    charges = _array(charges, "charges", positions.dtype)
    cell = _array(cell, "cell", positions.dtype)
    if charges.shape != (n,):
        raise ValueError(f"charges has shape {charges.shape}; it must be (N,) = ({n},), one per position")
    one = sizes is None
    if one:
        if cell.shape != (3,):
            raise ValueError(f"cell has shape {cell.shape}; it must be (3,), the box lengths (or (S, 3) with sizes)")
        sizes = (n,)
    else:
        try:
            sizes = tuple(int(s) for s in sizes)
        except (TypeError, jax.errors.ConcretizationTypeError) as e:
            raise TypeError("sizes must be a sequence of ints known when tracing (static), each system's charge "
                            "count") from e
        if any(s < 0 for s in sizes) or sum(sizes) != n:
            raise ValueError(f"sizes = {sizes}: each system's charge count, not negative, adding up to N = {n}")
        if cell.shape != (len(sizes), 3):
            raise ValueError(f"cell has shape {cell.shape}; it must be (S, 3) = ({len(sizes)}, 3), a row per system")
    settings = _settings(parameters, cutoff, tolerance, order, coulomb_constant, reciprocal_only, threads,
                         deterministic, sizes, virial)
    energy, potential, forces, virials = _core(settings, positions, charges, cell.reshape(len(sizes), 3))
    if one:
        energy, virials = energy[0], virials[0]
    return PmeOutput(energy, potential, forces, virials if virial else None)
