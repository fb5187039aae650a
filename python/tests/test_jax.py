"""JAX: pmkit.jax's custom calls under jit, grad and vmap, against the NumPy path
(pmkit.Plan) in float64 and float32; gradients against finite differences. The tests skip
where jax is not installed; the GPU ones also where JAX has no GPU or pmkit no CUDA."""

import numpy as np
import pytest
from conftest import needs_gradients, positions_in

import pmkit

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import pmkit.jax as pj  # noqa: E402  (needs jax)

GRIDS = {
    "periodic3d": (pmkit.Grid.periodic((8, 6, 5), h=0.25), "mp4"),
    "bounded2d": (pmkit.Grid.bounded((7, 9), h=0.5, origin=-1.0), "tsc"),
    "keep3d": (pmkit.Grid((6, 5, 4), 0.5, 0.0, ("bounded", "periodic", "bounded"), ghosts="keep"), "bspline4"),
}
TOLERANCE = {"float64": 1e-12, "float32": 2e-5}


def data(grid, dtype, n=40, fields=(), seed=1):
    rng = np.random.default_rng(seed)
    x = positions_in(grid, n, rng).astype(dtype)
    return x, rng.standard_normal(fields + (n,)).astype(dtype)


def numpy_plan(grid, kernel, x, dtype):
    plan = pmkit.Plan(grid, kernel, dtype=dtype)
    plan.set_points(x)
    return plan


def close(actual, expected, dtype, factor=1.0):
    """Equal within the dtype's tolerance (times ``factor``) of the largest value."""
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=0, atol=factor * TOLERANCE[dtype] * scale)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", GRIDS)
@pytest.mark.parametrize("fields", [(), (3,)])
def test_spread_and_interp_match_the_numpy_plan(case, dtype, fields):
    grid, kernel = GRIDS[case]
    plan = pj.Plan(grid, kernel)
    x, q = data(grid, dtype, fields=fields)
    ref = numpy_plan(grid, kernel, x, dtype)
    rho = jax.jit(pj.spread, static_argnums=0)(plan, x, q)
    assert rho.dtype == dtype and rho.shape == fields + plan.mesh_shape
    close(rho, ref.spread(q), dtype)
    phi = jax.jit(pj.interp, static_argnums=0)(plan, x, rho)
    assert phi.shape == q.shape
    close(phi, ref.interp(np.asarray(rho)), dtype)


@needs_gradients
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", GRIDS)
def test_gradients_match_the_numpy_plan(case, dtype):
    grid, kernel = GRIDS[case]
    plan = pj.Plan(grid, kernel)
    x, _ = data(grid, dtype)
    ref = numpy_plan(grid, kernel, x, dtype)
    mesh = np.random.default_rng(2).standard_normal((2,) + plan.mesh_shape).astype(dtype)
    g = jax.jit(pj.interp_gradient, static_argnums=0)(plan, x, mesh)
    assert g.shape == (2,) + x.shape
    close(g, ref.interp_gradient(mesh), dtype)
    v = np.random.default_rng(3).standard_normal(x.shape).astype(dtype)
    close(jax.jit(pj.spread_gradient, static_argnums=0)(plan, x, v), ref.spread_gradient(v), dtype)


def test_a_pmkit_plan_is_taken():
    grid, kernel = GRIDS["periodic3d"]
    x, q = data(grid, "float64")
    ref = numpy_plan(grid, kernel, x, "float64")
    close(pj.spread(ref, x, q), ref.spread(q), "float64")
    assert pj.Plan.of(ref) == pj.Plan(grid, kernel) and hash(pj.Plan.of(ref)) == hash(pj.Plan(grid, kernel))


def test_plans_are_cached_per_dtype_and_count():
    grid, kernel = GRIDS["periodic3d"]
    plan = pj.Plan(grid, kernel)
    pj.clear_plans()
    assert pj.cached_plans() == 0
    for n, dtype in [(40, "float64"), (40, "float64"), (41, "float64"), (40, "float32")]:
        x, q = data(grid, dtype, n=n)
        rho = pj.spread(plan, x, q)
        pj.interp(plan, x, rho)  # the same plan as spread's
    assert pj.cached_plans() == 3
    pj.clear_plans()
    assert pj.cached_plans() == 0


