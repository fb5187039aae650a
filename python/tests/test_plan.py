"""pmkit.Plan with NumPy on the CPU against the float64 reference."""

import numpy as np
import pytest
from conftest import needs_gradients, positions_in
from reference import Reference

import pmkit

GRIDS = {
    "periodic3d": pmkit.Grid.periodic((8, 6, 5), h=0.25, origin=-0.5),
    "periodic2d": pmkit.Grid((9, 7), spacing=(0.5, 0.3), origin=(1.0, -2.0)),
    "bounded3d": pmkit.Grid.bounded((8, 7, 9), h=0.5),
    "keep2d": pmkit.Grid.bounded((10, 9), h=1.0, ghosts="keep"),
    "slab3d": pmkit.Grid((8, 8, 10), spacing=0.5, boundary=("periodic", "periodic", "bounded")),
}
KERNELS = ["linear", "tsc", "mp4", "bspline4", "bspline6"]
# float64: the reference sums truncated powers (bspline), which cancel to about 1e-12.
TOLERANCE = {"float64": 1e-11, "float32": 2e-5}


def setup(grid_name, kernel, dtype, rng, n=40):
    grid = GRIDS[grid_name]
    x = positions_in(grid, n, rng)
    plan = pmkit.Plan(grid, kernel, dtype=dtype)
    plan.set_points(x.astype(dtype))
    # The reference takes the positions the plan was given, rounded to its dtype.
    return plan, Reference(grid, kernel, x.astype(dtype))


def close(actual, expected, dtype):
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=TOLERANCE[dtype] * scale)


@pytest.mark.parametrize("grid_name", sorted(GRIDS))
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_spread_and_interp_match_reference(grid_name, kernel, dtype, rng):
    plan, ref = setup(grid_name, kernel, dtype, rng)
    q = rng.standard_normal(plan.num_points).astype(dtype)
    rho = plan.spread(q)
    assert isinstance(rho, np.ndarray) and rho.dtype == dtype and rho.shape == plan.mesh_shape
    close(rho, ref.spread(q, plan.mesh_shape), dtype)
    mesh = rng.standard_normal(plan.mesh_shape).astype(dtype)
    phi = plan.interp(mesh)
    assert phi.shape == (plan.num_points,) and phi.dtype == dtype
    close(phi, ref.interp(mesh, plan.mesh_shape), dtype)


@needs_gradients
@pytest.mark.parametrize("grid_name", sorted(GRIDS))
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gradients_match_reference(grid_name, kernel, dtype, rng):
    plan, ref = setup(grid_name, kernel, dtype, rng)
    mesh = rng.standard_normal(plan.mesh_shape).astype(dtype)
    grad = plan.interp_gradient(mesh)
    assert grad.shape == (plan.num_points, plan.dim) and grad.dtype == dtype
    close(grad, ref.interp_gradient(mesh, plan.mesh_shape), dtype)
    v = rng.standard_normal((plan.num_points, plan.dim)).astype(dtype)
    div = plan.spread_gradient(v)
    assert div.shape == plan.mesh_shape
    close(div, ref.spread_gradient(v, plan.mesh_shape), dtype)


def test_interp_is_the_adjoint_of_spread(rng):
    plan, _ = setup("bounded3d", "mp4", "float64", rng, n=200)
    q = rng.standard_normal(plan.num_points)
    m = rng.standard_normal(plan.mesh_shape)
    assert np.vdot(plan.spread(q), m) == pytest.approx(np.vdot(q, plan.interp(m)), rel=1e-12)


@needs_gradients
def test_spread_gradient_is_the_adjoint_of_interp_gradient(rng):
    plan, _ = setup("periodic3d", "mp4", "float64", rng, n=200)
    v = rng.standard_normal((plan.num_points, 3))
    m = rng.standard_normal(plan.mesh_shape)
    assert np.vdot(plan.spread_gradient(v), m) == pytest.approx(np.vdot(v, plan.interp_gradient(m)), rel=1e-12)


