"""pmkit.jax.pme: energies, forces, potentials and virials against the float64 Ewald sum
and against pmkit.PmePlan; gradients in positions, charges and cell against finite
differences; jit, vmap, batches of different sizes; bad input. The tests skip where jax
is not installed; the GPU ones also where JAX has no GPU or pmkit no CUDA."""

import re

import numpy as np
import pytest
from conftest import needs_gradients
from ewald_reference import ewald, random_system

import pmkit

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import pmkit.jax as pj  # noqa: E402  (needs jax)
from pmkit import _jax_pme  # noqa: E402

pytestmark = needs_gradients  # the forces and potentials need interp_gradient

CELLS = [(1.6, 1.7, 1.5), (1.5, 1.5, 1.9), (1.8, 1.6, 1.6)]
SIZES = (40, 25, 33)
# alpha r_c = 3.3, order 6: relative errors near 1e-5 of the Ewald sum.
SETTINGS = dict(cutoff=0.7, tolerance=1e-5, order=6)
TOLERANCE = {"float64": 1e-4, "float32": 1e-3}


def systems(seed, sizes=SIZES, cells=CELLS):
    rng = np.random.default_rng(seed)
    return [random_system(rng, n, cell, net=0.3) for n, cell in zip(sizes, cells)]


def concatenated(seed, dtype="float64", sizes=SIZES, cells=CELLS):
    """The systems as one batch: positions, charges, cells (S, 3), and the systems."""
    parts = systems(seed, sizes, cells)
    x = np.concatenate([p[0] for p in parts]).astype(dtype)
    q = np.concatenate([p[1] for p in parts]).astype(dtype)
    return x, q, np.array(cells, dtype=dtype), parts


def relative(actual, expected):
    return np.linalg.norm(np.asarray(actual, dtype=np.float64) - expected) / np.linalg.norm(expected)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_one_system_matches_the_ewald_sum(dtype):
    (x, q), = systems(1, sizes=(60,), cells=CELLS[:1])
    energy, forces, potential, virial = ewald(x, q, CELLS[0])
    f = jax.jit(lambda x, q, c: pj.pme(x, q, c, virial=True, **SETTINGS))
    out = f(x.astype(dtype), q.astype(dtype), np.array(CELLS[0], dtype=dtype))
    assert out.energy.shape == () and out.energy.dtype == dtype and out.virial.shape == (6,)
    tolerance = TOLERANCE[dtype]
    assert abs(float(out.energy) - energy) <= tolerance * np.abs(q * potential).sum()
    assert relative(out.forces, forces) <= tolerance
    assert relative(out.potential, potential) <= tolerance
    assert np.abs(np.asarray(out.virial) - virial).max() <= tolerance * np.abs(virial).max()
    # The forces are -dE/dx.
    grad = jax.jit(jax.grad(lambda x: pj.pme(x, q.astype(dtype), CELLS[0], **SETTINGS).energy))(x.astype(dtype))
    np.testing.assert_allclose(-np.asarray(grad), np.asarray(out.forces), rtol=0, atol=1e-5 * np.abs(forces).max())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reciprocal_only", [False, True])
def test_matches_the_pme_plan(dtype, reciprocal_only):
    (x, q), = systems(2, sizes=(50,), cells=CELLS[1:2])
    x, q = x.astype(dtype), q.astype(dtype)
    params = pmkit.PmeParameters.choose(CELLS[1], 0.7, 1e-5, 6)
    plan = pmkit.PmePlan(CELLS[1], params, dtype=dtype)
    plan.set_points(x)
    ref = plan.compute(q, potential=True, virial=True, reciprocal_only=reciprocal_only)
    out = pj.pme(x, q, CELLS[1], parameters=params, virial=True, reciprocal_only=reciprocal_only)
    scale = 1e-12 if dtype == "float64" else 1e-5
    for name in ("energy", "forces", "potential", "virial"):
        expected = np.asarray(getattr(ref, name), dtype=np.float64)
        np.testing.assert_allclose(np.asarray(getattr(out, name)), expected, rtol=0,
                                   atol=scale * max(1.0, np.abs(expected).max()), err_msg=name)


