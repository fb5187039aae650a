"""CuPy and JAX arrays: results in the caller's library, checked against NumPy. Each test
skips where its library (or, for CuPy, a GPU with a CUDA build of pmkit) is missing."""

import numpy as np
import pytest
from conftest import positions_in

import pmkit

GRID = pmkit.Grid.periodic((8, 8, 8), h=0.125)


def numpy_results(x, q):
    plan = pmkit.Plan(GRID, "mp4")
    plan.set_points(x)
    rho = plan.spread(q)
    return rho, plan.interp(rho)


def test_cupy_arrays_in_and_out():
    cupy = pytest.importorskip("cupy")
    if not pmkit.built_with_cuda() or cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("needs a GPU and a CUDA build of pmkit")
    x = positions_in(GRID, 500, np.random.default_rng(7))
    q = np.random.default_rng(8).standard_normal(500)
    plan = pmkit.Plan(GRID, "mp4", backend="cuda")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        plan.set_points(cupy.asarray(x))
        rho = plan.spread(cupy.asarray(q))
        out = cupy.empty(500)
        phi = plan.interp(rho, out=out)
    stream.synchronize()
    assert isinstance(rho, cupy.ndarray) and phi is out
    expected_rho, expected_phi = numpy_results(x, q)
    np.testing.assert_allclose(cupy.asnumpy(rho), expected_rho, atol=1e-12)
    np.testing.assert_allclose(cupy.asnumpy(phi), expected_phi, atol=1e-12)
    with pytest.raises(ValueError, match="not in GPU memory"):
        plan.spread(q)


def test_jax_arrays_in_and_out():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    x = positions_in(GRID, 200, np.random.default_rng(9))
    q = np.random.default_rng(10).standard_normal(200)
    backend = "cuda" if jax.default_backend() == "gpu" and pmkit.built_with_cuda() else "cpu"
    plan = pmkit.Plan(GRID, "mp4", backend=backend)
    plan.set_points(jnp.asarray(x))
    rho = plan.spread(jnp.asarray(q))
    phi = plan.interp(rho)
    assert isinstance(rho, jax.Array) and isinstance(phi, jax.Array)
    expected_rho, expected_phi = numpy_results(x, q)
    np.testing.assert_allclose(np.asarray(rho), expected_rho, atol=1e-12)
    np.testing.assert_allclose(np.asarray(phi), expected_phi, atol=1e-12)
