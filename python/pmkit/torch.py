"""pmkit for PyTorch: spread, interp, interp_gradient and spread_gradient as differentiable
operators, and batched, differentiable PME (``pme`` and ``Pme``, in _torch_pme.py).

    import pmkit, pmkit.torch
    plan = pmkit.Plan(pmkit.Grid.periodic((64, 64, 64), h=1 / 64), "mp4", backend="cuda")
    rho = pmkit.torch.spread(plan, x, q)      # x: (N, 3) positions, q: (N,) or (F, N)
    phi = pmkit.torch.interp(plan, x, rho)
    loss = phi.square().sum(); loss.backward()   # gradients for q and x

Each function takes the plan, the positions as one (N, D) tensor, and the values, and bins
the positions with ``plan.set_points`` before its call. With ``reuse_binning=True`` it
skips that where the plan holds these very positions already: the same tensor, unmodified
since by any operation that PyTorch counts (its data pointer, shape, strides and version
counter; the plan keeps a reference to it). Writes that PyTorch does not count, through
``.data`` or a NumPy view, go unseen then, which is why it is not the default. The backward
pass reuses the forward pass's binning in the same way, as autograd trusts its saved
tensors. The plan's dtype is the tensors' and its backend their device's.

Derivatives:

- ``spread`` and ``interp`` with respect to the values and meshes through their adjoints
  (each other), and with respect to the positions through ``interp_gradient``;
- ``interp_gradient`` and ``spread_gradient`` with respect to meshes and vectors through
  their adjoints (each other). Their derivative with respect to the positions needs the
  kernels' second derivatives, which pmkit does not have: asking for it raises
  NotImplementedError rather than returning a wrong zero.

The functions are ``torch.library`` custom operators (``torch.ops.pmkit.*``), so that
``torch.compile`` takes them without a graph break.
"""

from __future__ import annotations

import functools
from typing import Tuple

import torch

from ._plan import Plan, plan_of_key

from ._torch_pme import Pme, PmeOutput, pme

__all__ = ["Pme", "PmeOutput", "pme", "spread", "interp", "interp_gradient", "spread_gradient"]


def _bind(plan: Plan, positions: torch.Tensor, reuse: bool) -> None:
    """Bins the positions, unless `reuse` and the plan holds them already. The plan keeps
    the tensor whose binning it holds, so that its memory cannot be reused by another
    tensor with the same data pointer while the token stands."""
    token = (positions.data_ptr(), tuple(positions.shape), positions.stride(), positions._version)
    if not reuse or plan._points_token != token:
        plan.set_points(positions)
        plan._points_token = token
        plan._points_tensor = positions


# --- The operators: each runs the plan's call of its name on detached tensors; its fake
# (meta) version gives torch.compile the result's shape, shape(plan, positions, values).


def _operator(name: str, shape):
    @torch.library.custom_op(f"pmkit::{name}", mutates_args=())
    def operator(key: str, positions: torch.Tensor, values: torch.Tensor, reuse: bool) -> torch.Tensor:
        plan = plan_of_key(key)
        _bind(plan, positions, reuse)
        return getattr(plan, name)(values)

    @operator.register_fake
    def _(key: str, positions: torch.Tensor, values: torch.Tensor, reuse: bool) -> torch.Tensor:
        return values.new_empty(shape(plan_of_key(key), positions, values))

    return operator


# props (N,) or (F, N) -> meshes; meshes -> (N,) or (F, N), or (N, D) or (F, N, D);
# vectors (N, D) or (F, N, D) -> meshes.
_spread = _operator("spread", lambda plan, x, props: props.shape[:-1] + plan.mesh_shape)
_interp = _operator("interp", lambda plan, x, meshes: meshes.shape[: meshes.ndim - plan.dim] + x.shape[:1])
_interp_gradient = _operator(
    "interp_gradient", lambda plan, x, meshes: meshes.shape[: meshes.ndim - plan.dim] + x.shape
)
_spread_gradient = _operator("spread_gradient", lambda plan, x, vectors: vectors.shape[:-2] + plan.mesh_shape)


# --- Their derivatives. Gradients arriving from autograd may be broadcast views (stride
# 0), which a plan does not take: they are made contiguous first.


def _save(ctx, inputs: Tuple, output: torch.Tensor) -> None:
    key, positions, values, _ = inputs
    ctx.key = key
    ctx.save_for_backward(positions, values)


