"""pmkit.torch's PME against torch-pme 0.5.0: energy and forces by autograd, float32.

    python bench/pme_torch.py                    # GPU: 10^4, 10^5, 10^6 charges, a batch of 64
    python bench/pme_torch.py --quick            # CPU, tiny sizes: checks that it runs
    python bench/pme_torch.py --stages           # and where pmkit's time goes, stage by stage
    python bench/pme_torch.py --profile          # and torch.profiler's kernel table of a step

Needs torch, a CUDA build of pmkit (or --device cpu), and torch-pme 0.5.0 (pure Python:
``pip install torch_pme-0.5.0-py3-none-any.whl``; it needs only torch). Optionally
vesin-torch builds torch-pme's neighbour list faster; without it a cell list in torch does.

Systems: N random charges in [-1, 1] (neutral) uniformly in a cube at 100 charges per
nm^3 (the atom density of water), cutoff 1 nm (less in --quick's small boxes), OpenMM's
parameters for tolerance 5e-4 (PmeParameters.choose: alpha = sqrt(-ln 1e-3) / cutoff, the
mesh from alpha and the box). pmkit runs B-spline order 4 on that mesh; torch-pme runs
its PMECalculator with the same alpha (smearing = 1 / (sqrt(2) alpha)), the same cutoff
for its real-space pairs (a half neighbour list built outside the timing, distances from
the positions inside it, as its users do), interpolation_nodes=4 and a mesh spacing that
gives it at least pmkit's mesh (torch-pme rounds meshes up to powers of 2).

Timing: one step is the energy and the forces by autograd (forward and backward), the
median of --repeat steps after --warmup, with the device synchronised around each.

Force error: the relative RMS error sqrt(sum |F - F_ref|^2 / sum |F_ref|^2) over all
charges against a converged reference: pmkit's PME in float64 with the same cutoff,
alpha r_c = 4.2 (erfc = 3e-9: no real-space truncation left), B-spline order 8 and a mesh
of spacing h with h alpha = 0.25. Each size prints the reference's own error estimate,
its distance from a finer one (h alpha = 0.18), which must lie far below the errors
compared. Each row prints both libraries' errors; the target compares at equal or better
error for pmkit.

Batch: 64 systems of 10^3 to 10^4 charges (log-uniform, fixed seed) in one pmkit call
against torch-pme looping over them.

--stages adds, for each size, where pmkit's step goes (medians, the device synchronised
around each stage): the compiled PmePlan that pmkit.torch runs, called directly (set_points;
compute_reciprocal; the first compute after set_points, which bins the real-space pairs
from the mesh plan's binning; a second compute on the same binning), and pmkit.torch's
forward and backward, each also as the host's time to queue it (no wait: what the host
adds where the device is faster). Derived: the pair binning (first compute - second), the
real-space pairs (second compute - compute_reciprocal) and the torch layer's share (the
step - set_points - first compute).
"""

import argparse
import math
import statistics
import time

import torch

import pmkit
import pmkit.torch as pt

DENSITY = 100.0  # charges per nm^3


def system(n, generator, device, dtype, cutoff):
    box = (n / DENSITY) ** (1 / 3)
    cutoff = min(cutoff, 0.49 * box)
    # Strictly inside [0, box) also once rounded to float32.
    x = torch.rand(n, 3, generator=generator, dtype=torch.float64) * (box * (1 - 1e-6))
    q = torch.rand(n, generator=generator, dtype=torch.float64) * 2 - 1
    q -= q.mean()
    return x.to(device, dtype), q.to(device, dtype), box, cutoff


