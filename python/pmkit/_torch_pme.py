"""Differentiable, batched smooth particle-mesh Ewald for PyTorch (pmkit.torch.pme).

One call takes many independent periodic systems: positions (N, 3) and charges (N,) of
all of them, their orthorhombic cells as box lengths (B, 3), and the index of each
charge's system, ``batch`` (N,), sorted (the charges of a system consecutive, as
torch_geometric's batch vectors are). Each system runs on a cached pmkit.PmePlan of its
cell and parameters, reading and writing the slices of the batch's tensors in place.

The operator is a ``torch.library`` custom operator (``torch.ops.pmkit.pme``) with a fake
(meta) kernel and a registered autograd formula, so ``torch.compile(fullgraph=True)``
takes it; eager calls run the same forward and backward as an autograd.Function
(_PmeFunction), without the operator's dispatch layers. Its derivatives are exact
derivatives of the PME energy at the plan's mesh:

- positions: dE/dx = -F, the forces the plan computes with the energy;
- charges: dE/dq = phi, the potentials;
- cell: dE/dL_a = (-W_aa + sum_i x_ia F_ia) / L_a at fixed positions, with W the virial;
- the potentials' own derivatives (where a loss uses them) by the polarisation identity
  g^T phi(q) = (E(q + s g) - E(q - s g)) / (2 s), two more PME evaluations.

Second derivatives: a loss on forces taken by autograd (``create_graph=True``) reaches the
charges exactly (``torch.ops.pmkit.pme_forces``, by PmePlan.charge_gradient_of_forces),
so a charge model trains on forces; the positions' and cell's second derivatives (the
Hessian) are not computed, which a warning says once. Any other second derivative
(through the potentials, the charges' or the cell's gradient) raises NotImplementedError.
"""

from __future__ import annotations

import collections
import itertools
import math
import warnings
import weakref
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch.utils.dlpack import to_dlpack as _to_dlpack

from ._arrays import library_of
from ._pme import PmeParameters, PmePlan

__all__ = ["Pme", "PmeOutput", "pme"]


class PmeOutput(NamedTuple):
    """What ``Pme`` returns. ``energy`` and ``potential`` are differentiable (with
    respect to positions, charges and cell); ``forces`` (the same as -dE/dx by autograd)
    in the charges only, so that a loss on them trains a charge model; ``virial`` carries
    no gradient."""

    energy: torch.Tensor  # (B,): each system's energy
    potential: torch.Tensor  # (N,): dE/dq_i
    forces: torch.Tensor  # (N, 3): -dE/dx_i
    virial: Optional[torch.Tensor]  # (B, 6): W = -dE/d(strain), Voigt xx, yy, zz, yz, xz, xy; None unless asked


# Every Pme by its key: the operator takes the settings by key (a custom operator takes
# no Python objects).
_MODULES: "weakref.WeakValueDictionary[str, Pme]" = weakref.WeakValueDictionary()
_KEYS = itertools.count()


