"""pmkit.jax under jit, next to the C++ plan's call on the same data and to jax-finufft's
type-1 NUFFT as a reference point, in one run.

Case: 3D periodic, float32, M'4, uniform random particles, --n particles (2^24) on
--cells^3 cells (h = 1), one field. For each call (spread, interp, interp_gradient):
  - jax: pmkit.jax's custom call under jax.jit (it bins the positions, then runs the
    call), then block_until_ready; wall time, median of --reps;
  - c++: the C++ plan of pmkit.Plan on the same JAX arrays (zero-copy), set_points and
    the call, which wait for their results as pmkit.Plan does with JAX arrays; median
    of --reps, the two taking turns within each rep;
  - call: the call alone from C++ on views made once, positions binned before
    (Plan._impl.time_calls, one call and the synchronisation), to show the binning's share.
Ratio jax / c++ (target <= 1.10). On the GPU, pmkit.Plan's results from JAX arrays are
torch or CuPy arrays: one of them must be installed.

jax-finufft (where installed; PyPI has CPU wheels only): its jitted nufft1 of the same
points and values (as complex64) to (--cells / 2)^3 modes at eps 1e-3, whose fine grid
(upsampling 2) is the --cells^3 grid and whose kernel (width 4 at that eps) has M'4's
support: the spread it contains corresponds to pmkit's. Next to it, pmkit.jax's spread
alone and its spread followed by jnp.fft.rfftn (the NUFFT's other large part), on the
device of the JAX arrays; where jax-finufft does not run there (a CPU-only build), it
runs on the CPU, and pmkit.jax on the CPU too. Ratios pmkit / jax-finufft.

    python bench/jax_bench.py [--quick] [--n 16777216] [--cells 128] [--reps 11]

PME: energy and forces by jax.value_and_grad of pmkit.jax.pme's energy under jit at 10^4,
10^5 and 10^6 charges (float32, order 4, OpenMM's alpha and mesh for a 1 nm cutoff and a
tolerance of 5e-4, 100 charges per nm^3), against pmkit.PmePlan's step (set_points and
compute: energy and forces) on the same arrays, ratio jax / c++; and against torch-pme's
PMECalculator (energy and forces by autograd, as bench/pme_torch.py runs it, on the same
charges through DLPack) where torch and torch-pme are installed, ratio torch-pme / jax.

--quick: 2^16 particles on 32^3 cells, 3 reps, on the CPU (a check that it runs); PME at
10^3 and 10^4 charges.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the plans' own buffers need room too

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import pmkit  # noqa: E402
import pmkit.jax as pj  # noqa: E402
from pmkit._arrays import library_of  # noqa: E402

CALLS = ("spread", "interp", "interp_gradient")


def medians(reps, timings):
    """The median seconds of each named function (one timed run per call), after one
    warm-up each; they take turns within each rep."""
    times = {name: [] for name in timings}
    for rep in range(reps + 1):
        for name, f in timings.items():
            start = time.perf_counter()
            f()
            seconds = time.perf_counter() - start
            if rep:
                times[name].append(seconds)
    return {name: statistics.median(t) for name, t in times.items()}


def problem(n, cells, device, seed=1):
    rng = np.random.default_rng(seed)
    x = jax.device_put((rng.random((n, 3)) * cells).astype(np.float32), device)
    q = jax.device_put(rng.random(n).astype(np.float32), device)
    grid = pmkit.Grid.periodic((cells, cells, cells), h=1.0)
    return grid, x, q


def against_cpp(grid, x, q, device, reps):
    """pmkit.jax under jit against pmkit.Plan's C++ call on the same arrays."""
    backend = "cuda" if device.platform == "gpu" else "cpu"
    plan = pj.Plan(grid, "mp4")
    cpp = pmkit.Plan(grid, "mp4", dtype="float32", backend=backend, device=device.id if backend == "cuda" else 0)
    rho = jax.jit(pj.spread, static_argnums=0)(plan, x, q).block_until_ready()
    cpp.set_points(x)
    inputs = {"spread": q, "interp": rho, "interp_gradient": rho}
    rows = []
    for call in CALLS:
        jitted = jax.jit(getattr(pj, call), static_argnums=0)
        operand = inputs[call]

        def run_cpp(call=call, operand=operand):
            cpp.set_points(x)
            getattr(cpp, call)(operand)
            cpp.synchronize()

        out = library_of(x).empty(x, getattr(cpp, call)(operand).shape, "float32")

        def run_call(call=call, operand=operand, out=out):
            cpp.set_points(x)
            cpp.synchronize()
            return cpp._impl.time_calls(call, [operand], [out], 1)

        t = medians(reps, {"jax": lambda: jitted(plan, x, operand).block_until_ready(), "c++": run_cpp})
        rows.append((call, t["jax"], t["c++"], statistics.median(run_call() for _ in range(reps))))
    print(f"\npmkit.jax under jit against the C++ call (set_points + call), {device}, N = {x.shape[0]}, "
          f"{grid.cells[0]}^3 cells, float32, mp4")
    print(f"{'call':<18}{'jax ms':>10}{'c++ ms':>10}{'jax/c++':>10}{'call ms':>10}")
    for call, tj, tc, alone in rows:
        print(f"{call:<18}{tj * 1e3:>10.3f}{tc * 1e3:>10.3f}{tj / tc:>10.3f}{alone * 1e3:>10.3f}")


