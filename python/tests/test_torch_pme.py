"""pmkit.torch.pme: batched energies and potentials against the float64 Ewald sum,
gradcheck for positions, charges and cell, the virial convention, plan reuse,
torch.compile, and bad input."""

import numpy as np
import pytest
from ewald_reference import ewald, random_system

import pmkit

torch = pytest.importorskip("torch")
import pmkit.torch as pt  # noqa: E402  (needs torch)

DEVICES = ["cpu"]
if torch.cuda.is_available() and pmkit.built_with_cuda():
    DEVICES.append("cuda")

CELLS = [(1.6, 1.7, 1.5), (1.5, 1.5, 1.9), (1.8, 1.6, 1.6)]
SIZES = [40, 25, 33]


def batch_of(rng, device, dtype=torch.float64, sizes=SIZES, cells=CELLS):
    """Systems of the given sizes and cells as one batch, with their Ewald sums."""
    xs, qs, refs = [], [], []
    for n, cell in zip(sizes, cells):
        x, q = random_system(rng, n, cell, net=0.3)
        xs.append(x)
        qs.append(q)
        refs.append(ewald(x, q, cell))
    t = lambda a: torch.tensor(np.concatenate(a), dtype=dtype, device=device)  # noqa: E731
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes)).to(device)
    return t(xs), t(qs), torch.tensor(cells, dtype=dtype, device=device), batch, refs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_batch_matches_ewald_sums(rng, device, dtype):
    x, q, cell, batch, refs = batch_of(rng, device, dtype)
    pme = pt.Pme(cutoff=0.7, tolerance=1e-5, order=6, threads=1)
    x.requires_grad_()
    assert pme(x, q, cell, batch).virial is None  # not asked, the cell not requiring grad
    out = pme(x, q, cell, batch, virial=True)
    assert out.energy.shape == (3,) and out.energy.dtype == dtype and out.potential.shape == (98,)
    (forces,) = torch.autograd.grad(-out.energy.sum(), x)
    tolerance = 1e-4 if dtype == torch.float64 else 1e-3
    start = 0
    for s, (energy, f, phi, w) in enumerate(refs):
        end = start + len(phi)
        scale = np.abs(phi * q[start:end].detach().cpu().numpy()).sum()
        assert abs(out.energy[s].item() - energy) <= tolerance * scale
        got = forces[start:end].cpu().numpy()
        assert np.linalg.norm(got - f) <= tolerance * np.linalg.norm(f)
        np.testing.assert_allclose(out.forces[start:end].cpu().numpy(), got, rtol=1e-5, atol=1e-6)
        assert np.linalg.norm(out.potential[start:end].detach().cpu().numpy() - phi) <= tolerance * np.linalg.norm(phi)
        assert np.abs(out.virial[s].cpu().numpy() - w).max() <= tolerance * np.abs(w).max()
        start = end


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_positions_charges_cell(rng, device):
    # Two small systems; the potentials' gradients take the polarisation path.
    x, q, cell, batch, _ = batch_of(rng, device, sizes=[6, 5], cells=CELLS[:2])
    pme = pt.Pme(cutoff=0.7, tolerance=1e-3, order=4, threads=1)
    weights = torch.randn(11, dtype=torch.float64, device=device)

    def f(x, q, cell):
        out = pme(x, q, cell, batch)
        return out.energy, (out.potential * weights).sum()

    inputs = (x.requires_grad_(), q.requires_grad_(), cell.requires_grad_())
    # On the GPU the spread adds with atomics, so a repeated backward differs by rounding.
    nondet = 1e-10 if device == "cuda" else 0.0
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4, nondet_tol=nondet)