class Pme(torch.nn.Module):
    """Ewald energies and potentials of batches of periodic systems by smooth PME.

        pme = pmkit.torch.Pme(cutoff=1.0, tolerance=5e-4)
        out = pme(positions, charges, cell, batch)   # out.energy (B,), out.potential (N,)
        out.energy.sum().backward()                  # forces, charge and cell gradients

    Each system's parameters are ``PmeParameters.choose(cell, cutoff, tolerance, order)``
    (OpenMM's choice: alpha from the cutoff and tolerance, the mesh from alpha and the
    cell), or ``parameters`` for every system. Energies are in Gaussian units (q_i q_j /
    r) times ``coulomb_constant`` (138.935458 for kJ/mol, nm and e); positions and cells in
    one length unit, the one of ``cutoff``. ``reciprocal_only`` gives E_rec alone (no
    real-space pairs, self term or background).

    Plans are cached per (dtype, device, cell, parameters), at most ``max_plans`` (least
    recently used first out): repeated calls on the same cells make no plan and allocate
    nothing but their results. A new cell (a barostat, a cell being trained) makes a new
    plan, whose FFT plan costs far more than a step.
    """

    def __init__(
        self,
        cutoff: Optional[float] = None,
        tolerance: float = 5e-4,
        order: int = 5,
        *,
        parameters: Optional[PmeParameters] = None,
        coulomb_constant: float = 1.0,
        reciprocal_only: bool = False,
        threads: int = 0,
        max_plans: int = 128,
    ) -> None:
        super().__init__()
        if parameters is None and cutoff is None:
            raise TypeError("Pme needs cutoff= (the parameters then follow from tolerance and order) or parameters=")
        if parameters is not None and not isinstance(parameters, PmeParameters):
            raise TypeError(f"parameters must be a pmkit.PmeParameters, not {type(parameters).__name__}")
        self.cutoff = None if cutoff is None else float(cutoff)
        self.tolerance = float(tolerance)
        self.order = int(order)
        self.parameters = parameters
        self.coulomb_constant = float(coulomb_constant)
        self.reciprocal_only = bool(reciprocal_only)
        self.threads = int(threads)
        self.max_plans = int(max_plans)
        self._plans: "collections.OrderedDict[tuple, PmePlan]" = collections.OrderedDict()
        self._key = f"pme{next(_KEYS)}"
        _MODULES[self._key] = self

    def plan(self, box: Tuple[float, float, float], dtype: torch.dtype, device: torch.device) -> PmePlan:
        """The cached plan of one system's cell (made on first use)."""
        key = (dtype, device.type, device.index, box)
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        params = self.parameters or PmeParameters.choose(box, self.cutoff, self.tolerance, self.order)
        plan = PmePlan(
            box,
            params,
            dtype=str(dtype).replace("torch.", ""),
            backend="cuda" if device.type == "cuda" else "cpu",
            device=device.index or 0,
            threads=self.threads,
            coulomb_constant=self.coulomb_constant,
        )
        self._plans[key] = plan
        while len(self._plans) > self.max_plans:
            self._plans.popitem(last=False)
        return plan

    def forward(
        self,
        positions: torch.Tensor,
        charges: torch.Tensor,
        cell: torch.Tensor,
        batch: Optional[torch.Tensor] = None,
        *,
        virial: bool = False,
    ) -> PmeOutput:
        """positions (N, 3), charges (N,), cell (3,) or (B, 3) box lengths, batch (N,)
        integers in [0, B), sorted (None: one system). Positions lie in their cell,
        0 <= x_a <= L_a (wrap them first, ``torch.remainder(x, cell[batch])``). The virial
        is computed where the cell requires grad or ``virial=True`` (its real-space pairs
        cost a little more); otherwise ``PmeOutput.virial`` is None."""
        cells = _check(positions, charges, cell, batch)
        with_virial = bool(virial) or cell.requires_grad
        # Eager calls take the autograd.Function, the same forward and backward without the
        # custom operator's dispatch layers; torch.compile traces the operator.
        pme_op = torch.ops.pmkit.pme if torch.compiler.is_compiling() else _PmeFunction.apply
        energy, potential, forces, virials = pme_op(
            self._key, positions, charges, cells, batch, self.reciprocal_only, with_virial
        )
        if charges.requires_grad:
            forces = torch.ops.pmkit.pme_forces(
                self._key, positions, charges, cells, batch, forces, self.reciprocal_only
            )
        return PmeOutput(energy, potential, forces, virials if with_virial else None)

    def extra_repr(self) -> str:
        what = f"parameters={self.parameters!r}" if self.parameters else (
            f"cutoff={self.cutoff}, tolerance={self.tolerance}, order={self.order}"
        )
        return f"{what}, coulomb_constant={self.coulomb_constant}, reciprocal_only={self.reciprocal_only}"


_DEFAULT_MODULES: "dict[tuple, Pme]" = {}


