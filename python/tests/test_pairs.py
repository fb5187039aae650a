"""pmkit.PairPlan on the CPU against direct float64 sums over all pairs."""

import numpy as np
import pytest
from conftest import positions_in

import pmkit


def pair_vectors(x, box):
    """r_ij = x_i - x_j for all pairs, minimum image on periodic axes."""
    r = x[:, None, :] - x[None, :, :]
    for d in range(x.shape[1]):
        if box.boundary[d] == "periodic":
            r[..., d] -= box.length[d] * np.round(r[..., d] / box.length[d])
    return r


def lennard_jones(x, box, cutoff, epsilon, sigma):
    r = pair_vectors(x, box)
    r2 = np.sum(r * r, axis=-1)
    np.fill_diagonal(r2, np.inf)
    inside = r2 < cutoff**2
    s6 = (sigma**2 / np.where(inside, r2, 1.0)) ** 3
    shift = 4 * epsilon * ((sigma / cutoff) ** 12 - (sigma / cutoff) ** 6)
    pair_energy = np.where(inside, 4 * epsilon * (s6 * s6 - s6) - shift, 0.0)
    magnitude = np.where(inside, 24 * epsilon * (2 * s6 * s6 - s6) / np.where(inside, r2, 1.0), 0.0)
    forces = np.sum(magnitude[..., None] * r, axis=1)
    return forces, 0.5 * pair_energy.sum(axis=1), inside.sum(axis=1)


@pytest.mark.parametrize("boundary", ["periodic", "bounded"])
@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_lennard_jones_and_neighbour_count(boundary, dim, dtype, rng):
    box = pmkit.Box([4.0, 5.0, 4.5][:dim], origin=-1.0, boundary=boundary)
    grid = pmkit.Grid([4] * dim, spacing=[l / 4 for l in box.length], origin=-1.0, boundary=boundary)
    x = positions_in(grid, 120, rng)
    if boundary == "periodic":
        x = np.mod(x - np.array(box.origin), box.length) + np.array(box.origin)
    x = x.astype(dtype)
    pairs = pmkit.PairPlan(box, 1.2, dtype=dtype, threads=2)
    pairs.set_points(x)
    forces, energy = pairs.lennard_jones(epsilon=0.5, sigma=0.6, softening=0.0)
    ref_forces, ref_energy, ref_count = lennard_jones(x.astype(np.float64), box, 1.2, 0.5, 0.6)
    tolerance = 1e-9 if dtype == "float64" else 2e-3
    scale = max(1.0, np.abs(ref_forces).max())
    np.testing.assert_allclose(forces, ref_forces, rtol=0, atol=tolerance * scale)
    np.testing.assert_allclose(energy, ref_energy, rtol=0, atol=tolerance * max(1.0, np.abs(ref_energy).max()))
    count = pairs.neighbour_count()
    assert count.shape == (120,)
    if dtype == "float64":
        np.testing.assert_array_equal(count, ref_count)


def test_lennard_jones_out_is_one_array(rng):
    pairs = pmkit.PairPlan(pmkit.Box.periodic([3.0, 3.0]), 1.0)
    pairs.set_points(rng.random((30, 2)) * 3)
    out = np.empty((30, 3))
    forces, energy = pairs.lennard_jones(out=out)
    assert np.shares_memory(forces, out) and np.shares_memory(energy, out)
    np.testing.assert_array_equal(out[:, 2], energy)


def test_pair_plan_takes_a_mesh_plans_particles(rng):
    grid = pmkit.Grid.periodic((6, 6, 6), h=0.5)
    x = positions_in(grid, 200, rng)
    mesh = pmkit.Plan(grid, "mp4")
    mesh.set_points(x)
    from_mesh = pmkit.PairPlan(grid, 0.7)
    from_mesh.set_points(mesh)
    direct = pmkit.PairPlan(grid, 0.7)
    direct.set_points(x)
    np.testing.assert_array_equal(from_mesh.neighbour_count(), direct.neighbour_count())
    assert from_mesh.cells == (4, 4, 4) and from_mesh.cutoff == 0.7


def test_pair_plan_errors(rng):
    with pytest.raises(pmkit.Error, match="cutoff") as info:
        pmkit.PairPlan(pmkit.Box.periodic([2.0, 2.0]), 1.5)
    assert info.value.code == pmkit.ErrorCode.InvalidArgument
    pairs = pmkit.PairPlan(pmkit.Box.periodic([3.0, 3.0]), 1.0)
    with pytest.raises(pmkit.Error, match="before set_points"):
        pairs.neighbour_count()
    pairs.set_points(rng.random((10, 2)))
    with pytest.raises(ValueError, match="out has shape"):
        pairs.neighbour_count(out=np.zeros((10, 1, 1, 1)))
    with pytest.raises(TypeError, match="float32 2D, this pair plan float64 2D"):
        mesh = pmkit.Plan(pmkit.Grid.periodic((3, 3)), "linear", dtype="float32")
        mesh.set_points(np.zeros((1, 2), np.float32))
        pairs.set_points(mesh)


@pytest.mark.parametrize(
    "params, needle",
    [
        (dict(cutoff=1.5), "cutoff = 1.5"),  # beyond the plan's: its pairs would be dropped
        (dict(cutoff=0.5), "cutoff = 0.5"),
        (dict(cutoff=-1), "cutoff = -1"),
        (dict(sigma=0), "sigma = 0"),
        (dict(sigma=float("inf")), "sigma = inf"),
        (dict(epsilon=float("nan")), "epsilon = nan"),
        (dict(softening=-0.125), "softening = -0.125"),
    ],
)
def test_lennard_jones_parameters_are_checked(params, needle, rng):
    pairs = pmkit.PairPlan(pmkit.Box.periodic([3.0, 3.0]), 1.0)
    pairs.set_points(rng.random((30, 2)) * 3)
    out = np.full((30, 3), 7.0)
    with pytest.raises(pmkit.Error, match=needle) as info:
        pairs.lennard_jones(**params, out=out)
    assert info.value.code == pmkit.ErrorCode.InvalidArgument
    assert (out == 7.0).all()
    pairs.lennard_jones(cutoff=1.0, out=out)  # the plan's cutoff, as the default
    assert not (out == 7.0).all()