# --- vmap: the batch goes to one custom call, positions shared or batched.


def loop(grid, kernel, xs, qs, method):
    """The NumPy path per batch entry: xs (B, N, D) or (N, D), qs (B, ...)."""
    results = []
    for b in range(len(qs)):
        ref = numpy_plan(grid, kernel, xs[b] if xs.ndim == 3 else xs, "float64")
        results.append(getattr(ref, method)(qs[b]))
    return np.stack(results)


@pytest.mark.parametrize("batched_positions", [False, True])
def test_vmap_spread(batched_positions):
    grid, kernel = GRIDS["periodic3d"]
    plan = pj.Plan(grid, kernel)
    x, qs = data(grid, "float64", fields=(4,))
    xs = np.stack([positions_in(grid, 40, np.random.default_rng(s)) for s in range(4)]) if batched_positions else x
    f = jax.jit(jax.vmap(lambda x, q: pj.spread(plan, x, q), in_axes=(0 if batched_positions else None, 0)))
    close(f(xs, qs), loop(grid, kernel, xs, qs, "spread"), "float64")


def test_vmap_is_one_custom_call():
    grid, kernel = GRIDS["periodic3d"]
    plan = pj.Plan(grid, kernel)
    x, qs = data(grid, "float64", fields=(4,))
    text = str(jax.make_jaxpr(jax.vmap(lambda q: pj.spread(plan, x, q)))(qs))
    # One ffi_call of the whole batch, (4, 1, *mesh_shape), and no loop around it.
    assert text.count("ffi_call[") == 1 and "while[" not in text and "scan[" not in text
    assert "f64[4,1,5,6,8] = ffi_call" in text


def test_vmap_nested_and_off_axis():
    grid, kernel = GRIDS["bounded2d"]
    plan = pj.Plan(grid, kernel)
    x, _ = data(grid, "float64")
    meshes = np.random.default_rng(4).standard_normal((3, 2) + plan.mesh_shape)
    # The outer batch on axis 1 of the meshes, the inner on axis 0: results (2, 3, N).
    f = jax.vmap(jax.vmap(lambda m: pj.interp(plan, x, m)), in_axes=1)
    expected = loop(grid, kernel, x, meshes.reshape((6,) + plan.mesh_shape), "interp").reshape(3, 2, -1)
    close(jax.jit(f)(meshes), expected.transpose(1, 0, 2), "float64")


def test_vmap_of_positions_only():
    grid, kernel = GRIDS["periodic3d"]
    plan = pj.Plan(grid, kernel)
    _, q = data(grid, "float64")
    xs = np.stack([positions_in(grid, 40, np.random.default_rng(10 + s)) for s in range(3)])
    result = jax.vmap(lambda x: pj.spread(plan, x, q))(xs)
    close(result, loop(grid, kernel, xs, np.stack([q] * 3), "spread"), "float64")


# --- Gradients: finite differences, adjoints, and what is not differentiable.


def energy(plan, x, q):
    """A PME-like energy: half the values times the interpolated spread of them."""
    return 0.5 * jnp.vdot(q, pj.interp(plan, x, pj.spread(plan, x, q)))


@needs_gradients
@pytest.mark.parametrize("case", ["periodic3d", "keep3d"])
def test_grad_matches_finite_differences(case):
    grid, kernel = GRIDS[case]
    plan = pj.Plan(grid, kernel)
    x, q = data(grid, "float64", n=12)
    if grid.boundary[0] == "bounded":  # finite differences stay inside the closed box
        x = np.clip(x, 0.05, 2.95)
    check_grads(lambda x, q: energy(plan, x, q), (x, q), order=1, modes=("rev",), eps=1e-6)
    mesh = np.random.default_rng(5).standard_normal(plan.mesh_shape)
    w = np.random.default_rng(6).standard_normal(x.shape)
    check_grads(lambda x, m: jnp.vdot(q, pj.interp(plan, x, m)), (x, mesh), order=1, modes=("rev",), eps=1e-6)
    check_grads(lambda m: jnp.vdot(w, pj.interp_gradient(plan, x, m)), (mesh,), order=1, modes=("rev",))
    check_grads(lambda v: jnp.vdot(mesh, pj.spread_gradient(plan, x, v)), (w,), order=1, modes=("rev",))