def pme(
    positions: torch.Tensor,
    charges: torch.Tensor,
    cell: torch.Tensor,
    batch: Optional[torch.Tensor] = None,
    *,
    cutoff: float,
    tolerance: float = 5e-4,
    order: int = 5,
    coulomb_constant: float = 1.0,
    reciprocal_only: bool = False,
    virial: bool = False,
) -> PmeOutput:
    """``Pme(cutoff, tolerance, order, ...)(positions, charges, cell, batch, virial=virial)``,
    with one cached Pme (and its plans) per setting."""
    key = (float(cutoff), float(tolerance), int(order), float(coulomb_constant), bool(reciprocal_only))
    module = _DEFAULT_MODULES.get(key)
    if module is None:
        module = _DEFAULT_MODULES[key] = Pme(
            cutoff, tolerance, order, coulomb_constant=coulomb_constant, reciprocal_only=reciprocal_only
        )
    return module(positions, charges, cell, batch, virial=virial)


# --- Checks of what the metadata tells (no wait for the device).


def _check(positions, charges, cell, batch) -> torch.Tensor:
    """The checks of shapes, dtypes and devices (ValueError or TypeError naming the
    argument); the cells as (B, 3)."""
    for name, t in (("positions", positions), ("charges", charges), ("cell", cell)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    if positions.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"positions has dtype {positions.dtype}; pmkit's PME takes float32 or float64")
    if positions.ndim != 2 or positions.shape[1] != 3:
        raise ValueError(f"positions has shape {tuple(positions.shape)}; it must be (N, 3)")
    n = positions.shape[0]
    for name, t, shape in (("charges", charges, (n,)), ("cell", cell, None)):
        if t.dtype != positions.dtype:
            raise TypeError(f"{name} has dtype {t.dtype}; it must be the positions' dtype {positions.dtype}")
        if t.device != positions.device:
            raise ValueError(f"{name} is on {t.device}; it must be on the positions' device {positions.device}")
    if tuple(charges.shape) != (n,):
        raise ValueError(f"charges has shape {tuple(charges.shape)}; it must be (N,) = ({n},), one per position")
    cells = cell.reshape(1, 3) if cell.shape == (3,) else cell
    if cells.ndim != 2 or cells.shape[1] != 3 or cells.shape[0] == 0:
        raise ValueError(f"cell has shape {tuple(cell.shape)}; it must be (3,) or (B, 3): box lengths per system")
    if batch is None:
        if cells.shape[0] != 1:
            raise ValueError(f"cell has {cells.shape[0]} systems and batch is None: give batch, each charge's system")
    else:
        if not isinstance(batch, torch.Tensor) or batch.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"batch must be an int64 or int32 tensor, not {getattr(batch, 'dtype', type(batch).__name__)}")
        if tuple(batch.shape) != (n,):
            raise ValueError(f"batch has shape {tuple(batch.shape)}; it must be (N,) = ({n},), one per position")
        if batch.device != positions.device:
            raise ValueError(f"batch is on {batch.device}; it must be on the positions' device {positions.device}")
    return cells


# --- The evaluation: the operator's body, on detached tensors.