@needs_gradients
def test_interp_gradient_is_the_derivative_of_interp(rng):
    # Central differences of interp along each axis, away from kernel breakpoints.
    grid = pmkit.Grid.periodic((16, 16), h=1 / 16)
    x = positions_in(grid, 30, rng)
    m = np.sin(2 * np.pi * np.arange(16))[None, :] + np.cos(2 * np.pi * np.arange(16) / 16)[:, None]
    plan = pmkit.Plan(grid, "bspline6")
    plan.set_points(x)
    grad = plan.interp_gradient(m)
    eps = 1e-6
    for d in range(2):
        step = np.zeros(2)
        step[d] = eps
        plan.set_points(x + step)
        up = plan.interp(m)
        plan.set_points(x - step)
        down = plan.interp(m)
        np.testing.assert_allclose(grad[:, d], (up - down) / (2 * eps), rtol=1e-6, atol=1e-6)


def test_fields_as_a_stack_or_a_list(rng):
    plan, ref = setup("periodic3d", "tsc", "float64", rng)
    q = rng.standard_normal((3, plan.num_points))
    stacked = plan.spread(q)
    assert stacked.shape == (3,) + plan.mesh_shape
    close(stacked, ref.spread(q, plan.mesh_shape), "float64")
    listed = plan.spread([q[0], q[1], q[2]])
    assert isinstance(listed, list) and len(listed) == 3
    for f in range(3):
        np.testing.assert_array_equal(listed[f], stacked[f])
    values = plan.interp(stacked)
    assert values.shape == (3, plan.num_points)
    close(values, ref.interp(stacked, plan.mesh_shape), "float64")
    as_list = plan.interp(list(stacked))
    np.testing.assert_array_equal(np.stack(as_list), values)


@needs_gradients
def test_gradient_fields_as_a_stack(rng):
    plan, ref = setup("periodic2d", "mp4", "float64", rng)
    meshes = rng.standard_normal((2,) + plan.mesh_shape)
    grad = plan.interp_gradient(meshes)
    assert grad.shape == (2, plan.num_points, 2)
    close(grad, ref.interp_gradient(meshes, plan.mesh_shape), "float64")
    div = plan.spread_gradient(grad)
    assert div.shape == (2,) + plan.mesh_shape
    close(div, ref.spread_gradient(grad, plan.mesh_shape), "float64")


def test_positions_as_columns_or_arrays(rng):
    grid = GRIDS["periodic3d"]
    x = positions_in(grid, 50, rng)
    q = rng.standard_normal(50)
    by_rows = pmkit.Plan(grid, "mp4")
    by_rows.set_points(x)
    by_columns = pmkit.Plan(grid, "mp4")
    by_columns.set_points(x[:, 0].copy(), x[:, 1].copy(), x[:, 2].copy())
    by_sequence = pmkit.Plan(grid, "mp4")
    by_sequence.set_points(list(np.ascontiguousarray(x.T)))
    expected = by_rows.spread(q)
    np.testing.assert_array_equal(by_columns.spread(q), expected)
    np.testing.assert_array_equal(by_sequence.spread(q), expected)


def test_update_points_gives_the_results_of_set_points(rng):
    plan, _ = setup("bounded3d", "mp4", "float64", rng)
    grid = GRIDS["bounded3d"]
    moved = positions_in(grid, plan.num_points, rng)
    plan.update_points(moved)
    fresh = pmkit.Plan(grid, "mp4")
    fresh.set_points(moved)
    q = rng.standard_normal(plan.num_points)
    np.testing.assert_allclose(plan.spread(q), fresh.spread(q), rtol=0, atol=1e-13)


def test_out_is_written_in_place_without_a_copy(rng):
    plan, ref = setup("periodic3d", "mp4", "float64", rng)
    q = rng.standard_normal(plan.num_points)
    out = np.full(plan.mesh_shape, np.nan)
    pointer = out.ctypes.data
    result = plan.spread(q, out=out)
    assert result is out and out.ctypes.data == pointer
    close(out, ref.spread(q, plan.mesh_shape), "float64")
    phi = np.empty(plan.num_points)
    assert plan.interp(out, out=phi) is phi
    close(phi, ref.interp(out, plan.mesh_shape), "float64")