def neighbour_pairs(x, box, cutoff):
    """A half list (i < j) of the pairs closer than the cutoff (minimum image): vesin-torch
    where installed, else a cell list in torch, chunked."""
    try:
        from vesin.torch import NeighborList

        cell = torch.eye(3, dtype=x.dtype, device=x.device) * box
        i, j = NeighborList(cutoff=cutoff, full_list=False).compute(x, cell, periodic=True, quantities="ij")
        return torch.stack([i, j], 1)
    except ImportError:
        pass
    n = x.shape[0]
    cells = max(3, int(box / cutoff))
    c = torch.clamp((x / box * cells).long(), 0, cells - 1)
    index = (c[:, 2] * cells + c[:, 1]) * cells + c[:, 0]
    order = torch.argsort(index)
    counts = torch.bincount(index, minlength=cells**3)
    starts = torch.cumsum(counts, 0) - counts
    most = int(counts.max())
    pairs = []
    offsets = torch.tensor([(a, b, d) for a in (-1, 0, 1) for b in (-1, 0, 1) for d in (-1, 0, 1)], device=x.device)
    chunk = max(1, 2**26 // (27 * most))
    for lo in range(0, n, chunk):
        i = torch.arange(lo, min(n, lo + chunk), device=x.device)
        neighbour = (c[i, None, :] + offsets[None]) % cells  # (n, 27, 3)
        cell = (neighbour[..., 2] * cells + neighbour[..., 1]) * cells + neighbour[..., 0]
        slot = starts[cell][..., None] + torch.arange(most, device=x.device)  # (n, 27, most)
        valid = torch.arange(most, device=x.device) < counts[cell][..., None]
        j = order[slot.clamp(max=n - 1)]
        ii = i[:, None, None].expand_as(j)
        keep = valid & (j > ii)
        ii, j = ii[keep], j[keep]
        d = x[j] - x[ii]
        d -= box * torch.round(d / box)
        close = (d * d).sum(1) < cutoff * cutoff
        pairs.append(torch.stack([ii[close], j[close]], 1))
    return torch.cat(pairs)


def pmkit_step(pme, x, q, cell, batch=None):
    def step():
        xg = x.detach().requires_grad_()
        energy = pme(xg, q, cell, batch).energy.sum()
        (g,) = torch.autograd.grad(energy, xg)
        return -g

    return step


def synchronized(device):
    if device == "cuda":
        torch.cuda.synchronize()


def median_time(call, device, warmup, repeat, before=None, wait=True):
    """Median seconds of call() (before() untimed ahead of each), the device synchronised
    before and, with `wait`, after it."""
    times = []
    for k in range(warmup + repeat):
        if before is not None:
            before()
        synchronized(device)
        start = time.perf_counter()
        call()
        if wait:
            synchronized(device)
        times.append(time.perf_counter() - start)
    synchronized(device)
    return statistics.median(times[warmup:])


def stages(pme, x, q, cell, device, warmup, repeat):
    """Where pmkit's step goes (ms): the compiled plan's calls alone and the torch layer's."""
    plan = pme.plan(tuple(float(v) for v in cell.tolist()), x.dtype, x.device)
    t = {}
    t["set_points"] = median_time(lambda: plan.set_points(x), device, warmup, repeat)
    t["compute_reciprocal"] = median_time(
        lambda: plan.compute(q, potential=True, reciprocal_only=True), device, warmup, repeat,
        before=lambda: plan.set_points(x))
    t["compute, first"] = median_time(lambda: plan.compute(q, potential=True), device, warmup, repeat,
                                      before=lambda: plan.set_points(x))
    t["compute, again"] = median_time(lambda: plan.compute(q, potential=True), device, warmup, repeat)
    outputs = {}

    def forward():
        xg = x.detach().requires_grad_()
        outputs["xg"], outputs["energy"] = xg, pme(xg, q, cell).energy.sum()

    def backward():
        torch.autograd.grad(outputs["energy"], outputs["xg"])

    t["torch forward"] = median_time(forward, device, warmup, repeat)
    t["torch forward, queued"] = median_time(forward, device, warmup, repeat, wait=False)
    t["torch backward"] = median_time(backward, device, warmup, repeat, before=forward)
    t["torch backward, queued"] = median_time(backward, device, warmup, repeat, before=forward, wait=False)
    t["step"] = median_time(pmkit_step(pme, x, q, cell), device, warmup, repeat)
    t["pair binning (first - again)"] = t["compute, first"] - t["compute, again"]
    t["real-space pairs (again - reciprocal)"] = t["compute, again"] - t["compute_reciprocal"]
    t["torch layer (step - set_points - first)"] = t["step"] - t["set_points"] - t["compute, first"]
    print("    stages (ms): " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in t.items()))