def test_reciprocal_part_matches_the_jax_composed_one():
    """pme(reciprocal_only=True) against pme_reciprocal_energy, the same E_rec composed in
    JAX from pmkit.jax.spread and jnp.fft: two independent paths to one number."""
    (x, q), = systems(3, sizes=(30,), cells=CELLS[2:3])
    params = pmkit.PmeParameters(alpha=3.0, mesh=(20, 18, 18), order=5, cutoff=0.7)
    out = pj.pme(x, q, CELLS[2], parameters=params, reciprocal_only=True)
    composed = pj.pme_reciprocal_energy(x, q, CELLS[2], alpha=3.0, mesh=(20, 18, 18), order=5)
    assert abs(float(out.energy) - float(composed)) <= 1e-12 * abs(float(composed))
    self_energy = pj.ewald_self_energy(q, CELLS[2], alpha=3.0)
    full = pj.pme(x, q, CELLS[2], parameters=params)
    real = float(full.energy) - float(out.energy) - float(self_energy)
    assert abs(real) > 1e-3 * abs(float(full.energy))  # the real-space pairs are there


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_batch_of_different_sizes_and_cells(dtype):
    x, q, cells, parts = concatenated(4, dtype)
    f = jax.jit(lambda x, q, c: pj.pme(x, q, c, sizes=SIZES, virial=True, **SETTINGS))
    out = f(x, q, cells)
    assert out.energy.shape == (3,) and out.virial.shape == (3, 6) and out.forces.shape == (98, 3)
    start = 0
    for s, (xs, qs) in enumerate(parts):
        end = start + len(qs)
        energy, forces, potential, virial = ewald(xs, qs, CELLS[s])
        tolerance = TOLERANCE[dtype]
        assert abs(float(out.energy[s]) - energy) <= tolerance * np.abs(qs * potential).sum()
        assert relative(out.forces[start:end], forces) <= tolerance
        assert relative(out.potential[start:end], potential) <= tolerance
        assert np.abs(np.asarray(out.virial[s]) - virial).max() <= tolerance * np.abs(virial).max()
        start = end
    # A system of no charges has zero energy and virial.
    empty = pj.pme(x, q, np.concatenate([cells, cells[:1]]), sizes=SIZES + (0,), virial=True, **SETTINGS)
    assert float(empty.energy[3]) == 0 and not np.asarray(empty.virial[3]).any()
    np.testing.assert_allclose(np.asarray(empty.energy[:3]), np.asarray(out.energy), rtol=1e-12)


def test_positions_outside_the_cell_are_wrapped():
    (x, q), = systems(5, sizes=(30,), cells=CELLS[:1])
    shifted = x + np.array(CELLS[0]) * np.random.default_rng(6).integers(-2, 3, x.shape)
    a, b = (pj.pme(p, q, CELLS[0], **SETTINGS) for p in (x, shifted))
    assert abs(float(a.energy) - float(b.energy)) <= 1e-10 * abs(float(a.energy))
    np.testing.assert_allclose(np.asarray(b.forces), np.asarray(a.forces), atol=1e-9)


# --- Gradients against finite differences (fixed parameters: PmeParameters.choose's mesh
# jumps with the cell).

PARAMS = pmkit.PmeParameters(alpha=4.0, mesh=(16, 16, 16), order=6, cutoff=0.7)


def small_batch(seed=7):
    return concatenated(seed, sizes=(8, 6), cells=CELLS[:2])[:3]


def test_gradients_match_finite_differences():
    x, q, cells = small_batch()
    weights = np.array([0.7, -1.3])

    def energy(x, q, c):
        return jnp.vdot(weights, pj.pme(x, q, c, sizes=(8, 6), parameters=PARAMS).energy)

    check_grads(energy, (x, q, cells), order=1, modes=("rev",), eps=1e-6)
    # Under jit, the cell alone.
    check_grads(jax.jit(lambda c: energy(x, q, c)), (cells,), order=1, modes=("rev",), eps=1e-6)