@needs_gradients
def test_forces_are_minus_the_energy_gradient():
    grid, kernel = GRIDS["periodic3d"]
    plan = pj.Plan(grid, kernel)
    x, q = data(grid, "float64", n=50)
    forces = -jax.jit(jax.grad(energy, argnums=1), static_argnums=0)(plan, x, q)
    # The same from the plan's calls: -q_p * grad(phi)(x_p), phi = interp of the spread charges.
    ref = numpy_plan(grid, kernel, x, "float64")
    expected = -q[:, None] * ref.interp_gradient(ref.spread(q))
    close(forces, expected, "float64")


@needs_gradients
def test_spread_backward_bins_once():
    """spread's derivative in values and positions: interp and interp_gradient of the
    cotangent in one custom call, on one binning."""
    grid, kernel = GRIDS["periodic3d"]
    plan = pj.Plan(grid, kernel)
    x, q = data(grid, "float64")
    text = str(jax.make_jaxpr(jax.grad(lambda x, q: jnp.sum(pj.spread(plan, x, q) ** 2), argnums=(0, 1)))(x, q))
    assert [line.split("=")[1] for line in text.splitlines() if "target_name=" in line] == [
        "pmkit_spread", "pmkit_interp_both"]


@needs_gradients
def test_grad_under_vmap():
    grid, kernel = GRIDS["periodic3d"]
    plan = pj.Plan(grid, kernel)
    xs = np.stack([positions_in(grid, 20, np.random.default_rng(20 + s)) for s in range(3)])
    qs = np.random.default_rng(7).standard_normal((3, 20))
    batched = jax.jit(jax.vmap(jax.grad(lambda x, q: energy(plan, x, q))))(xs, qs)
    single = [jax.grad(lambda x, q: energy(plan, x, q))(xs[b], qs[b]) for b in range(3)]
    close(batched, np.stack(single), "float64")


@needs_gradients
@pytest.mark.parametrize("name", ["interp_gradient", "spread_gradient"])
def test_gradient_ops_are_not_differentiable_in_the_positions(name):
    grid, kernel = GRIDS["periodic3d"]
    plan = pj.Plan(grid, kernel)
    x, _ = data(grid, "float64")
    operand = np.ones(plan.mesh_shape) if name == "interp_gradient" else np.ones(x.shape)
    op = getattr(pj, name)
    with pytest.raises(NotImplementedError, match="second derivatives"):
        jax.grad(lambda x: op(plan, x, operand).sum())(x)
    # With respect to the operand only, it is.
    assert jax.grad(lambda v: op(plan, x, v).sum())(operand).shape == operand.shape


# --- Bad input: errors that name the argument.


def test_bad_input_names_the_argument():
    grid, kernel = GRIDS["periodic3d"]
    plan = pj.Plan(grid, kernel)
    x, q = data(grid, "float64")
    with pytest.raises(ValueError, match=r"positions has shape \(40, 2\); it must be \(N, 3\)"):
        pj.spread(plan, x[:, :2], q)
    with pytest.raises(ValueError, match=r"values has shape \(39,\)"):
        pj.spread(plan, x, q[:39])
    with pytest.raises(TypeError, match="values has dtype float32"):
        pj.spread(plan, x, q.astype(np.float32))
    with pytest.raises(TypeError, match="positions has dtype int"):
        pj.spread(plan, x.astype(np.int32), q)
    with pytest.raises(ValueError, match=r"meshes has shape \(8, 6, 5\)"):
        pj.interp(plan, x, np.zeros((8, 6, 5)))
    with pytest.raises(ValueError, match=r"vectors has shape \(40,\)"):
        pj.spread_gradient(plan, x, q)
    with pytest.raises(TypeError, match="plan must be a pmkit.jax.Plan or a pmkit.Plan"):
        pj.spread(grid, x, q)
    with pytest.raises(pmkit.Error, match="kernel name = 'nonsense'"):
        pj.Plan(grid, "nonsense")