def kernel_profile(step, device, steps=5, rows=25):
    """torch.profiler's table of `steps` steps, by device time on the GPU (every kernel of the
    process, pmkit's among them), by host time on the CPU."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    step()
    synchronized(device)
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        synchronized(device)
    key = "device_time_total" if device == "cuda" else "self_cpu_time_total"
    print(f"    profile of {steps} steps:")
    print(prof.key_averages().table(sort_by=key, row_limit=rows))


def torchpme_step(torchpme, params, box, cutoff, x, q, pairs):
    smearing = 1 / (math.sqrt(2) * params.alpha)
    spacing = 2 * box / (max(params.mesh) - 1)
    calculator = torchpme.PMECalculator(
        torchpme.CoulombPotential(smearing=smearing), mesh_spacing=spacing, interpolation_nodes=4
    ).to(device=x.device, dtype=x.dtype)
    cell = torch.eye(3, dtype=x.dtype, device=x.device) * box
    charges = q[:, None]

    def step():
        xg = x.detach().requires_grad_()
        d = xg[pairs[:, 1]] - xg[pairs[:, 0]]
        d = d - box * torch.round(d.detach() / box)
        potentials = calculator(charges, cell, xg, pairs, d.norm(dim=1))
        energy = (charges * potentials).sum()
        (g,) = torch.autograd.grad(energy, xg)
        return -g

    return step


def smooth(n):
    """The smallest size >= n with no prime factor above 7 (fast FFTs)."""
    while True:
        m = n
        for p in (2, 3, 5, 7):
            while m % p == 0:
                m //= p
        if m == 1:
            return n
        n += 1


def reference_forces(x, q, box, cutoff, h_alpha):
    alpha = 4.2 / cutoff
    mesh = smooth(math.ceil(box * alpha / h_alpha))
    params = pmkit.PmeParameters(alpha=alpha, mesh=(mesh,) * 3, order=8, cutoff=cutoff)
    cell = torch.full((3,), box, dtype=torch.float64, device=x.device)
    return pmkit_step(pt.Pme(parameters=params), x.double(), q.double(), cell)().double()


def force_error(forces, reference):
    return float(((forces.double() - reference).square().sum() / reference.square().sum()).sqrt())


def row(label, ours, theirs, ours_error=None, theirs_error=None):
    errors = "" if ours_error is None else f"  error {ours_error:.2e} vs {theirs_error:.2e}"
    if theirs is None:
        print(f"{label:>28}  pmkit {ours * 1e3:9.3f} ms  torch-pme        -       {errors}")
    else:
        print(f"{label:>28}  pmkit {ours * 1e3:9.3f} ms  torch-pme {theirs * 1e3:9.3f} ms  {theirs / ours:7.1f}x{errors}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CPU, tiny sizes")
    parser.add_argument("--device", default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--batch", type=int, default=None, help="systems in the batch row (0: none)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--cutoff", type=float, default=1.0)
    parser.add_argument("--stages", action="store_true", help="where pmkit's step goes, for each size")
    parser.add_argument("--profile", action="store_true", help="torch.profiler's kernel table of pmkit's step")
    args = parser.parse_args()
    device = args.device or ("cpu" if args.quick else "cuda")
    sizes = args.sizes or ([1000, 3000] if args.quick else [10**4, 10**5, 10**6])
    systems = args.batch if args.batch is not None else (4 if args.quick else 64)
    batch_sizes = (200, 1000) if args.quick else (10**3, 10**4)
    try:
        import torchpme
    except ImportError:
        torchpme = None
        print("torch-pme is not installed: pmkit's figures alone")
    dtype = torch.float32
    generator = torch.Generator().manual_seed(2026)
    print(f"pmkit {pmkit.__version__}, torch {torch.__version__}, torch-pme "
          f"{getattr(torchpme, '__version__', '-')}, {device}, float32, energy + forces by autograd")
    for n in sizes:
        x, q, box, cutoff = system(n, generator, device, dtype, args.cutoff)
        params = pmkit.PmeParameters.choose((box,) * 3, cutoff, 5e-4, order=4)
        cell = torch.full((3,), box, dtype=dtype, device=device)
        pme = pt.Pme(parameters=params)
        ours = pmkit_step(pme, x, q, cell)
        reference = reference_forces(x, q, box, cutoff, 0.25)
        reference_error = force_error(reference_forces(x, q, box, cutoff, 0.18), reference)
        ours_error = force_error(ours(), reference)
        ours_time = median_time(ours, device, args.warmup, args.repeat)
        theirs_time = theirs_error = None
        if torchpme is not None:
            theirs = torchpme_step(torchpme, params, box, cutoff, x, q, neighbour_pairs(x, box, cutoff))
            theirs_error = force_error(theirs(), reference)
            theirs_time = median_time(theirs, device, args.warmup, args.repeat)
        print(f"N = {n}: box {box:.3f} nm, cutoff {cutoff:.3f} nm, mesh {params.mesh[0]}^3, alpha {params.alpha:.4f}, "
              f"reference error {reference_error:.1e}")
        row(f"{n} charges", ours_time, theirs_time, ours_error, theirs_error)
        if args.stages:
            stages(pme, x, q, cell, device, args.warmup, args.repeat)
        if args.profile:
            kernel_profile(ours, device)
    if systems:
        counts = [int(round(math.exp(math.log(batch_sizes[0]) + (math.log(batch_sizes[1]) - math.log(batch_sizes[0]))
                                      * float(torch.rand(1, generator=generator))))) for _ in range(systems)]
        parts = [system(n, generator, device, dtype, args.cutoff) for n in counts]
        x = torch.cat([p[0] for p in parts])
        q = torch.cat([p[1] for p in parts])
        cells = torch.tensor([[p[2]] * 3 for p in parts], dtype=dtype, device=device)
        batch = torch.repeat_interleave(torch.arange(systems, device=device), torch.tensor(counts, device=device))
        cutoff = min(p[3] for p in parts)
        pme = pt.Pme(cutoff=cutoff, tolerance=5e-4, order=4)
        ours_time = median_time(pmkit_step(pme, x, q, cells, batch), device, args.warmup, args.repeat)
        theirs_time = None
        if torchpme is not None:
            steps = []
            for xs, qs, box, _ in parts:
                params = pmkit.PmeParameters.choose((box,) * 3, cutoff, 5e-4, order=4)
                steps.append(torchpme_step(torchpme, params, box, cutoff, xs, qs, neighbour_pairs(xs, box, cutoff)))
            theirs_time = median_time(lambda: [s() for s in steps], device, args.warmup, args.repeat)
        print(f"batch: {systems} systems of {min(counts)}..{max(counts)} charges, {sum(counts)} in all, cutoff {cutoff:.3f}")
        row(f"batch of {systems}", ours_time, theirs_time)


if __name__ == "__main__":
    main()