def test_potential_gradients_match_finite_differences():
    """A loss on the potentials (polarisation identity in the backward pass)."""
    x, q, cells = small_batch(8)
    g = np.random.default_rng(9).standard_normal(len(q))
    loss = lambda x, q, c: jnp.vdot(g, pj.pme(x, q, c, sizes=(8, 6), parameters=PARAMS).potential)  # noqa: E731
    check_grads(loss, (x, q, cells), order=1, modes=("rev",), eps=1e-6)


def test_cell_gradient_with_chosen_parameters():
    """With the parameters chosen per cell the cell's derivative is that at the cell's
    parameters: a central difference at fixed parameters."""
    (x, q), = systems(10, sizes=(30,), cells=CELLS[:1])
    cell = np.array(CELLS[0])
    grad = jax.grad(lambda c: pj.pme(x, q, c, **SETTINGS).energy)(cell)
    params = pmkit.PmeParameters.choose(CELLS[0], 0.7, 1e-5, 6)
    h = 1e-5
    for a in range(3):
        step = np.eye(3)[a] * h
        plus, minus = (float(pj.pme(x, q, cell + s, parameters=params).energy) for s in (step, -step))
        assert abs(float(grad[a]) - (plus - minus) / (2 * h)) <= 1e-6 * np.abs(np.asarray(grad)).max()


def test_a_loss_on_forces_differentiates_in_the_charges():
    """A model's charges q(theta) trained on forces taken by jax.grad: the loss reaches the
    charges through PmePlan.charge_gradient_of_forces."""
    x, w, cells = small_batch(11)
    target = np.random.default_rng(12).standard_normal(x.shape)

    def loss(theta):
        q = jnp.tanh(theta * w)
        energy = lambda x: pj.pme(x, q, cells, sizes=(8, 6), parameters=PARAMS).energy.sum()  # noqa: E731
        forces = -jax.grad(energy)(x)
        return jnp.sum((forces - target) ** 2) + jnp.sum(pj.pme(x, q, cells, sizes=(8, 6), parameters=PARAMS).forces)

    check_grads(loss, (0.7,), order=1, modes=("rev",), eps=1e-5)


def test_unsupported_second_derivatives_raise():
    x, q, cells = small_batch(13)
    forces = lambda x: pj.pme(x, q, cells, sizes=(8, 6), parameters=PARAMS).forces  # noqa: E731
    with pytest.raises(NotImplementedError, match="Hessian"):
        jax.grad(lambda x: jnp.sum(forces(x) ** 2))(x)
    virial = lambda q: pj.pme(x, q, cells, sizes=(8, 6), parameters=PARAMS, virial=True).virial  # noqa: E731
    with pytest.raises(NotImplementedError, match="virial carries no derivative"):
        jax.grad(lambda q: jnp.sum(virial(q)))(q)


# --- vmap: systems of one size, each its cell, in one custom call.


def test_vmap_over_systems_of_one_size():
    parts = systems(14, sizes=(20, 20, 20))
    xs = np.stack([p[0] for p in parts])
    qs = np.stack([p[1] for p in parts])
    cells = np.array(CELLS)

    def energy(x, q, c):
        return pj.pme(x, q, c, **SETTINGS).energy

    batched = jax.jit(jax.vmap(jax.value_and_grad(energy, argnums=(0, 1, 2))))
    energies, (gx, gq, gc) = batched(xs, qs, cells)
    for b in range(3):
        e, (x1, q1, c1) = jax.value_and_grad(energy, argnums=(0, 1, 2))(xs[b], qs[b], cells[b])
        for got, want in ((energies[b], e), (gx[b], x1), (gq[b], q1), (gc[b], c1)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)
    text = str(jax.make_jaxpr(jax.vmap(energy))(xs, qs, cells))
    assert text.count("ffi_call[") == 1 and "while[" not in text and "scan[" not in text
    # Shared positions and cell, batched charges: one call, one binning per entry's plan.
    shared = jax.vmap(lambda q: energy(xs[0], q, cells[0]))(qs)
    for b in range(3):
        assert abs(float(shared[b]) - float(energy(xs[0], qs[b], cells[0]))) <= 1e-12 * abs(float(shared[b]))