def pmkit_timings(grid, x, q, reps):
    """pmkit.jax's spread and spread + rfftn on the arrays' device: {name: seconds}."""
    plan = pj.Plan(grid, "mp4")
    spread = jax.jit(lambda x, q: pj.spread(plan, x, q))
    spread_fft = jax.jit(lambda x, q: jnp.fft.rfftn(pj.spread(plan, x, q)))
    return medians(reps, {
        "spread": lambda: spread(x, q).block_until_ready(),
        "spread+fft": lambda: spread_fft(x, q).block_until_ready(),
    })


def against_finufft(grid, x, q, device, reps):
    """pmkit.jax's spread (and spread + rfftn) against jax-finufft's nufft1 on the grid
    that its spread fills: on the arrays' device where jax-finufft runs there, and on the
    CPU (both) where it does not, with pmkit.jax on the arrays' device beside it."""
    try:
        import jax_finufft
    except ImportError:
        print("\njax-finufft: not installed (pip install jax-finufft==1.3.1); no reference point")
        return
    cells = grid.cells[0]
    modes = (cells // 2,) * 3
    nufft = jax.jit(lambda c, *xs: jax_finufft.nufft1(modes, c, *xs, eps=1e-3, iflag=1))

    def finufft_seconds(x, q):
        c = (q + 0j).astype(jnp.complex64)
        xs = [x[:, d] * (2 * np.pi / cells) - np.pi for d in range(3)]
        return medians(reps, {"finufft": lambda: nufft(c, *xs).block_until_ready()})["finufft"]

    rows = []  # (pmkit.jax's call, its device, its seconds, jax-finufft's device, its seconds)
    ours = pmkit_timings(grid, x, q, reps)
    try:
        theirs, where = finufft_seconds(x, q), device
    except Exception as error:  # a CPU-only jax-finufft: both on the CPU too
        cpu = jax.devices("cpu")[0]
        print(f"\njax-finufft on {device}: {type(error).__name__}; it runs on the CPU, and pmkit.jax there too")
        xc, qc = jax.device_put(x, cpu), jax.device_put(q, cpu)
        theirs, where = finufft_seconds(xc, qc), cpu
        if cpu != device:
            rows += [(name, cpu, t, cpu, theirs) for name, t in pmkit_timings(grid, xc, qc, reps).items()]
    rows = [(name, device, t, where, theirs) for name, t in ours.items()] + rows
    print(f"\npmkit.jax against jax-finufft {jax_finufft.__version__} nufft1 (eps 1e-3, {modes[0]}^3 modes, "
          f"fine grid {cells}^3), N = {x.shape[0]}, float32")
    print(f"{'pmkit.jax':<14}{'on':>8}{'ms':>10}{'finufft on':>12}{'ms':>10}{'pmkit/finufft':>15}")
    for name, on, t, their_device, t_theirs in rows:
        print(f"{name:<14}{on.platform:>8}{t * 1e3:>10.3f}{their_device.platform:>12}{t_theirs * 1e3:>10.3f}"
              f"{t / t_theirs:>15.3f}")


def torch_pme_step(x, q, box, params):
    """torch-pme's step (energy and forces by autograd, bench/pme_torch.py's) on the same
    charges through DLPack, or None where torch or torch-pme is not installed."""
    try:
        import torch
        import torchpme

        import pme_torch
    except ImportError:
        return None
    xt, qt = (torch.from_dlpack(a) for a in (x, q))
    pairs = pme_torch.neighbour_pairs(xt, box, params.cutoff)
    step = pme_torch.torchpme_step(torchpme, params, box, params.cutoff, xt, qt, pairs)

    def run():
        step()
        if xt.is_cuda:
            torch.cuda.synchronize()

    return run


def pme(device, reps, counts):
    """PME, energy and forces: pmkit.jax.pme under jit (jax.value_and_grad of the energy)
    against pmkit.PmePlan's step (set_points, compute) on the same JAX arrays and against
    torch-pme where installed: float32, B-splines of order 4, OpenMM's alpha and mesh for a
    cutoff of 1 nm and a tolerance of 5e-4, 100 charges per nm^3."""
    print(f"\nPME, energy and forces, {device}, float32, order 4, cutoff 1 nm, tolerance 5e-4")
    print(f"{'charges':>9}{'mesh':>14}{'jax ms':>10}{'c++ ms':>10}{'jax/c++':>10}{'torch-pme ms':>14}"
          f"{'torch-pme/jax':>15}")
    backend = "cuda" if device.platform == "gpu" else "cpu"
    for n in counts:
        box = ((n / 100) ** (1 / 3),) * 3
        cutoff = min(1.0, 0.49 * box[0])
        params = pmkit.PmeParameters.choose(box, cutoff, 5e-4, 4)
        rng = np.random.default_rng(n)
        x = jax.device_put((rng.random((n, 3)) * box[0] * (1 - 1e-6)).astype(np.float32), device)
        q = rng.uniform(-1, 1, n)
        q = jax.device_put((q - q.mean()).astype(np.float32), device)
        cell = jax.device_put(np.array(box, dtype=np.float32), device)
        step = jax.jit(jax.value_and_grad(lambda x, q, c: pj.pme(x, q, c, parameters=params).energy))
        plan = pmkit.PmePlan(box, params, dtype="float32", backend=backend, device=device.id if backend == "cuda" else 0)

        def cpp_step():
            plan.set_points(x)
            plan.compute(q)
            plan.synchronize()

        timings = {"jax": lambda: jax.block_until_ready(step(x, q, cell)), "c++": cpp_step}
        theirs = torch_pme_step(x, q, box[0], params)
        if theirs is not None:
            timings["torch-pme"] = theirs
        t = medians(reps, timings)
        torch_pme = (f"{t['torch-pme'] * 1e3:>14.3f}{t['torch-pme'] / t['jax']:>15.1f}" if "torch-pme" in t
                     else f"{'-':>14}{'-':>15}")
        print(f"{n:>9}{'x'.join(map(str, params.mesh)):>14}{t['jax'] * 1e3:>10.3f}{t['c++'] * 1e3:>10.3f}"
              f"{t['jax'] / t['c++']:>10.3f}{torch_pme}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2^16 particles, 32^3 cells, 3 reps, CPU")
    parser.add_argument("--n", type=int, default=1 << 24)
    parser.add_argument("--cells", type=int, default=128)
    parser.add_argument("--reps", type=int, default=11)
    args = parser.parse_args()
    if args.quick:
        args.n, args.cells, args.reps = 1 << 16, 32, 3
    device = jax.devices("cpu")[0] if args.quick else jax.devices()[0]
    if device.platform == "gpu" and not pmkit.built_with_cuda():
        raise SystemExit("JAX has a GPU but this pmkit has no CUDA backend: build it with CUDA")
    print(f"pmkit {pmkit.__version__}, jax {jax.__version__}, device {device}")
    grid, x, q = problem(args.n, args.cells, device)
    against_cpp(grid, x, q, device, args.reps)
    against_finufft(grid, x, q, device, args.reps)
    pme(device, args.reps, [10**3, 10**4] if args.quick else [10**4, 10**5, 10**6])


if __name__ == "__main__":
    main()
