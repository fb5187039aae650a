"""pmkit from Python with torch tensors, next to the same calls from C++ and to PyTorch's
index_add_ formulation, on one GPU in one run (issue 34's targets: Python within 5% of
C++ at 2^24 particles; at most 15 us of overhead a call at 2^10; the PyTorch ratio that
C++ has).

Cases: 3D periodic, float32, M'4, uniform random particles (one draw for all columns),
2^24 on 256^3 and 128^3 cells (h = 1), one field. For each call (spread, interp,
interp_gradient):
  - python: plan.<call>(..., out=...) from Python on torch tensors, then the plan's stream
    synchronised; wall time, median of --reps;
  - c++: the same plan's call from C++ on views made once (Plan._impl.time_calls, one
    call and the synchronisation), median of --reps;
  - torch.op: pmkit.torch's custom operator (positions binned once, reuse_binning=True),
    as a torch user calls it, synchronised the same way;
  - torch: bench/torch_baseline.py's index_add_ deposit (spread) and indexed gather
    (interp; interp_gradient has no torch column), median of CUDA-event timings.
Ratios: python / c++ (target <= 1.05), torch / python and torch / c++ (the PyTorch ratio
from Python against the one from C++).

Overhead: at 2^10 particles, --calls back-to-back calls from Python and from C++
(time_calls), each loop followed by one synchronisation; the difference per call is what
the Python layer adds (array import, stream lookup, argument checks).

    python bench/python_bench.py [--quick] [--reps 21] [--calls 2000]
"""

import argparse
import os
import statistics
import sys
import time

import torch

import pmkit
import pmkit.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_baseline  # noqa: E402  (bench/torch_baseline.py, beside this file)

CALLS = ("spread", "interp", "interp_gradient")


def wall_seconds(f, plan):
    """Wall seconds of f() followed by the plan's synchronisation."""
    start = time.perf_counter()
    f()
    plan.synchronize()
    return time.perf_counter() - start


def alternating_medians(reps, calls):
    """The median of each named timing (a function that runs its call once and returns
    its seconds), after one warm-up each; the calls take turns within each rep, so that a
    slow spell of the GPU falls on all of them."""
    times = {name: [] for name in calls}
    for rep in range(reps + 1):
        for name, f in calls.items():
            seconds = f()
            if rep:
                times[name].append(seconds)
    return {name: statistics.median(t) for name, t in times.items()}


def problem(n, cells, seed=1):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    x = torch.rand((n, 3), device="cuda", generator=g) * cells
    q = torch.rand(n, device="cuda", generator=g)
    plan = pmkit.Plan(pmkit.Grid.periodic((cells, cells, cells), h=1.0), "mp4", dtype="float32", backend="cuda")
    plan.set_points(x)
    return x, q, plan


def arguments(plan, x, q):
    """Each call's input and output tensors."""
    n = q.shape[0]
    rho = torch.empty(plan.mesh_shape, device="cuda")
    plan.spread(q, out=rho)
    return {
        "spread": (q, rho),
        "interp": (rho, torch.empty(n, device="cuda")),
        "interp_gradient": (rho, torch.empty((n, 3), device="cuda")),
    }


def case(log2n, cells, reps):
    n = 1 << log2n
    x, q, plan = problem(n, cells)
    args = arguments(plan, x, q)
    rows = {}
    for call in CALLS:
        inputs, out = args[call]
        method = getattr(plan, call)
        op = getattr(pmkit.torch, call)
        rows[call] = alternating_medians(reps, {
            "python": lambda: wall_seconds(lambda: method(inputs, out=out), plan),
            "c++": lambda: plan._impl.time_calls(call, [inputs], [out], 1),
            "torch.op": lambda: wall_seconds(lambda: op(plan, x, inputs, reuse_binning=True), plan),
        })
    flat = args["spread"][1].reshape(-1)
    rows["spread"]["torch"] = torch_baseline.median_ms(
        lambda: torch_baseline.p2m(x, q, cells, 4, torch_baseline.mp4), reps) / 1e3
    rows["interp"]["torch"] = torch_baseline.median_ms(
        lambda: torch_baseline.m2p(x, flat, cells, 4, torch_baseline.mp4), reps) / 1e3
    return f"mp4-3d-f-2^{log2n}-{cells}", rows


def overhead(calls):
    x, q, plan = problem(1 << 10, 32, seed=2)
    args = arguments(plan, x, q)
    result = {}
    for call in ("spread", "interp"):
        inputs, out = args[call]
        method = getattr(plan, call)
        method(inputs, out=out)
        plan.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            method(inputs, out=out)
        plan.synchronize()
        python = (time.perf_counter() - start) / calls
        cpp = plan._impl.time_calls(call, [inputs], [out], calls)
        result[call] = (python, cpp)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2^20 particles instead of 2^24")
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    if not (torch.cuda.is_available() and pmkit.built_with_cuda()):
        sys.exit("python_bench needs a GPU, torch with CUDA and a CUDA build of pmkit")

    print(f"device: {torch.cuda.get_device_name()}; pmkit {pmkit.__version__}; torch {torch.__version__}")
    log2n = 20 if args.quick else 24
    header = (f"{'case':<22}{'call':<17}{'python ms':>11}{'c++ ms':>11}{'torch.op ms':>13}{'torch ms':>11}"
              f"{'python/c++':>12}{'torch/python':>14}{'torch/c++':>11}")
    print("\nPython against C++ and PyTorch (wall time with the synchronisation; target python/c++ <= 1.05)")
    print(header)
    for cells in (256, 128):
        name, rows = case(log2n, cells, args.reps)
        for call, row in rows.items():
            base = row.get("torch")
            torch_cols = (f"{base * 1e3:>11.3f}{row['python'] / row['c++']:>12.3f}"
                          f"{base / row['python']:>14.1f}{base / row['c++']:>11.1f}" if base else
                          f"{'-':>11}{row['python'] / row['c++']:>12.3f}{'-':>14}{'-':>11}")
            print(f"{name:<22}{call:<17}{row['python'] * 1e3:>11.3f}{row['c++'] * 1e3:>11.3f}"
                  f"{row['torch.op'] * 1e3:>13.3f}" + torch_cols)

    print(f"\nPer-call overhead at 2^10 particles, {args.calls} calls back to back (target <= 15 us)")
    print(f"{'call':<10}{'python us':>11}{'c++ us':>10}{'overhead us':>13}")
    for call, (python, cpp) in overhead(args.calls).items():
        print(f"{call:<10}{python * 1e6:>11.2f}{cpp * 1e6:>10.2f}{(python - cpp) * 1e6:>13.2f}")


if __name__ == "__main__":
    main()
