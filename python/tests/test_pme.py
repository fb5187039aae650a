"""pmkit.PmePlan and pmkit.PmeParameters: against the float64 Ewald sum, zero-copy
outputs, and bad input."""

import numpy as np
import pytest
from ewald_reference import ewald, random_system

import pmkit

BOX = (1.6, 1.7, 1.5)


def fftw_or_skip():
    try:
        pmkit.PmePlan(BOX, pmkit.PmeParameters(alpha=5.0, mesh=(8, 8, 8), order=5, cutoff=0.7))
    except pmkit.Error as e:
        if e.code == pmkit.ErrorCode.Unsupported:
            pytest.skip("this build has no FFTW (the CPU backend's PME)")
        raise


@pytest.fixture
def system(rng):
    fftw_or_skip()
    x, q = random_system(rng, 120, BOX, net=0.5)
    return x, q, ewald(x, q, BOX)


def relative(got, want):
    return np.linalg.norm(np.asarray(got) - want) / np.linalg.norm(want)


def test_parameters_choose_as_openmm():
    p = pmkit.PmeParameters.choose((10.0, 10.0, 10.0), 1.0, 5e-4)
    assert p.mesh == (81, 81, 81) and p.order == 5 and p.cutoff == 1.0
    assert p.alpha == pytest.approx(np.sqrt(-np.log(1e-3)))
    assert pmkit.PmeParameters.choose((10.0, 10.0, 10.0), 1.0, 5e-4, order=6).order == 6
    with pytest.raises(pmkit.Error, match="tolerance"):
        pmkit.PmeParameters.choose((10.0, 10.0, 10.0), 1.0, 0.0)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_matches_ewald_sum(system, dtype):
    x, q, (energy, forces, potential, virial) = system
    params = pmkit.PmeParameters(alpha=4.2 / 0.7, mesh=(40, 40, 40), order=6, cutoff=0.7)
    plan = pmkit.PmePlan(BOX, params, dtype=dtype, threads=1)
    plan.set_points(x.astype(dtype))
    r = plan.compute(q.astype(dtype), potential=True, virial=True)
    tolerance = 1e-4 if dtype == "float64" else 5e-4
    assert r.energy.shape == () and r.energy.dtype == np.float64
    assert abs(float(r.energy) - energy) <= tolerance * np.abs(q * potential).sum()
    assert r.forces.shape == (120, 3) and r.forces.dtype == np.dtype(dtype)
    assert relative(r.forces, forces) <= tolerance
    assert relative(r.potential, potential) <= tolerance
    assert np.abs(r.virial - virial).max() <= tolerance * np.abs(virial).max()


def test_outputs_written_in_place(system):
    x, q, _ = system
    plan = pmkit.PmePlan(BOX, pmkit.PmeParameters.choose(BOX, 0.7, 1e-4), threads=1)
    plan.set_points(x[:, 0], x[:, 1], x[:, 2])
    forces, energy, virial = np.empty((120, 3)), np.empty(1), np.empty(6)
    r = plan.compute(q, forces=forces, energy=energy, virial=virial)
    assert r.forces is forces and r.energy is energy and r.virial is virial and r.potential is None
    full = plan.compute(q)
    np.testing.assert_allclose(forces, full.forces, rtol=1e-12)
    assert energy[0] == pytest.approx(float(full.energy), rel=1e-12)
    rec = plan.compute(q, reciprocal_only=True)
    assert float(rec.energy) != pytest.approx(float(full.energy))
    plan.update_points(x)
    assert float(plan.compute(q).energy) == pytest.approx(float(full.energy), rel=1e-12)


def test_bad_input(system):
    x, q, _ = system
    params = pmkit.PmeParameters.choose(BOX, 0.7, 1e-4)
    with pytest.raises(pmkit.Error, match="cutoff"):
        pmkit.PmePlan(BOX, pmkit.PmeParameters(alpha=5.0, mesh=(8, 8, 8), order=5, cutoff=1.0))
    with pytest.raises(TypeError, match="parameters"):
        pmkit.PmePlan(BOX, "auto")
    plan = pmkit.PmePlan(BOX, params, threads=1)
    with pytest.raises(pmkit.Error, match="set_points"):
        plan.compute(q)
    with pytest.raises(TypeError, match="positions has dtype float32"):
        plan.set_points(x.astype(np.float32))
    bad = x.copy()
    bad[3, 1] = np.nan
    with pytest.raises(pmkit.Error):
        plan.set_points(bad)
    plan.set_points(x)
    with pytest.raises(pmkit.Error, match="charges"):
        plan.compute(q[:-1])
    with pytest.raises(pmkit.Error, match="virial"):
        plan.compute(q, virial=np.empty(5))


def test_charge_gradient_of_forces(system, rng):
    # F is quadratic in q: a central difference of w . F along any change of the charges is
    # exact but for rounding.
    x, q, _ = system
    plan = pmkit.PmePlan(BOX, pmkit.PmeParameters.choose(BOX, 0.7, 1e-3), threads=1)
    plan.set_points(x)
    w, direction = rng.standard_normal((120, 3)), rng.standard_normal(120)
    for reciprocal_only in (False, True):
        gradient = plan.charge_gradient_of_forces(q, w, reciprocal_only=reciprocal_only)
        forces = [plan.compute(q + s * direction, reciprocal_only=reciprocal_only).forces for s in (0.5, -0.5)]
        assert np.sum(w * (forces[0] - forces[1])) == pytest.approx(direction @ gradient, rel=1e-9)
