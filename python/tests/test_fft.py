"""pmkit.RealFft against numpy.fft: forward is rfftn, inverse irfftn times the size, on
odd and even, 2D and 3D shapes; batches, out=, the spectrum kept or overwritten, other
array libraries, and bad input."""

import pathlib

import numpy as np
import pytest

import pmkit

SHAPES = [(8, 8, 8), (6, 5, 7), (9, 7, 5), (1, 4, 3), (10, 12), (7, 9), (2, 1)]
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_is_rfftn_and_inverse_undoes_it(shape, rng):
    fft = pmkit.RealFft(shape)
    assert fft.shape == shape and fft.spectrum_shape == shape[:-1] + (shape[-1] // 2 + 1,)
    real = rng.standard_normal(shape)
    kept = real.copy()
    spectrum = fft.forward(real)
    assert spectrum.dtype == np.complex128 and spectrum.shape == fft.spectrum_shape
    np.testing.assert_allclose(spectrum, np.fft.rfftn(real), rtol=0, atol=1e-12 * fft.size)
    np.testing.assert_array_equal(real, kept)
    before = spectrum.copy()
    back = fft.inverse(spectrum)
    np.testing.assert_array_equal(spectrum, before)  # kept unless overwrite_spectrum=True
    np.testing.assert_allclose(back, real * fft.size, rtol=0, atol=1e-12 * fft.size)
    # A spectrum that is not a real mesh's: irfftn reads the Hermitian half the same way.
    other = rng.standard_normal(fft.spectrum_shape) + 1j * rng.standard_normal(fft.spectrum_shape)
    expected = np.fft.irfftn(other, s=shape, axes=range(len(shape))) * fft.size
    np.testing.assert_allclose(fft.inverse(other), expected, rtol=0, atol=1e-12 * fft.size)
    np.testing.assert_allclose(fft.inverse(other.copy(), overwrite_spectrum=True), expected, rtol=0,
                               atol=1e-12 * fft.size)


def test_float32_fields_and_out(rng):
    fft = pmkit.RealFft((6, 10, 12), dtype="float32", threads=1)
    assert fft.complex_dtype == "complex64"
    real = rng.standard_normal((3, 6, 10, 12)).astype(np.float32)  # three fields
    out = np.empty((3,) + fft.spectrum_shape, dtype=np.complex64)
    assert fft.forward(real, out=out) is out
    np.testing.assert_allclose(out, np.fft.rfftn(real, axes=(1, 2, 3)), rtol=0, atol=1e-5 * fft.size)
    listed = fft.inverse([out[0], out[2]])
    assert isinstance(listed, list) and len(listed) == 2
    np.testing.assert_allclose(listed[1], real[2] * fft.size, rtol=0, atol=1e-4 * fft.size)


def test_bad_input(rng):
    fft = pmkit.RealFft((4, 6, 8))
    real = rng.standard_normal(fft.shape)
    with pytest.raises(TypeError, match=r"real has dtype float32; the plan takes float64"):
        fft.forward(real.astype(np.float32))
    with pytest.raises(TypeError, match=r"spectrum has dtype complex64; the plan takes complex128"):
        fft.inverse(np.zeros(fft.spectrum_shape, dtype=np.complex64))
    with pytest.raises(ValueError, match=r"real has shape \(4, 8, 6\); the FFT's real meshes are \(4, 6, 8\)"):
        fft.forward(np.zeros((4, 8, 6)))
    with pytest.raises(ValueError, match=r"the FFT's spectra are \(4, 6, 5\)"):
        fft.inverse(np.zeros(fft.shape, dtype=complex))
    with pytest.raises(ValueError, match="contiguous"):
        fft.forward(np.zeros((4, 6, 16))[:, :, ::2])
    with pytest.raises(ValueError, match="out has shape"):
        fft.forward(real, out=np.zeros((4, 6, 4), dtype=complex))
    with pytest.raises(TypeError, match="out has dtype float64"):
        fft.forward(real, out=np.zeros(fft.spectrum_shape))
    spectrum = fft.forward(real)
    spectrum.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        fft.inverse(spectrum, overwrite_spectrum=True)
    fft.inverse(spectrum)  # read, not written
    with pytest.raises(pmkit.Error, match="overlap") as error:
        both = np.zeros(2 * fft.size)
        fft.forward(both[: fft.size].reshape(fft.shape), out=both.view(complex)[: 4 * 6 * 5].reshape(4, 6, 5))
    assert error.value.code == pmkit.ErrorCode.InvalidArgument
    with pytest.raises(ValueError, match="2D or 3D"):
        pmkit.RealFft((16,))
    with pytest.raises(TypeError, match="shape"):
        pmkit.RealFft(16)
    with pytest.raises(TypeError, match=r"shape\[1\] = 8.0"):
        pmkit.RealFft((8, 8.0))
    with pytest.raises(pmkit.Error, match=r"shape\[0\] = 0") as error:
        pmkit.RealFft((8, 0))
    assert error.value.code == pmkit.ErrorCode.InvalidArgument
    with pytest.raises(ValueError, match="backend"):
        pmkit.RealFft((8, 8), backend="gpu")
    with pytest.raises(TypeError, match="dtype"):
        pmkit.RealFft((8, 8), dtype="complex128")


def test_torch_tensors_in_and_out(rng):
    torch = pytest.importorskip("torch")
    fft = pmkit.RealFft((6, 5, 4))
    real = torch.from_numpy(rng.standard_normal(fft.shape))
    spectrum = fft.forward(real)
    assert isinstance(spectrum, torch.Tensor) and spectrum.dtype == torch.complex128
    np.testing.assert_allclose(spectrum.numpy(), np.fft.rfftn(real.numpy()), atol=1e-12 * fft.size)
    np.testing.assert_allclose(fft.inverse(spectrum).numpy(), real.numpy() * fft.size, atol=1e-12 * fft.size)


def test_jax_arrays_in_and_out(rng):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    fft = pmkit.RealFft((6, 8))
    real = rng.standard_normal(fft.shape)
    spectrum = fft.forward(jax.device_put(jnp.asarray(real), jax.devices("cpu")[0]))  # a CPU plan's input
    assert isinstance(spectrum, jax.Array)
    np.testing.assert_allclose(np.asarray(spectrum), np.fft.rfftn(real), atol=1e-12 * fft.size)
    back = fft.inverse(spectrum)  # JAX arrays are immutable: read through a copy
    assert isinstance(back, jax.Array)
    np.testing.assert_allclose(np.asarray(back), real * fft.size, atol=1e-12 * fft.size)
    with pytest.raises(ValueError, match="spectrum is read-only"):
        fft.inverse(spectrum, overwrite_spectrum=True)


def test_cuda_transforms_on_the_callers_stream(rng):
    cupy = pytest.importorskip("cupy")
    if not pmkit.built_with_cuda() or cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("needs a GPU and a CUDA build of pmkit")
    fft = pmkit.RealFft((16, 12, 10), backend="cuda")
    real = rng.standard_normal(fft.shape)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        spectrum = fft.forward(cupy.asarray(real))
        back = fft.inverse(spectrum)
        assert fft.stream == stream.ptr
    stream.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(spectrum), np.fft.rfftn(real), atol=1e-12 * fft.size)
    np.testing.assert_allclose(cupy.asnumpy(back), real * fft.size, atol=1e-12 * fft.size)
    with pytest.raises(ValueError, match="not in GPU memory"):
        fft.forward(real)


def test_docs_example_runs():
    text = DOCS.read_text()
    section = text[text.index("## Real FFTs") :]
    start = section.index("```python\n") + len("```python\n")
    namespace = {}
    exec(compile(section[start : section.index("```", start)], str(DOCS), "exec"), namespace)
    assert np.abs(namespace["phi"]).max() > 0