def _value_backward(adjoint, position_factors, ctx, grad: torch.Tensor):
    """spread's and interp's backward: the values' gradient through the adjoint, the
    positions' through interp_gradient, d/dx_p = sum over fields of weight[p] *
    interp_gradient(mesh)[p], with (weight, mesh) = position_factors(values, grad)."""
    positions, values = ctx.saved_tensors
    grad = grad.contiguous()
    grad_values = adjoint(ctx.key, positions, grad, True) if ctx.needs_input_grad[2] else None
    grad_positions = None
    if ctx.needs_input_grad[1]:
        weight, mesh = position_factors(values, grad)
        g = _interp_gradient(ctx.key, positions, mesh, True)
        grad_positions = (weight.unsqueeze(-1) * g).reshape(-1, *positions.shape).sum(0)
    return None, grad_positions, grad_values, None


def _gradient_backward(adjoint, name: str, ctx, grad: torch.Tensor):
    """interp_gradient's and spread_gradient's backward: through the adjoint only."""
    if ctx.needs_input_grad[1]:
        raise NotImplementedError(
            f"pmkit.torch.{name}: the derivative with respect to the positions needs the kernels' second "
            "derivatives, which pmkit does not compute; detach the positions"
        )
    positions, _ = ctx.saved_tensors
    grad_values = adjoint(ctx.key, positions, grad.contiguous(), True) if ctx.needs_input_grad[2] else None
    return None, None, grad_values, None


# spread: d/dx_p of sum_n grad[n] q_p W(x_p - x_n) = q_p * interp_gradient(grad)[p].
_spread.register_autograd(
    functools.partial(_value_backward, _interp, lambda props, grad: (props, grad)), setup_context=_save
)
# interp: d/dx_p of sum_p grad[p] interp(m)[p] = grad[p] * interp_gradient(m)[p].
_interp.register_autograd(
    functools.partial(_value_backward, _spread, lambda meshes, grad: (grad, meshes)), setup_context=_save
)
_interp_gradient.register_autograd(
    functools.partial(_gradient_backward, _spread_gradient, "interp_gradient"), setup_context=_save
)
_spread_gradient.register_autograd(
    functools.partial(_gradient_backward, _interp_gradient, "spread_gradient"), setup_context=_save
)


# --- The public functions.


def _check(plan: Plan, positions: torch.Tensor) -> str:
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a pmkit.Plan, not {type(plan).__name__}")
    if not isinstance(positions, torch.Tensor) or positions.ndim != 2 or positions.shape[1] != plan.dim:
        shape = tuple(positions.shape) if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise ValueError(f"positions must be an (N, {plan.dim}) tensor, not {shape}")
    return plan.key


def spread(plan: Plan, positions: torch.Tensor, props: torch.Tensor, *, reuse_binning: bool = False) -> torch.Tensor:
    """P2M: (N,) or (F, N) values at the (N, D) positions onto ``plan.mesh_shape`` or
    (F, *mesh_shape) meshes. Differentiable in ``props`` and ``positions``."""
    return _spread(_check(plan, positions), positions, props, reuse_binning)


def interp(plan: Plan, positions: torch.Tensor, meshes: torch.Tensor, *, reuse_binning: bool = False) -> torch.Tensor:
    """M2P: meshes (``plan.mesh_shape`` or (F, *mesh_shape)) at the (N, D) positions: (N,)
    or (F, N). Differentiable in ``meshes`` and ``positions``."""
    return _interp(_check(plan, positions), positions, meshes, reuse_binning)


def interp_gradient(plan: Plan, positions: torch.Tensor, meshes: torch.Tensor, *, reuse_binning: bool = False) -> torch.Tensor:
    """The gradient of ``interp`` with respect to the positions: (N, D) or (F, N, D).
    Differentiable in ``meshes``."""
    return _interp_gradient(_check(plan, positions), positions, meshes, reuse_binning)


def spread_gradient(plan: Plan, positions: torch.Tensor, vectors: torch.Tensor, *, reuse_binning: bool = False) -> torch.Tensor:
    """The adjoint of ``interp_gradient``: (N, D) or (F, N, D) vectors onto meshes.
    Differentiable in ``vectors``."""
    return _spread_gradient(_check(plan, positions), positions, vectors, reuse_binning)