@pytest.mark.parametrize("device", DEVICES)
def test_virial_is_the_strain_derivative(rng, device):
    # -dE/de_aa = W_aa: scaling cell and positions together (autograd through both).
    x, q, cell, batch, _ = batch_of(rng, device, sizes=[30], cells=CELLS[:1])
    pme = pt.Pme(cutoff=0.7, tolerance=1e-4, threads=1)
    strain = torch.zeros(3, dtype=torch.float64, device=device, requires_grad=True)
    out = pme(x * (1 + strain), q, cell * (1 + strain), batch)
    (derivative,) = torch.autograd.grad(out.energy.sum(), strain)
    np.testing.assert_allclose(-derivative.cpu().numpy(), out.virial[0, :3].cpu().numpy(), rtol=1e-8)


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs a GPU and pmkit's CUDA backend")
@pytest.mark.parametrize("batched", [True, False])
def test_a_steady_step_waits_for_the_device_once(rng, batched):
    # Energy and forces by autograd, on plans already made: the value checks' one read
    # (with the cells and the systems' sizes) is the step's only synchronising call of torch's.
    import warnings

    x, q, cell, batch, _ = batch_of(rng, "cuda", torch.float32)
    if not batched:
        x, q, cell, batch = x[:40], q[:40], cell[0], None
    pme = pt.Pme(cutoff=0.7, tolerance=1e-4, order=4)

    def step():
        xg = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(pme(xg, q, cell, batch).energy.sum(), xg)
        return g

    step()
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step()
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    waits = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
    assert len(waits) == 1, waits


def test_plans_are_cached(rng):
    x, q, cell, batch, _ = batch_of(rng, "cpu")
    pme = pt.Pme(cutoff=0.7, tolerance=1e-4, threads=1)
    first = pme(x, q, cell, batch).energy
    plans = dict(pme._plans)
    assert len(plans) == 3
    again = pme(x, q, cell, batch).energy
    assert all(pme._plans[k] is p for k, p in plans.items())
    torch.testing.assert_close(first, again, rtol=1e-13, atol=0)
    # One system alone, without a batch index, is the batch's first.
    alone = pme(x[:40], q[:40], cell[0]).energy
    torch.testing.assert_close(alone[0], first[0], rtol=1e-13, atol=0)


def test_reciprocal_only(rng):
    x, q, cell, batch, _ = batch_of(rng, "cpu")
    whole = pt.pme(x, q, cell, batch, cutoff=0.7, tolerance=1e-4).energy
    rec = pt.pme(x, q, cell, batch, cutoff=0.7, tolerance=1e-4, reciprocal_only=True).energy
    assert (whole - rec).abs().min() > 1e-3


def test_torch_compile_fullgraph(rng):
    # The forward and backward graphs traced (aot_eager: the fake kernels and the
    # autograd formulas under tracing), with gradients through the energy and the potentials.
    x, q, cell, batch, _ = batch_of(rng, "cpu")
    pme = pt.Pme(cutoff=0.7, tolerance=1e-4, threads=1)

    def loss(x, q):
        out = pme(x, q, cell, batch)
        return out.energy.sum() + out.potential.square().sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    grads = []
    for f in (compiled, loss):
        xg, qg = x.clone().requires_grad_(), q.clone().requires_grad_()
        value = f(xg, qg)
        value.backward()
        grads.append((value.detach(), xg.grad, qg.grad))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_loss_on_forces_reaches_the_charges(rng, device, monkeypatch):
    # Forces by autograd with create_graph=True, then their gradient in the charges:
    # gradcheck of q -> forces (finite differences of the forces themselves). The warning
    # comes once a process: made to come again for each device.
    import pmkit._torch_pme as torch_pme

    monkeypatch.setattr(torch_pme, "_warned_hessian", False)
    x, q, cell, batch, _ = batch_of(rng, device, sizes=[7, 6], cells=CELLS[:2])
    pme = pt.Pme(cutoff=0.7, tolerance=1e-3, order=4, threads=1)
    x.requires_grad_()

    def forces(q):
        energy = pme(x, q, cell, batch).energy.sum()
        (g,) = torch.autograd.grad(energy, x, create_graph=True)
        return -g

    q.requires_grad_()
    # The forces the evaluation returns: differentiable in the charges without create_graph.
    assert torch.autograd.gradcheck(
        lambda q: pme(x.detach(), q, cell, batch).forces, (q,), eps=1e-6, atol=1e-6, rtol=1e-5
    )
    with pytest.warns(UserWarning, match="Hessian"):
        assert torch.autograd.gradcheck(forces, (q,), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_charge_gradient_of_forces_after_the_plans_bin_other_positions(rng):
    # The backward pass reuses the forward's binning only while the plans still hold it.
    x, q, cell, batch, _ = batch_of(rng, "cpu", sizes=[7, 6], cells=CELLS[:2])
    pme = pt.Pme(cutoff=0.7, tolerance=1e-3, order=4, threads=1)
    weights = torch.randn(13, 3, dtype=torch.float64)
    grads = []
    for moved in (False, True):
        qg = q.clone().requires_grad_()
        loss = (pme(x, qg, cell, batch).forces * weights).sum()
        if moved:
            pme(torch.remainder(x + 0.3, cell[batch]), q, cell, batch)
        grads.append(torch.autograd.grad(loss, qg)[0])
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=0)