def test_spread_add_accumulates(rng):
    plan, ref = setup("periodic2d", "linear", "float64", rng)
    q = rng.standard_normal(plan.num_points)
    out = np.ones(plan.mesh_shape)
    plan.spread(q, out=out, add=True)
    close(out, 1 + ref.spread(q, plan.mesh_shape), "float64")
    with pytest.raises(ValueError, match="add=True"):
        plan.spread(q, add=True)


def test_strided_views_are_read_and_written_in_place(rng):
    # Particle arrays go by stride: a column of an array of structures, every other
    # element of a longer array, and an output column.
    plan, ref = setup("periodic3d", "mp4", "float64", rng)
    n = plan.num_points
    records = rng.standard_normal((n, 4))
    rho = plan.spread(records[:, 2])
    close(rho, ref.spread(records[:, 2], plan.mesh_shape), "float64")
    out = np.zeros((n, 2))
    plan.interp(rho, out=out[:, 1])
    close(out[:, 1], ref.interp(rho, plan.mesh_shape), "float64")
    assert np.all(out[:, 0] == 0)


def test_meshes_of_a_stack_go_by_stride(rng):
    # Every other mesh of a stack: the stack's first axis is strided, each mesh contiguous.
    plan, ref = setup("periodic2d", "tsc", "float64", rng)
    out = np.zeros((4,) + plan.mesh_shape)
    q = rng.standard_normal((2, plan.num_points))
    plan.spread(q, out=out[::2])
    close(out[::2], ref.spread(q, plan.mesh_shape), "float64")
    assert np.all(out[1::2] == 0)


def test_binned_order_and_positions(rng):
    grid = GRIDS["periodic3d"]
    x = positions_in(grid, 100, rng)
    plan = pmkit.Plan(grid, "mp4")
    plan.set_points(x)
    order = plan.binned_order()
    assert order.dtype == np.uint32 and sorted(order.tolist()) == list(range(100))
    offsets = plan.binned_positions()
    assert offsets.shape == (100, 3)
    size = np.array(grid.cells) * np.array(grid.spacing)
    expected = np.mod(x[order] - np.array(grid.origin), size)
    wrapped = np.mod(offsets - expected + size / 2, size) - size / 2
    np.testing.assert_allclose(wrapped, 0, atol=1e-12)


def test_zero_particles():
    plan = pmkit.Plan(GRIDS["periodic3d"], "mp4")
    plan.set_points(np.zeros((0, 3)))
    rho = plan.spread(np.zeros(0))
    assert np.all(rho == 0)
    assert plan.interp(rho).shape == (0,)


def test_plan_properties():
    grid = GRIDS["periodic3d"]
    plan = pmkit.Plan(grid, pmkit.Kernel.bspline(4), dtype=np.float32, threads=2)
    assert plan.mesh_shape == (5, 6, 8)
    assert plan.mesh_size == 240
    assert plan.dtype == "float32" and plan.dim == 3 and plan.backend == "cpu"
    assert plan.kernel == pmkit.Kernel("bspline4") and plan.kernel.support == 4
    assert plan.grid == grid
    assert not plan.has_points
    keep = pmkit.Plan(GRIDS["keep2d"], "mp4")
    assert keep.mesh_shape == (9 + 1 + 4, 10 + 1 + 4)


def test_kernels():
    assert pmkit.Kernel("cic") == pmkit.Kernel.linear()
    assert pmkit.Kernel.mp4().accuracy_order == 3
    assert pmkit.Kernel("tsc").ghost_width == 1
    assert repr(pmkit.Kernel.bspline(5)) == "pmkit.Kernel('bspline5')"


def test_pmkit_runs_deterministic_and_threads_options(rng):
    grid = GRIDS["periodic3d"]
    x = positions_in(grid, 300, rng)
    q = rng.standard_normal(300)
    results = []
    for threads, method in ((1, "cpu_slabs"), (2, "cpu_private_meshes"), (0, "auto")):
        plan = pmkit.Plan(grid, "mp4", threads=threads, spread_method=method, deterministic=True)
        plan.set_points(x)
        results.append(plan.spread(q))
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], rtol=0, atol=1e-12)