def test_the_handler_checks_what_it_is_given():
    """Calls made past pmkit.jax's own checks: the handler refuses them with an error
    naming what is wrong, rather than reading out of bounds or aborting."""
    grid, kernel = GRIDS["periodic3d"]
    attributes = pj.Plan(grid, kernel)._attributes()
    x, q = data(grid, "float64")

    def call(name, operand, shape, **changes):
        result = jax.ShapeDtypeStruct(shape, operand.dtype)
        # Waited for: on a GPU the handler's error comes with the result.
        return jax.block_until_ready(jax.ffi.ffi_call(f"pmkit_{name}", result)(x, operand, **{**attributes, **changes}))

    with pytest.raises(Exception, match="kernel name = 'nonsense'"):
        call("spread", q[None], (1, 5, 6, 8), kernel="nonsense")
    with pytest.raises(Exception, match=r"the input has shape \(1, 39\)"):
        call("spread", q[None, :39], (1, 5, 6, 8))
    with pytest.raises(Exception, match=r"the result has shape \(1, 5, 6, 7\)"):
        call("spread", q[None], (1, 5, 6, 7))
    with pytest.raises(Exception, match="must all be float32 or all float64"):
        call("spread", q[None].astype(np.float32), (1, 5, 6, 8))
    with pytest.raises(Exception, match="attribute threads"):
        call("spread", q[None], (1, 5, 6, 8), threads=1.5)


def test_a_rejected_position_is_an_error():
    grid, kernel = GRIDS["bounded2d"]
    plan = pj.Plan(grid, kernel)
    x, q = data(grid, "float64")
    x[7, 0] = 100.0
    with pytest.raises(Exception, match="pmkit.jax.spread: .*position") as raised:
        jax.jit(pj.spread, static_argnums=0)(plan, x, q).block_until_ready()
    assert "7" in str(raised.value)
    pj.clear_plans()


# --- GPU: the same calls on JAX's GPU arrays, on its stream.


def has_gpu():
    return pmkit.built_with_cuda() and any(d.platform == "gpu" for d in jax.devices())


@pytest.mark.skipif(not has_gpu(), reason="needs a JAX GPU and a CUDA build of pmkit")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gpu_matches_the_numpy_plan(dtype):
    grid, kernel = GRIDS["periodic3d"]
    plan = pj.Plan(grid, kernel)
    x, q = data(grid, dtype, n=2000, fields=(2,))
    ref = numpy_plan(grid, kernel, x, dtype)
    gpu = jax.devices("gpu")[0]
    xg, qg = jax.device_put(x, gpu), jax.device_put(q, gpu)
    rho = jax.jit(pj.spread, static_argnums=0)(plan, xg, qg)
    assert rho.devices() == {gpu}
    # The GPU sums a node's contributions in another order than the CPU.
    close(rho, ref.spread(q), dtype, factor=10)
    close(jax.jit(pj.interp, static_argnums=0)(plan, xg, rho), ref.interp(np.asarray(rho)), dtype, factor=10)
    grad = jax.jit(jax.grad(lambda x, q: energy(plan, x, q)))
    cpu = jax.devices("cpu")[0]
    on_cpu = grad(jax.device_put(x, cpu), jax.device_put(q[0], cpu))
    close(grad(xg, qg[0]), np.asarray(on_cpu), dtype, factor=10)


# --- PME's mesh part against a direct Ewald sum.

BOX = (2.0, 2.2, 1.8)


def ewald_reciprocal(x, q, alpha, extent=12):
    """The reciprocal Ewald energy and its gradients in the positions and the charges,
    summed directly over the wave vectors m / box with |m_d| <= extent."""
    m = np.stack(np.meshgrid(*[np.arange(-extent, extent + 1)] * 3, indexing="ij"), -1).reshape(-1, 3)
    mu = m[np.any(m != 0, axis=1)] / np.array(BOX)
    mu2 = (mu**2).sum(1)
    g = np.exp(-np.pi**2 * mu2 / alpha**2) / mu2 / (2 * np.pi * np.prod(BOX))
    phase = np.exp(2j * np.pi * mu @ x.T)  # (wave vectors, particles)
    s = phase @ q
    energy = (g * np.abs(s) ** 2).sum()
    d_q = 2 * np.real(np.conj(s)[:, None] * phase).T @ g
    d_x = np.einsum("k,kn,kd->nd", g, 2 * np.real(np.conj(s)[:, None] * 2j * np.pi * phase), mu) * q[:, None]
    return energy, d_x, d_q