def test_other_second_derivatives_are_refused(rng):
    x, q, cell, batch, _ = batch_of(rng, "cpu")
    q.requires_grad_()
    e = pt.pme(x, q, cell, batch, cutoff=0.7).energy.sum()
    (g,) = torch.autograd.grad(e, q, create_graph=True)
    with pytest.raises(NotImplementedError, match="second derivative is not supported"):
        torch.autograd.grad(g.square().sum(), q)


def test_bad_input(rng):
    x, q, cell, batch, _ = batch_of(rng, "cpu")
    pme = pt.Pme(cutoff=0.7)
    with pytest.raises(TypeError, match="charges has dtype"):
        pme(x, q.float(), cell, batch)
    with pytest.raises(TypeError, match="positions has dtype"):
        pme(x.half(), q.half(), cell.half(), batch)
    with pytest.raises(ValueError, match="charges has shape"):
        pme(x, q[:-1], cell, batch)
    with pytest.raises(ValueError, match="batch has shape"):
        pme(x, q, cell, batch[:-1])
    with pytest.raises(TypeError, match="batch must be"):
        pme(x, q, cell, batch.double())
    with pytest.raises(ValueError, match="batch is None"):
        pme(x, q, cell)
    with pytest.raises(ValueError, match="outside \\[0, 3\\)"):
        pme(x, q, cell, batch + 1)
    with pytest.raises(ValueError, match="not sorted"):
        pme(x, q, cell, batch.flip(0))
    bad = x.clone()
    bad[5, 2] = float("nan")
    with pytest.raises(ValueError, match="positions has a value that is not finite"):
        pme(bad, q, cell, batch)
    bad = x.clone()
    bad[7, 0] = -0.1
    with pytest.raises(ValueError, match="outside its cell"):
        pme(bad, q, cell, batch)
    bad = x[:40].clone()
    bad[9, 2] = cell[0, 2] + 0.01
    with pytest.raises(ValueError, match="outside its cell"):
        pme(bad, q[:40], cell[0])
    bad[9, 2] = float("inf")
    with pytest.raises(ValueError, match="positions has a value that is not finite"):
        pme(bad, q[:40], cell[0])
    bad = q.clone()
    bad[3] = float("inf")
    with pytest.raises(ValueError, match="charges has a value that is not finite"):
        pme(x, bad, cell, batch)
    with pytest.raises(ValueError, match="cell has a box length"):
        pme(x, q, -cell, batch)
    with pytest.raises(ValueError, match="cell has shape"):
        pme(x, q, cell[:, :2], batch)
    with pytest.raises(TypeError, match="cutoff"):
        pt.Pme()
