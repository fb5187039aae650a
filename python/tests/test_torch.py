"""PyTorch: tensors in and out without copies, streams, autograd (gradcheck) and
torch.compile. The CPU tests run wherever torch is installed, the CUDA ones on a GPU with
a CUDA build of pmkit."""

import numpy as np
import pytest
from conftest import has_gradients, positions_in
from reference import Reference

import pmkit

torch = pytest.importorskip("torch")
import pmkit.torch as pt  # noqa: E402  (needs torch)

DEVICES = ["cpu"]
if torch.cuda.is_available() and pmkit.built_with_cuda():
    DEVICES.append("cuda")

GRID = pmkit.Grid.periodic((8, 6, 5), h=0.25)


def make_plan(device, dtype="float64", grid=GRID, kernel="mp4"):
    # One CPU thread: gradcheck makes hundreds of small calls.
    return pmkit.Plan(grid, kernel, dtype=dtype, backend=device, threads=1)


def positions(device, n=30, dtype=torch.float64, grid=GRID, seed=3):
    x = positions_in(grid, n, np.random.default_rng(seed))
    return torch.tensor(x, dtype=dtype, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_tensors_in_tensors_out(device):
    plan = make_plan(device)
    x = positions(device)
    plan.set_points(x)
    q = torch.randn(30, dtype=torch.float64, device=device)
    rho = plan.spread(q)
    assert isinstance(rho, torch.Tensor) and rho.device == q.device and rho.shape == plan.mesh_shape
    ref = Reference(GRID, "mp4", x.cpu().numpy())
    np.testing.assert_allclose(rho.cpu().numpy(), ref.spread(q.cpu().numpy(), plan.mesh_shape), atol=1e-12)
    phi = plan.interp(rho)
    np.testing.assert_allclose(phi.cpu().numpy(), ref.interp(rho.cpu().numpy(), plan.mesh_shape), atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_out_is_the_same_tensor(device):
    plan = make_plan(device)
    plan.set_points(positions(device))
    out = torch.empty(plan.mesh_shape, dtype=torch.float64, device=device)
    pointer = out.data_ptr()
    result = plan.spread(torch.ones(30, dtype=torch.float64, device=device), out=out)
    assert result is out and out.data_ptr() == pointer
    assert out.sum().item() == pytest.approx(30)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_tensors(device):
    plan = make_plan(device)
    plan.set_points(positions(device))
    with pytest.raises(TypeError, match="props has dtype float32"):
        plan.spread(torch.ones(30, device=device))
    with pytest.raises(TypeError, match="requires grad"):
        plan.spread(torch.ones(30, dtype=torch.float64, device=device, requires_grad=True))
    if device == "cuda":
        with pytest.raises(ValueError, match="props is not in GPU memory"):
            plan.spread(torch.ones(30, dtype=torch.float64))
    else:
        with pytest.raises(ValueError, match="not contiguous"):
            plan.interp(torch.zeros(plan.mesh_shape[::-1], dtype=torch.float64).permute(2, 1, 0))


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_spread_and_interp(device):
    plan = make_plan(device, kernel="bspline4")
    x = positions(device, n=6).requires_grad_()
    q = torch.randn(2, 6, dtype=torch.float64, device=device, requires_grad=True)
    mesh = torch.randn(plan.mesh_shape, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q: pt.spread(plan, x.detach(), q), (q,))
    assert torch.autograd.gradcheck(lambda m: pt.interp(plan, x.detach(), m), (mesh,))


@pytest.fixture
def gradients(monkeypatch):
    """The gradient pair of the build, or, where the C++ library has none yet, the float64
    reference in its place (on the CPU), so that the autograd formulas are checked either way."""
    if has_gradients():
        return DEVICES

    def reference(name):
        def call(plan, values):
            x = plan._points_like.detach().cpu().numpy()
            ref = Reference(plan.grid, plan.kernel.name, x)
            return torch.from_numpy(getattr(ref, name)(values.detach().numpy(), plan.mesh_shape))

        return call

    monkeypatch.setattr(pmkit.Plan, "interp_gradient", reference("interp_gradient"))
    monkeypatch.setattr(pmkit.Plan, "spread_gradient", reference("spread_gradient"))
    return ["cpu"]


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_with_respect_to_positions(device, gradients):
    if device not in gradients:
        pytest.skip("the C++ library has no gradient pair on this device")
    plan = make_plan(device, kernel="bspline4")
    x = positions(device, n=6).requires_grad_()
    q = torch.randn(2, 6, dtype=torch.float64, device=device, requires_grad=True)
    mesh = torch.randn(plan.mesh_shape, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, q: pt.spread(plan, x, q), (x, q), atol=1e-6)
    assert torch.autograd.gradcheck(lambda x, m: pt.interp(plan, x, m), (x, mesh), atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_gradient_pair(device, gradients):
    if device not in gradients:
        pytest.skip("the C++ library has no gradient pair on this device")
    plan = make_plan(device, kernel="bspline4")
    x = positions(device, n=6)
    mesh = torch.randn(plan.mesh_shape, dtype=torch.float64, device=device, requires_grad=True)
    v = torch.randn(2, 6, 3, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda m: pt.interp_gradient(plan, x, m), (mesh,))
    assert torch.autograd.gradcheck(lambda v: pt.spread_gradient(plan, x, v), (v,))
    with pytest.raises(NotImplementedError, match="second derivatives"):
        pt.interp_gradient(plan, x.clone().requires_grad_(), mesh).sum().backward()


def test_positions_are_binned_per_call_or_reused_on_request():
    plan = make_plan("cpu")
    x = positions("cpu")
    q = torch.ones(30, dtype=torch.float64)
    pt.spread(plan, x, q)
    token = plan._points_token
    pt.interp(plan, x, torch.zeros(plan.mesh_shape, dtype=torch.float64), reuse_binning=True)
    assert plan._points_token is token
    x.data.add_(0.01)  # unseen by the version counter: binned again all the same by default
    moved = pt.spread(plan, x, q)
    fresh = make_plan("cpu")
    fresh.set_points(x)
    torch.testing.assert_close(moved, fresh.spread(q))
    token = plan._points_token
    x.add_(0.01)  # counted: reuse_binning bins again
    pt.spread(plan, x, q, reuse_binning=True)
    assert plan._points_token != token


def test_torch_compile_takes_the_operators_without_a_graph_break():
    plan = make_plan("cpu")
    x = positions("cpu")
    q = torch.randn(30, dtype=torch.float64, requires_grad=True)

    def energy(x, q):
        rho = pt.spread(plan, x, q)
        return 0.5 * (pt.interp(plan, x, rho) * q).sum()

    compiled = torch.compile(energy, fullgraph=True, backend="eager")
    expected = energy(x, q)
    (expected_grad,) = torch.autograd.grad(expected, q)
    actual = compiled(x, q)
    torch.testing.assert_close(actual, expected)
    (grad,) = torch.autograd.grad(actual, q)
    torch.testing.assert_close(grad, expected_grad)


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs a GPU and a CUDA build of pmkit")
def test_results_follow_the_current_stream():
    # Work queued on a side stream before the call, and the call itself, run in order on
    # that stream: the mesh is written after the charges are, and read after it.
    plan = make_plan("cuda")
    x = positions("cuda", n=1 << 16, seed=5)
    plan.set_points(x)
    side = torch.cuda.Stream()
    q = torch.empty(1 << 16, dtype=torch.float64, device="cuda")
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # keeps the stream busy so that disorder would show
        q.fill_(2.0)
        rho = plan.spread(q)
        total = rho.sum()
    side.synchronize()
    assert total.item() == pytest.approx(2.0 * (1 << 16))


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs a GPU and a CUDA build of pmkit")
def test_the_plan_follows_the_current_stream_from_call_to_call():
    # A call on the default stream, then one on a side stream that reads the first's
    # result (after side.wait_stream, as torch asks of a tensor made on another stream):
    # the plan moves with the caller, and the second call sees the first's mesh.
    plan = make_plan("cuda")
    n = 1 << 16
    plan.set_points(positions("cuda", n=n, seed=6))
    assert plan.stream == torch.cuda.current_stream().cuda_stream
    q = torch.ones(n, dtype=torch.float64, device="cuda")
    side = torch.cuda.Stream()
    torch.cuda._sleep(50_000_000)  # the default stream busy: a side call that did not wait would read zeros
    rho = plan.spread(q)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        phi = plan.interp(rho)
        assert plan.stream == side.cuda_stream
        total = phi.sum()
    side.synchronize()
    torch.cuda.synchronize()
    expected = plan.interp(rho).sum()  # on the default stream, with nothing pending
    assert plan.stream == torch.cuda.current_stream().cuda_stream
    assert total.item() == pytest.approx(expected.item(), rel=1e-12)
    assert total.item() > 0

def test_torch_dtypes_make_plans_of_their_precision():
    assert pmkit.Plan(GRID, dtype=torch.float32).dtype == "float32"
    assert pmkit.Plan(GRID, dtype=torch.float).dtype == "float32"
    assert pmkit.Plan(GRID, dtype=torch.float64).dtype == "float64"
    assert pmkit.Plan(GRID, dtype=torch.double).dtype == "float64"
    with pytest.raises(TypeError, match=r"dtype = torch.float16: pmkit plans are float32 or float64"):
        pmkit.Plan(GRID, dtype=torch.float16)