def charges(n, seed):
    rng = np.random.default_rng(seed)
    return rng.random((n, 3)) * np.array(BOX), rng.standard_normal(n)


@needs_gradients
@pytest.mark.parametrize("order, mesh, tolerance", [(4, (32, 32, 32), 2e-3), (6, (32, 36, 30), 2e-5)])
def test_pme_reciprocal_energy_and_gradients_match_the_ewald_sum(order, mesh, tolerance):
    x, q = charges(20, 30)
    energy, d_x, d_q = ewald_reciprocal(x, q, alpha=3.0)
    f = jax.jit(lambda x, q: pj.pme_reciprocal_energy(x, q, BOX, alpha=3.0, mesh=mesh, order=order))
    e = f(x, q)
    gx, gq = jax.grad(f, argnums=(0, 1))(x, q)
    assert abs(float(e) - energy) <= tolerance * abs(energy)
    assert np.abs(np.asarray(gx) - d_x).max() <= 10 * tolerance * np.abs(d_x).max()
    assert np.abs(np.asarray(gq) - d_q).max() <= 10 * tolerance * np.abs(d_q).max()


def test_ewald_energy_does_not_depend_on_alpha():
    """Real-space pairs (direct, nearest images) + the mesh part + the self and background
    energies: the Ewald energy of a charged system, the same at two splittings."""
    from scipy.special import erfc

    x, q = charges(16, 31)
    shifts = np.stack(np.meshgrid(*[np.arange(-1, 2)] * 3, indexing="ij"), -1).reshape(-1, 3) * np.array(BOX)

    def total(alpha):
        d = x[:, None, None, :] - x[None, :, None, :] + shifts[None, None]
        r = np.linalg.norm(d, axis=-1)
        pair = np.where(r > 0, erfc(alpha * r) / np.where(r > 0, r, 1), 0.0)
        real = 0.5 * np.einsum("i,j,ijs->", q, q, pair)
        mesh = pj.pme_reciprocal_energy(x, q, BOX, alpha=alpha, mesh=(48, 48, 48), order=6)
        return real + float(mesh) + float(pj.ewald_self_energy(q, BOX, alpha=alpha))

    # The mesh's discretisation error at alpha 5 is about 1e-6 of the energy; a self or
    # background term that were wrong would move it by about 1 in 4.
    assert abs(total(4.0) - total(5.0)) <= 1e-5 * abs(total(4.0))


@needs_gradients
def test_pme_under_vmap_is_per_system():
    systems = [charges(12, 40 + s) for s in range(3)]
    xs, qs = (np.stack(a) for a in zip(*systems))
    f = jax.vmap(jax.value_and_grad(lambda x, q: pj.pme_reciprocal_energy(x, q, BOX, alpha=3.0, mesh=(24, 24, 24))))
    energies, forces = jax.jit(f)(xs, qs)
    for b in range(3):
        e, g = jax.value_and_grad(lambda x: pj.pme_reciprocal_energy(x, qs[b], BOX, alpha=3.0, mesh=(24, 24, 24)))(xs[b])
        close(energies[b], float(e), "float64")
        close(forces[b], np.asarray(g), "float64")


@needs_gradients
def test_a_loss_on_forces_differentiates_in_the_charges():
    """A model's charges q(theta) trained on forces: the gradient of a loss on
    -grad_x E goes through the backward pass again, in the charges (not the positions)."""
    x, w = charges(10, 50)

    def loss(theta):
        q = jnp.tanh(theta * w)
        e = lambda x, q: pj.pme_reciprocal_energy(x, q, BOX, alpha=3.0, mesh=(16, 16, 16))
        return jnp.sum(jax.grad(e)(x, q) ** 2) + e(x, q)

    check_grads(loss, (0.7,), order=1, modes=("rev",), eps=1e-5)
