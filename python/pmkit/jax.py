"""pmkit for JAX: spread, interp, interp_gradient, spread_gradient and PME (``pme``,
pmkit::PmePlan) as XLA FFI custom calls, differentiable, under ``jit``, ``grad`` and
``vmap``.

    import jax, jax.numpy as jnp, pmkit, pmkit.jax as pj
    plan = pj.Plan(pmkit.Grid.periodic((32, 32, 32), h=1 / 32), "mp4")
    rho = pj.spread(plan, x, q)            # x: (N, 3) positions, q: (N,) or (F, N)
    energy = lambda x, q: 0.5 * jnp.vdot(q, pj.interp(plan, x, pj.spread(plan, x, q)))
    forces = -jax.jit(jax.grad(energy))(x, q)

A ``pmkit.jax.Plan`` describes the operations (grid, kernel, options) and holds no
arrays; it is hashable, so it is a static argument under ``jit``. A ``pmkit.Plan`` is
taken as well (its grid, kernel and deterministic option). The dtype (float32 or
float64) and the device (CPU, or a CUDA GPU with a CUDA build of pmkit) are those of the
arrays. XLA's buffers go to the C++ plan as they are, and on the GPU the calls run on
the stream XLA gives; the C++ plans are cached per grid, kernel, dtype, particle count
and device, so that a steady loop allocates nothing. Every call bins its positions.

Shapes, as ``pmkit.Plan``'s with N particles, D dimensions and F fields: positions (N,
D); particle values (N,) or (F, N); meshes ``plan.mesh_shape`` or (F, *mesh_shape);
vectors (N, D) or (F, N, D).

Derivatives (``jax.custom_vjp``, reverse mode):

- ``spread`` and ``interp`` with respect to the values and meshes through their adjoints
  (each other), and with respect to the positions through ``interp_gradient``;
- ``interp_gradient`` and ``spread_gradient`` with respect to meshes and vectors through
  their adjoints (each other). Their derivative with respect to the positions needs the
  kernels' second derivatives, which pmkit does not have: differentiating them with
  respect to the positions raises NotImplementedError rather than giving a wrong zero.

Under ``vmap`` the custom call takes the batch whole (``vmap_method="expand_dims"``):
one call bins each batch entry's positions once and runs the fields of every entry
that shares them in one plan call, so a batch of fields over one set of positions is
one binning and one pass over the particles.

On the GPU a position that the plan rejects (NaN, outside a bounded axis) is reported by
the next call of the same plan (grid, kernel, dtype, count, device), as the C++ plan
reports it; on the CPU by the call itself.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Tuple, Union

import numpy as np

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from . import _pmkit
from ._geometry import Grid
from ._plan import Plan as _MeshPlan

__all__ = [
    "Plan", "spread", "interp", "interp_gradient", "spread_gradient", "clear_plans", "cached_plans",
    "pme", "PmeOutput", "pme_reciprocal_energy", "ewald_self_energy",
]

_OPERATIONS = ("spread", "interp", "interp_gradient", "spread_gradient")


def _register() -> None:
    """Registers the handlers of the compiled module with XLA, for the CPU and CUDA."""
    if not hasattr(_pmkit, "jax_handlers"):
        raise ImportError(
            "pmkit.jax: this build of pmkit has no XLA FFI handlers (jax was not found when it was built); "
            "reinstall pmkit with jax installed (pip install 'pmkit[jax]')"
        )
    for name, (cpu, cuda) in _pmkit.jax_handlers().items():
        jax.ffi.register_ffi_target(f"pmkit_{name}", cpu, platform="cpu")
        if _pmkit.built_with_cuda():
            jax.ffi.register_ffi_target(f"pmkit_{name}", cuda, platform="CUDA")


_register()

from ._jax_pme import PmeOutput, pme  # noqa: E402  (needs the handlers registered)


class Plan:
    """The operations on one grid with one kernel: what the custom calls are told.

    ``grid`` is a pmkit.Grid, ``kernel`` a name ('mp4', 'tsc', 'bspline4', ...) or a
    pmkit.Kernel. ``deterministic`` asks the CUDA backend for a bit-for-bit identical
    spread across runs; ``threads`` is the CPU backend's OpenMP threads (0: OpenMP's
    default). Equal plans are equal keys: the C++ plans behind them are shared."""

    __slots__ = ("_key", "_mesh_shape", "_grid", "_kernel")

    def __init__(self, grid: Grid, kernel: Union[str, _pmkit.Kernel] = "mp4", *, deterministic: bool = False,
                 threads: int = 0) -> None:
        # A mesh plan checks the grid and kernel (pmkit.Error naming them) and gives the mesh shape.
        mesh = _MeshPlan(grid, kernel)
        self._grid = grid
        self._kernel = mesh.kernel
        self._mesh_shape: Tuple[int, ...] = mesh.mesh_shape
        self._key = (
            self._kernel.name, tuple(grid.cells), tuple(grid.spacing), tuple(grid.origin),
            tuple(b == "bounded" for b in grid.boundary), grid.ghosts == "keep", bool(deterministic), int(threads),
        )

    @classmethod
    def of(cls, plan: Any) -> "Plan":
        """A pmkit.jax.Plan as is; a pmkit.Plan's grid, kernel and deterministic option."""
        if isinstance(plan, Plan):
            return plan
        if isinstance(plan, _MeshPlan):
            # Kept on the mesh plan, whose grid, kernel and options do not change.
            if getattr(plan, "_jax_plan", None) is None:
                plan._jax_plan = cls(plan.grid, plan.kernel, deterministic=plan._impl.options.deterministic)
            return plan._jax_plan
        raise TypeError(f"plan must be a pmkit.jax.Plan or a pmkit.Plan, not {type(plan).__name__}")

    @property
    def grid(self) -> Grid:
        return self._grid

    @property
    def kernel(self) -> _pmkit.Kernel:
        return self._kernel

    @property
    def dim(self) -> int:
        return len(self._key[1])

    @property
    def mesh_shape(self) -> Tuple[int, ...]:
        """The shape of one mesh array: (nz, ny, nx) in 3D, (ny, nx) in 2D (C order, x last)."""
        return self._mesh_shape

    def _attributes(self) -> dict:
        kernel, cells, spacing, origin, bounded, keep, deterministic, threads = self._key
        return dict(
            kernel=kernel,
            cells=np.array(cells, dtype=np.int64),
            spacing=np.array(spacing, dtype=np.float64),
            origin=np.array(origin, dtype=np.float64),
            bounded=np.array(bounded, dtype=np.int64),
            keep_ghosts=np.int64(keep),
            deterministic=np.int64(deterministic),
            threads=np.int64(threads),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"pmkit.jax.Plan({self._grid!r}, {self._kernel!r})"


def clear_plans() -> None:
    """Frees the C++ plans that the custom calls keep (they are made again when needed)."""
    _pmkit.jax_clear_plans()


def cached_plans() -> int:
    """The number of C++ plans that the custom calls keep: one per grid, kernel, options,
    dtype, particle count and device in use."""
    return _pmkit.jax_cached_plans()


# --- The custom calls, on the canonical shapes: positions (N, D), values (F, N), meshes
# (F, *mesh_shape), vectors (F, N, D).


def _call(name: str, plan: Plan, positions, operand, shapes):
    """The custom call of one operation: its result, or its results where ``shapes`` is a
    list (interp_both)."""
    many = isinstance(shapes, list)
    results = [jax.ShapeDtypeStruct(shape, operand.dtype) for shape in (shapes if many else [shapes])]
    call = jax.ffi.ffi_call(f"pmkit_{name}", results, vmap_method="expand_dims")
    outputs = call(positions, operand, **plan._attributes())
    return tuple(outputs) if many else outputs[0]


def _mesh_result(plan: Plan, operand):
    return operand.shape[:1] + plan.mesh_shape


# Each operation as a custom_vjp function of (plan, positions, operand). Forward passes see
# whether the positions are differentiated (symbolic zeros): the residuals keep what the
# backward pass needs, and nothing for the positions where they are not.


def _operation(name: str, shape, backward):
    def call(plan, positions, operand):
        return _call(name, plan, positions, operand, shape(plan, positions, operand))

    call.__name__ = call.__qualname__ = f"pmkit_{name}"
    op = jax.custom_vjp(call, nondiff_argnums=(0,))

    def forward(plan, positions, operand):
        x, v = positions.value, operand.value
        if positions.perturbed and name in ("interp_gradient", "spread_gradient", "interp_both"):
            raise NotImplementedError(
                f"pmkit.jax.{name}: the derivative with respect to the positions needs the kernels' second "
                "derivatives, which pmkit does not compute; stop the positions' gradient (jax.lax.stop_gradient)"
            )
        return op(plan, x, v), (x, v if positions.perturbed else None)

    def backward_or_zero(plan, residuals, cotangent):
        parts = cotangent if isinstance(cotangent, tuple) else (cotangent,)
        if all(isinstance(part, SymbolicZero) for part in parts):
            return None, None
        return backward(plan, residuals, cotangent)

    op.defvjp(forward, backward_or_zero, symbolic_zeros=True)
    return op


# spread: d/dq = interp(g); d/dx_p = sum_f q[f, p] * interp_gradient(g)[f, p], both on
# one binning where the positions are differentiated.
def _spread_backward(plan, residuals, g):
    x, q = residuals
    if q is None:
        return None, _interp(plan, x, g)
    values, vectors = _interp_both(plan, x, g)
    return jnp.einsum("fn,fnd->nd", q, vectors), values


# interp_both (interp and interp_gradient): d/dm = spread(g_values) + spread_gradient(g_vectors).
def _interp_both_backward(plan, residuals, cotangents):
    x = residuals[0]
    parts = [op(plan, x, g) for op, g in zip((_spread, _spread_gradient), cotangents)
             if not isinstance(g, SymbolicZero)]
    return None, sum(parts[1:], parts[0])


# interp: d/dm = spread(g); d/dx_p = sum_f g[f, p] * interp_gradient(m)[f, p].
def _interp_backward(plan, residuals, g):
    x, m = residuals
    d_x = None if m is None else jnp.einsum("fn,fnd->nd", g, _interp_gradient(plan, x, m))
    return d_x, _spread(plan, x, g)


_spread = _operation("spread", lambda plan, x, q: _mesh_result(plan, q), _spread_backward)
_interp = _operation("interp", lambda plan, x, m: m.shape[:1] + x.shape[:1], _interp_backward)
_interp_gradient = _operation(
    "interp_gradient", lambda plan, x, m: m.shape[:1] + x.shape,
    lambda plan, residuals, g: (None, _spread_gradient(plan, residuals[0], g)),
)
_spread_gradient = _operation(
    "spread_gradient", lambda plan, x, v: _mesh_result(plan, v),
    lambda plan, residuals, g: (None, _interp_gradient(plan, residuals[0], g)),
)
_interp_both = _operation(
    "interp_both", lambda plan, x, m: [m.shape[:1] + x.shape[:1], m.shape[:1] + x.shape], _interp_both_backward
)


# --- The public functions: argument checks at trace time, the optional field axis.


def _checked(plan: Any, positions, name: str, operand, forms: Tuple[Tuple[int, ...], ...]):
    """The plan as a pmkit.jax.Plan, the arrays as JAX arrays, and whether the operand has
    a field axis. A wrong type, dtype or shape is a TypeError or ValueError naming the
    argument and what is accepted."""
    plan = Plan.of(plan)
    positions, operand = jnp.asarray(positions), jnp.asarray(operand)
    if positions.dtype not in (jnp.float32, jnp.float64):
        raise TypeError(f"positions has dtype {positions.dtype}; pmkit.jax takes float32 or float64")
    if positions.ndim != 2 or positions.shape[1] != plan.dim:
        raise ValueError(f"positions has shape {positions.shape}; it must be (N, {plan.dim})")
    if operand.dtype != positions.dtype:
        raise TypeError(f"{name} has dtype {operand.dtype}; it must be the positions' dtype, {positions.dtype}")
    n = positions.shape[0]
    single, fielded = (tuple(n if s == "N" else s for s in form) for form in forms)
    if operand.shape == single:
        return plan, positions, operand[None], False
    if operand.ndim == len(fielded) and operand.shape[1:] == fielded[1:]:
        return plan, positions, operand, True
    text = " or ".join(str(tuple(form)).replace("'", "") for form in forms)
    raise ValueError(f"{name} has shape {operand.shape}; it must be {text} (N = {n}, the positions' count)")


def _forms(plan: Any, kind: str) -> Tuple[Tuple, Tuple]:
    plan = Plan.of(plan)
    if kind == "values":
        return ("N",), ("F", "N")
    if kind == "vectors":
        return ("N", plan.dim), ("F", "N", plan.dim)
    return plan.mesh_shape, ("F",) + plan.mesh_shape


def _public(op, name: str, kind: str):
    def function(plan, positions, operand):
        plan, positions, operand, fields = _checked(plan, positions, name, operand, _forms(plan, kind))
        result = op(plan, positions, operand)
        return result if fields else result[0]

    return function


spread = _public(_spread, "values", "values")
spread.__doc__ = """P2M: (N,) or (F, N) values at the (N, D) positions onto ``plan.mesh_shape`` or
(F, *mesh_shape) meshes. Differentiable in the values and the positions."""
interp = _public(_interp, "meshes", "meshes")
interp.__doc__ = """M2P: meshes (``plan.mesh_shape`` or (F, *mesh_shape)) at the (N, D) positions:
(N,) or (F, N). Differentiable in the meshes and the positions."""
interp_gradient = _public(_interp_gradient, "meshes", "meshes")
interp_gradient.__doc__ = """The gradient of ``interp`` with respect to the positions: (N, D) or
(F, N, D). Differentiable in the meshes."""
spread_gradient = _public(_spread_gradient, "vectors", "vectors")
spread_gradient.__doc__ = """The adjoint of ``interp_gradient``: (N, D) or (F, N, D) vectors onto
``plan.mesh_shape`` or (F, *mesh_shape) meshes. Differentiable in the vectors."""
for _function, _name in zip((spread, interp, interp_gradient, spread_gradient), _OPERATIONS):
    _function.__name__ = _function.__qualname__ = _name


# --- PME's mesh part composed in JAX: the reciprocal Ewald energy from the custom calls and
# jnp.fft. ``pme`` (pmkit._jax_pme) is PmePlan whole as one custom call; this composition is
# a template for other influence functions and a check of pme(reciprocal_only=True).


@functools.lru_cache(maxsize=64)
def _pme_plan(box: Tuple[float, ...], mesh: Tuple[int, ...], order: int) -> Plan:
    grid = Grid(mesh, tuple(length / nodes for length, nodes in zip(box, mesh)), 0.0, "periodic")
    return Plan(grid, f"bspline{order}")


def _bspline_factor(nodes: int, order: int) -> np.ndarray:
    """c(m) = sum_j M(j) cos(2 pi m j / K) for m = 0 .. K-1: the centred B-spline's
    discrete transform, by which the spread charges' transform divides."""
    j = np.arange(-(order // 2), order // 2 + 1)
    x = j + order / 2.0
    # M(j) of the centred cardinal B-spline of the order, by its truncated-power sum.
    weights = sum((-1) ** k * math.comb(order, k) * np.where(x > k, (x - k) ** (order - 1), 0.0)
                  for k in range(order + 1)) / math.factorial(order - 1)
    m = np.arange(nodes)
    return (weights[None, :] * np.cos(2 * np.pi * np.outer(m, j) / nodes)).sum(axis=1)


@functools.lru_cache(maxsize=64)
def _influence(box: Tuple[float, ...], mesh: Tuple[int, ...], order: int, alpha: float) -> np.ndarray:
    """exp(-pi^2 mu^2 / alpha^2) / mu^2 / prod_d c_d(m_d)^2 over the real-to-complex half
    spectrum (z, y, x//2 + 1 in 3D), times 2 for the x frequencies whose conjugates it
    leaves out; 0 at m = 0."""
    axes = []
    for d, (length, nodes) in enumerate(zip(box, mesh)):
        count = nodes // 2 + 1 if d == 0 else nodes
        m = np.arange(count)
        m = np.where(m <= nodes // 2, m, m - nodes)
        axes.append((m / length, _bspline_factor(nodes, order)[np.arange(count)]))
    # The half spectrum's axes in C order: x last.
    mus = np.meshgrid(*[a[0] for a in reversed(axes)], indexing="ij")
    factors = np.meshgrid(*[a[1] for a in reversed(axes)], indexing="ij")
    mu2 = sum(mu**2 for mu in mus)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.exp(-np.pi**2 * mu2 / alpha**2) / mu2 / np.prod(factors, axis=0) ** 2
    g.flat[0] = 0.0
    nx = mesh[0]
    twice = np.full(nx // 2 + 1, 2.0)
    twice[0] = 1.0
    if nx % 2 == 0:
        twice[-1] = 1.0
    return g * twice


def pme_reciprocal_energy(positions, charges, box, *, alpha: float, mesh, order: int = 5,
                          coulomb_constant: float = 1.0):
    """Smooth PME's reciprocal energy of point charges in the periodic orthorhombic box
    ``box`` (D lengths, from the origin): 1/(2 pi V) sum_{m != 0} exp(-pi^2 mu^2 / alpha^2)
    / mu^2 |S(m)|^2 (mu = m / box), with S from the charges spread onto ``mesh`` nodes per
    axis by B-splines of ``order`` (pmkit.jax.spread), a real-to-complex FFT and the
    B-splines' factors, times ``coulomb_constant``. As pmkit::PmePlan's E_rec; the Ewald
    energy adds the real-space pairs (the caller's) and ``ewald_self_energy``.

    Differentiable in the positions (the forces, through interp_gradient) and the charges
    (through interp), under jit, grad and vmap (a batch of systems of one size in one
    box). The box, mesh, order and alpha are static: no derivative with respect to the
    cell. ``pmkit.jax.pme(..., reciprocal_only=True)`` is the same energy from
    pmkit::PmePlan in one custom call (one binning), with the cell's derivative."""
    box = tuple(float(b) for b in box)
    mesh = tuple(int(m) for m in mesh)
    if len(box) != 3 or len(mesh) != 3:
        raise ValueError(f"box and mesh have {len(box)} and {len(mesh)} values; PME takes 3 each (x, y, z)")
    plan = _pme_plan(box, mesh, int(order))
    rho = spread(plan, positions, charges)
    power = jnp.abs(jnp.fft.rfftn(rho)) ** 2
    g = jnp.asarray(_influence(box, mesh, int(order), float(alpha)), dtype=rho.dtype)
    volume = float(np.prod(box))
    return coulomb_constant / (2 * np.pi * volume) * jnp.sum(g * power)


def ewald_self_energy(charges, box, *, alpha: float, coulomb_constant: float = 1.0):
    """Ewald's self energy, -alpha / sqrt(pi) sum q^2, and a net charge's uniform
    background's, -pi Q^2 / (2 V alpha^2), times ``coulomb_constant`` (pmkit::PmePlan's
    E_self + E_background)."""
    volume = float(np.prod([float(b) for b in box]))
    total = jnp.sum(charges)
    return coulomb_constant * (-alpha / np.sqrt(np.pi) * jnp.sum(charges**2)
                               - np.pi * total**2 / (2 * volume * alpha**2))
