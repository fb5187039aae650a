"""Shared fixtures: random particles in a grid's domain, and which optional parts run."""

import numpy as np
import pytest

import pmkit


def positions_in(grid, n, rng):
    """n random positions inside the grid's domain (and past it on periodic axes)."""
    lo = np.array(grid.origin)
    size = np.array(grid.cells) * np.array(grid.spacing)
    periodic = np.array([b == "periodic" for b in grid.boundary])
    # Periodic axes take positions anywhere; bounded ones inside the closed box.
    span = np.where(periodic, 3 * size, size)
    start = np.where(periodic, lo - size, lo)
    return start + rng.random((n, grid.dim)) * span


def has_gradients():
    """Whether this build of the library has interp_gradient (pmkit.Error Unsupported if not)."""
    plan = pmkit.Plan(pmkit.Grid.periodic((4, 4)), "linear")
    plan.set_points(np.zeros((1, 2)))
    try:
        plan.interp_gradient(np.zeros(plan.mesh_shape))
    except pmkit.Error as e:
        if e.code == pmkit.ErrorCode.Unsupported:
            return False
        raise
    return True


needs_gradients = pytest.mark.skipif(
    not has_gradients(), reason="this build of the C++ library has no CPU interp_gradient/spread_gradient"
)


@pytest.fixture
def rng():
    return np.random.default_rng(20261126)