def _segments(positions, charges, cells, batch) -> Tuple[List[int], List[List[float]]]:
    """Each system's first charge (B + 1 offsets) and its cell's lengths, after the
    checks of values that need the device's answer: finite positions and charges,
    positions inside their cell, batch sorted and in range, finite positive cells. A few
    reductions (NaN and infinities carry through min, max and sum) read back in one
    transfer with the sizes and cells, which the call needs on the host anyway."""
    b = cells.shape[0]
    n = positions.shape[0]
    if batch is None:
        # One system: its sums in the positions' dtype, compared with its cell on the host.
        values = [cells.flatten()]
        if n:
            values = [*torch.aminmax(positions, dim=0), charges.sum().reshape(1)] + values
        host = torch.cat(values).tolist() if n else [0.0] * 7 + torch.cat(values).tolist()
        step, lowest, highest, counts = 0, 0, 0, [n]
        low, high, total, lengths = host[:3], host[3:6], host[6], host[7:]
        high = [h - length for h, length in zip(high, lengths)]
    else:
        clamped = batch.clamp(0, b - 1).long()
        step = (batch[1:] - batch[:-1]).amin().reshape(1) if n > 1 else batch.new_zeros(1)
        ends = torch.stack([batch.amin(), batch.amax()]) if n else batch.new_zeros(2)
        # Each system's count by index_add_: torch.bincount on CUDA reads its input's maximum back (a wait).
        counts = torch.zeros(b, dtype=torch.float64, device=positions.device).index_add_(
            0, clamped, torch.ones(n, dtype=torch.float64, device=positions.device)
        )
        parts = [step.double(), ends.double(), counts]
        if n:
            parts += [
                positions.amin(0).double(),
                (positions - cells[clamped]).amax(0).double(),
                charges.sum().double().reshape(1),
            ]
        else:
            parts.append(torch.zeros(7, dtype=torch.float64, device=positions.device))
        parts.append(cells.double().flatten())
        host = torch.cat(parts).tolist()
        step, lowest, highest = host[:3]
        counts = host[3 : 3 + b]
        low, high, total = host[3 + b : 6 + b], host[6 + b : 9 + b], host[9 + b]
        lengths = host[10 + b :]
    if batch is not None and n and not (0 <= lowest and highest < b):
        raise ValueError(f"batch has values outside [0, {b}): each charge's system, an index into cell's {b} rows")
    if batch is not None and step < 0:
        raise ValueError(
            "batch is not sorted: give each system's charges consecutively (sort positions, charges and batch by batch)"
        )
    if not all(math.isfinite(v) and v > 0 for v in lengths):
        raise ValueError("cell has a box length that is not positive and finite")
    if not all(math.isfinite(v) for v in low + high):
        raise ValueError("positions has a value that is not finite (NaN or infinite)")
    if not math.isfinite(total):
        raise ValueError("charges has a value that is not finite (NaN or infinite)")
    if min(low) < 0 or max(high) > 0:
        raise ValueError(
            "positions has a charge outside its cell: each must lie in [0, L] on each axis (wrap them first: "
            "torch.remainder(positions, cell[batch]))"
        )
    offsets = [0] + list(itertools.accumulate(int(c) for c in counts))
    return offsets, [lengths[3 * s : 3 * s + 3] for s in range(b)]


def _bound(plan: PmePlan, x: torch.Tensor) -> None:
    """Records x as the plan's points, as PmePlan.set_points does (which replaces the record)."""
    plan._library, plan._points_like, plan._points_version = library_of(x), x, x._version


def _holds(plan: PmePlan, x: torch.Tensor) -> bool:
    """Whether the plan's binning is of x's values: its last set_points took a tensor over the
    same memory (kept alive by the plan: no other tensor can have it) and layout, unchanged
    since by the version counter its views share (which, as for autograd's saved tensors, a
    write through .data or another library does not move)."""
    last = plan._points_like
    layout = lambda t: (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device)  # noqa: E731
    same = isinstance(last, torch.Tensor) and layout(last) == layout(x)
    return same and last._version == x._version == getattr(plan, "_points_version", None)


def _evaluate(module: Pme, positions, charges, cells, batch, reciprocal_only: bool, virial: bool):
    """Energy (B,), potential (N,), forces (N, 3) and, where asked, virial (B, 6) (else
    zeros) in the positions' dtype, each system on its plan, its slices written in place.
    Each system is one call of the compiled plan (set_points and compute) on DLPack views
    of the slices, on torch's current stream."""
    offsets, boxes = _segments(positions, charges, cells, batch)
    b = cells.shape[0]
    n = positions.shape[0]
    device = positions.device
    empty = any(offsets[s] == offsets[s + 1] for s in range(b))  # systems without charges: energy 0
    energy = (torch.zeros if empty else torch.empty)(b, dtype=torch.float64, device=device)
    virials = torch.zeros(b, 6, dtype=torch.float64, device=device) if virial else None
    potential = positions.new_empty(n)
    forces = positions.new_empty(n, 3)
    stream = library_of(positions).stream(positions)  # torch's current stream; None on the CPU
    for s in range(b):
        start, end = offsets[s], offsets[s + 1]
        if start == end:
            continue
        whole = start == 0 and end == n  # one system: the tensors themselves, no slices
        part = (lambda t: t) if whole else (lambda t: t[start:end])  # noqa: E731
        plan = module.plan(tuple(boxes[s]), positions.dtype, device)
        x = part(positions)
        plan._impl.step(
            [_to_dlpack(x)], [_to_dlpack(part(charges))], [_to_dlpack(part(forces))],
            [_to_dlpack(energy[s : s + 1] if b > 1 else energy)], [_to_dlpack(part(potential))],
            [_to_dlpack(virials[s])] if virial else [], reciprocal_only, stream,
        )
        _bound(plan, x)
    # Unread unless asked (Pme gives None; the cell's gradient, which reads it, asks): unwritten.
    virials = virials.to(positions.dtype) if virial else positions.new_empty(b, 6)
    return energy.to(positions.dtype), potential, forces, virials