def test_the_program_holds_no_array_per_charge_built_at_compile_time():
    """The charges' systems come from the static sizes: built as constants they would make
    XLA fold an array of N integers when it compiles (seconds at 10^5 charges)."""
    n = 4000
    x = jnp.full((n, 3), 0.5)
    q = jnp.ones(n)
    box = jnp.array([6.0, 6.0, 6.0])

    def program(sizes, cell):
        def energy(x, q, c):
            return pj.pme(x, q, c, sizes=sizes, cutoff=1.0, order=4).energy.sum()

        return jax.jit(jax.grad(energy, argnums=(0, 1, 2))).lower(x, q, cell)

    one = program(None, box).as_text()
    assert not re.search(rf"tensor<{n}(x[0-9]+)*xi(32|64)>", one), "one system's program holds a per-charge index array"
    batch = program((n // 2, n - n // 2), jnp.stack([box, box])).compile().as_text()
    constants = [m for m in re.findall(r"\[([0-9,]+)\]\{[^}]*\} constant\(", batch)
                 if np.prod([int(v) for v in m.split(",")]) >= n // 16]
    assert not constants, f"the batch's compiled program holds constants of shapes {constants}"


def test_plans_are_cached_and_bounded():
    (x, q), = systems(15, sizes=(20,), cells=CELLS[:1])
    pj.clear_plans()
    for _ in range(2):
        pj.pme(x, q, CELLS[0], **SETTINGS)
    assert pj.cached_plans() == 1
    pj.pme(x.astype(np.float32), q.astype(np.float32), CELLS[0], **SETTINGS)
    pj.pme(x[:10], q[:10], CELLS[0], **SETTINGS)
    assert pj.cached_plans() == 3
    for s in range(130):  # a cell that changes every call: the oldest plans go
        pj.pme(x, q, np.array(CELLS[0]) * (1 + 1e-3 * s), parameters=PARAMS)
    assert pj.cached_plans() == 128 + 1  # each dtype's cache keeps 128: the float32 plan stays
    pj.clear_plans()
    assert pj.cached_plans() == 0


# --- Bad input.


def test_bad_input_names_the_argument():
    (x, q), = systems(16, sizes=(20,), cells=CELLS[:1])
    cell = np.array(CELLS[0])
    with pytest.raises(ValueError, match=r"positions has shape \(20, 2\)"):
        pj.pme(x[:, :2], q, cell, **SETTINGS)
    with pytest.raises(TypeError, match="positions has dtype int"):
        pj.pme(x.astype(np.int32), q, cell, **SETTINGS)
    with pytest.raises(ValueError, match=r"charges has shape \(19,\)"):
        pj.pme(x, q[:19], cell, **SETTINGS)
    with pytest.raises(TypeError, match="charges has dtype float32"):
        pj.pme(x, jnp.asarray(q, dtype=jnp.float32), cell, **SETTINGS)
    with pytest.raises(ValueError, match=r"cell has shape \(2, 3\); it must be \(3,\)"):
        pj.pme(x, q, np.ones((2, 3)), **SETTINGS)
    with pytest.raises(ValueError, match=r"sizes = \(10, 9\)"):
        pj.pme(x, q, np.ones((2, 3)), sizes=(10, 9), **SETTINGS)
    with pytest.raises(ValueError, match=r"cell has shape \(3,\); it must be \(S, 3\) = \(2, 3\)"):
        pj.pme(x, q, cell, sizes=(10, 10), **SETTINGS)
    with pytest.raises(TypeError, match="needs cutoff="):
        pj.pme(x, q, cell)
    with pytest.raises(TypeError, match="parameters must be a pmkit.PmeParameters"):
        pj.pme(x, q, cell, parameters=(3.0, (16, 16, 16)))
    with pytest.raises(ValueError, match="tolerance"):
        pj.pme(x, q, cell, cutoff=0.7, tolerance=0.0)
    with pytest.raises(Exception, match="cell has a box length that is not positive"):
        pj.pme(x, q, -cell, **SETTINGS).energy.block_until_ready()
    # The plan's own checks come through the custom call with the plan's message.
    with pytest.raises(Exception, match="cutoff"):
        pj.pme(x, q, cell, cutoff=1.5).energy.block_until_ready()
    with pytest.raises(Exception, match="position"):
        pj.pme(np.where(np.arange(20)[:, None] == 3, np.nan, x), q, cell, **SETTINGS).energy.block_until_ready()


def test_the_handler_checks_what_it_is_given():
    """Calls made past pmkit.jax.pme's checks: the handler refuses them, naming what is wrong."""
    (x, q), = systems(17, sizes=(20,), cells=CELLS[:1])
    settings = _jax_pme._settings(None, 0.7, 1e-5, 6, 1.0, False, 0, False, (20,), False)
    attributes = settings.attributes()

    def call(positions, charges, cells, shapes, **changes):
        results = [jax.ShapeDtypeStruct(s, np.float64) for s in shapes]
        return jax.block_until_ready(jax.ffi.ffi_call("pmkit_pme", results)(
            positions, charges, cells, **{**attributes, **changes}))

    good = [(1,), (20,), (20, 3)]
    call(x, q, np.array([CELLS[0]]), good)
    with pytest.raises(Exception, match=r"charges has shape \(19,\)"):
        call(x, q[:19], np.array([CELLS[0]]), good)
    with pytest.raises(Exception, match=r"cell has shape \(3,\)"):
        call(x, q, np.array(CELLS[0]), good)
    with pytest.raises(Exception, match="sizes add up to 21"):
        call(x, q, np.array([CELLS[0]]), good, sizes=np.array([21], dtype=np.int64))
    with pytest.raises(Exception, match=r"the forces has shape \(20, 2\)"):
        call(x, q, np.array([CELLS[0]]), [(1,), (20,), (20, 2)])
    with pytest.raises(Exception, match="must all be float32 or all float64"):
        call(x, q.astype(np.float32), np.array([CELLS[0]]), good)
    with pytest.raises(Exception, match="attribute mesh"):
        call(x, q, np.array([CELLS[0]]), good, mesh=np.array([16, 16], dtype=np.int64))


# --- GPU: the same calls on JAX's GPU arrays, on its stream.


def has_gpu():
    return pmkit.built_with_cuda() and any(d.platform == "gpu" for d in jax.devices())


@pytest.mark.skipif(not has_gpu(), reason="needs a JAX GPU and a CUDA build of pmkit")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gpu_matches_the_cpu(dtype):
    x, q, cells, _ = concatenated(18, dtype)

    def run(device):
        put = lambda a: jax.device_put(a, device)  # noqa: E731
        f = jax.jit(jax.value_and_grad(lambda x, q, c: pj.pme(x, q, c, sizes=SIZES, **SETTINGS).energy.sum(),
                                       argnums=(0, 1, 2)))
        energy, grads = f(put(x), put(q), put(cells))
        out = jax.jit(lambda x, q, c: pj.pme(x, q, c, sizes=SIZES, virial=True, **SETTINGS))(put(x), put(q), put(cells))
        return [np.asarray(a, dtype=np.float64) for a in (energy, *grads, *out)]

    gpu, cpu = run(jax.devices("gpu")[0]), run(jax.devices("cpu")[0])
    # The GPU sums in another order; the cell's gradient is a difference of sums.
    tolerance = 1e-9 if dtype == "float64" else 1e-3
    for got, want in zip(gpu, cpu):
        np.testing.assert_allclose(got, want, rtol=0, atol=tolerance * max(1.0, np.abs(want).max()))