@torch.library.custom_op("pmkit::pme", mutates_args=())
def _pme_op(
    key: str,
    positions: torch.Tensor,
    charges: torch.Tensor,
    cells: torch.Tensor,
    batch: Optional[torch.Tensor],
    reciprocal_only: bool,
    virial: bool,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _evaluate(_MODULES[key], positions, charges, cells, batch, reciprocal_only, virial)


@_pme_op.register_fake
def _(key, positions, charges, cells, batch, reciprocal_only, virial):
    n, b = positions.shape[0], cells.shape[0]
    return positions.new_empty(b), positions.new_empty(n), positions.new_empty(n, 3), positions.new_empty(b, 6)


# --- The derivatives.


def _per_system(values: torch.Tensor, batch: Optional[torch.Tensor], b: int) -> torch.Tensor:
    """Sums of per-charge rows over each system: (N, K) -> (B, K)."""
    if batch is None:
        return values.sum(0, keepdim=True)
    return values.new_zeros(b, values.shape[1]).index_add_(0, batch.long(), values)


def _cell_derivative(positions, cells, batch, forces, virial) -> torch.Tensor:
    """dE/dL_a at fixed positions, (B, 3): (-W_aa + sum_i x_ia F_ia) / L_a."""
    return (-virial[:, :3] + _per_system(positions * forces, batch, cells.shape[0])) / cells


def _setup(ctx, inputs, output) -> None:
    key, positions, charges, cells, batch, reciprocal_only, _ = inputs
    energy, potential, forces, virial = output
    ctx.key, ctx.reciprocal_only = key, reciprocal_only
    ctx.has_batch = batch is not None
    ctx.save_for_backward(positions, charges, cells, batch if batch is not None else positions.new_empty(0), potential,
                          forces, virial)
    ctx.mark_non_differentiable(forces, virial)
    ctx.set_materialize_grads(False)  # an output the loss does not use has no gradient: None


class _FirstDerivativeOnly(torch.autograd.Function):
    """The identity on t, whose derivative raises: the backward pass's results under
    create_graph=True, so that differentiating them again fails loudly instead of
    missing the terms through the forces and potentials, which are constants there. The
    operator's inputs come along so that the result depends on them, as the true
    derivative does."""

    @staticmethod
    def forward(ctx, t, *inputs):
        return t.clone()

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError(
            "pmkit.torch.pme: this second derivative is not supported (a loss on forces reaches the charges; "
            "one through the potentials, the charges' or the cell's gradient does not)"
        )


def _backward(ctx, grad_energy, grad_potential, grad_forces, grad_virial):
    # Under create_graph=True the positions' gradient (the forces) stays differentiable in
    # the charges (pme_forces); the rest refuses a second derivative.
    twice = torch.is_grad_enabled()
    grad_x, grad_q, grad_cell = _first_derivatives(ctx, grad_energy, grad_potential, twice)
    if twice:
        inputs = ctx.saved_tensors[:3]
        grad_q, grad_cell = (None if g is None else _FirstDerivativeOnly.apply(g, *inputs) for g in (grad_q, grad_cell))
        if grad_potential is not None and grad_x is not None:
            grad_x = _FirstDerivativeOnly.apply(grad_x, *inputs)
    return None, grad_x, grad_q, grad_cell, None, None, None


def _first_derivatives(ctx, grad_energy, grad_potential, twice: bool):
    """The gradients of positions, charges and cells; with `twice`, the positions' through
    pme_forces."""
    positions, charges, cells, batch, potential, forces, virial = ctx.saved_tensors
    batch = batch if ctx.has_batch else None
    system = (lambda t: t[batch.long()]) if batch is not None else (lambda t: t.expand(positions.shape[0], *t.shape[1:]))
    grad_x = grad_q = grad_cell = None
    need_x, need_q, need_cell = ctx.needs_input_grad[1:4]
    if grad_energy is not None:
        ge = grad_energy.to(positions.dtype)
        per_charge = system(ge)
        grad_q = per_charge * potential if need_q else None
        if need_x and twice:
            forces = torch.ops.pmkit.pme_forces(
                ctx.key, positions, charges, cells, batch, forces, ctx.reciprocal_only
            )
        grad_x = -per_charge[:, None] * forces if need_x else None
        if need_cell:
            grad_cell = ge[:, None] * _cell_derivative(positions, cells, batch, forces, virial)
    if grad_potential is not None:
        terms = torch.ops.pmkit.pme_potential_backward(
            ctx.key, positions, charges, cells, batch, grad_potential.to(positions.dtype), ctx.reciprocal_only,
            need_cell,
        )
        add = lambda total, term: term if total is None else total + term  # noqa: E731
        grad_x = add(grad_x, terms[0]) if need_x else None
        grad_q = add(grad_q, terms[1]) if need_q else None
        grad_cell = add(grad_cell, terms[2]) if need_cell else None
    return grad_x, grad_q, grad_cell


@torch.library.custom_op("pmkit::pme_potential_backward", mutates_args=())
def _potential_backward(
    key: str,
    positions: torch.Tensor,
    charges: torch.Tensor,
    cells: torch.Tensor,
    batch: Optional[torch.Tensor],
    grad_potential: torch.Tensor,
    reciprocal_only: bool,
    cell: bool,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of g^T phi (g the potentials' gradient) in positions, charges and
    cells (zeros unless `cell`). g^T phi(q) = g^T A q, with A the PME matrix (E = q^T A q /
    2): its derivative in q is A g = phi(g), and in x and L that of (E(q + s g) - E(q - s
    g)) / (2 s) for any s (here one that makes s g as large as q, for the differences'
    rounding): two more evaluations. An operator of its own, as its scale is read on the
    host."""
    largest = float(grad_potential.abs().max()) if grad_potential.numel() else 0.0
    if largest == 0:
        return torch.zeros_like(positions), torch.zeros_like(charges), torch.zeros_like(cells)
    scale = max(float(charges.abs().max()), 1e-30) / largest
    module = _MODULES[key]
    plus = _evaluate(module, positions, charges + scale * grad_potential, cells, batch, reciprocal_only, cell)
    minus = _evaluate(module, positions, charges - scale * grad_potential, cells, batch, reciprocal_only, cell)
    forces = (plus[2] - minus[2]) / (2 * scale)
    grad_cell = (
        _cell_derivative(positions, cells, batch, forces, (plus[3] - minus[3]) / (2 * scale))
        if cell
        else torch.zeros_like(cells)
    )
    return -forces, (plus[1] - minus[1]) / (2 * scale), grad_cell


@_potential_backward.register_fake
def _(key, positions, charges, cells, batch, grad_potential, reciprocal_only, cell):
    return torch.empty_like(positions), torch.empty_like(charges), torch.empty_like(cells)


@torch.library.custom_op("pmkit::pme_forces", mutates_args=())
def _forces_op(
    key: str,
    positions: torch.Tensor,
    charges: torch.Tensor,
    cells: torch.Tensor,
    batch: Optional[torch.Tensor],
    forces: torch.Tensor,
    reciprocal_only: bool,
) -> torch.Tensor:
    """The forces of an evaluation (a copy of `forces`), differentiable in the charges:
    the backward pass's positions' gradient under create_graph=True, so that a loss on
    forces by autograd reaches the charges."""
    return forces.clone()


@_forces_op.register_fake
def _(key, positions, charges, cells, batch, forces, reciprocal_only):
    return torch.empty_like(forces)


@torch.library.custom_op("pmkit::pme_charge_gradient_of_forces", mutates_args=())
def _charge_gradient_op(
    key: str,
    positions: torch.Tensor,
    charges: torch.Tensor,
    cells: torch.Tensor,
    batch: Optional[torch.Tensor],
    weights: torch.Tensor,
    reciprocal_only: bool,
) -> torch.Tensor:
    """d/dq of sum_i weights_i . F_i, each system on its plan (PmePlan.charge_gradient_of_forces),
    on the binning of the forward pass where the plan still holds it."""
    offsets, boxes = _segments(positions, charges, cells, batch)
    module = _MODULES[key]
    out = torch.zeros_like(charges)
    stream = library_of(positions).stream(positions)  # torch's current stream; None on the CPU
    for s in range(cells.shape[0]):
        start, end = offsets[s], offsets[s + 1]
        if start == end:
            continue
        plan = module.plan(tuple(boxes[s]), positions.dtype, positions.device)
        x = positions[start:end]
        if not _holds(plan, x):
            plan._impl.set_points([_to_dlpack(x)], stream)
            _bound(plan, x)
        plan._impl.charge_gradient_of_forces(
            [_to_dlpack(charges[start:end])], [_to_dlpack(weights[start:end])], [_to_dlpack(out[start:end])],
            reciprocal_only, stream,
        )
    return out


@_charge_gradient_op.register_fake
def _(key, positions, charges, cells, batch, weights, reciprocal_only):
    return torch.empty_like(charges)


_warned_hessian = False


def _forces_setup(ctx, inputs, output) -> None:
    key, positions, charges, cells, batch, _, reciprocal_only = inputs
    ctx.key, ctx.reciprocal_only, ctx.has_batch = key, reciprocal_only, batch is not None
    ctx.save_for_backward(positions, charges, cells, batch if batch is not None else positions.new_empty(0))


def _forces_backward(ctx, grad):
    global _warned_hessian
    positions, charges, cells, batch = ctx.saved_tensors
    batch = batch if ctx.has_batch else None
    grad_q = None
    if ctx.needs_input_grad[2]:
        grad_q = torch.ops.pmkit.pme_charge_gradient_of_forces(
            ctx.key, positions, charges, cells, batch, grad.contiguous(), ctx.reciprocal_only
        )
    if (ctx.needs_input_grad[1] or ctx.needs_input_grad[3]) and not _warned_hessian:
        _warned_hessian = True
        warnings.warn(
            "pmkit.torch.pme: a loss on forces reaches the charges exactly, but not the positions or the cell: "
            "their second derivatives (the Hessian) are not computed, and their gradients lack those terms",
            stacklevel=2,
        )
    return None, None, grad_q, None, None, None, None


_forces_op.register_autograd(_forces_backward, setup_context=_forces_setup)


_pme_op.register_autograd(_backward, setup_context=_setup)


class _PmeFunction(torch.autograd.Function):
    """torch.ops.pmkit.pme for eager calls: its body, setup and backward as one
    autograd.Function (the operator's layers cost more than a small system's PME)."""

    @staticmethod
    def forward(ctx, key, positions, charges, cells, batch, reciprocal_only, virial):
        inputs = (key, positions, charges, cells, batch, reciprocal_only, virial)
        detached = [t.detach() if isinstance(t, torch.Tensor) else t for t in inputs[1:5]]
        output = _evaluate(_MODULES[key], *detached, reciprocal_only, virial)
        _setup(ctx, inputs, output)
        return output

    @staticmethod
    def backward(ctx, *grads):
        return _backward(ctx, *grads)
