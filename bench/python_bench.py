"""pmkit from Python with torch tensors, next to the same call from C++ and to PyTorch's
index_add_ formulation, on one GPU in one run (issue 34's targets: within 5% of C++ at
2^24 particles, at most 15 us of overhead a call at 2^10).

Cases: 3D periodic, float32, M'4, uniform random particles, 2^24 on 256^3 and 128^3
cells (h = 1), one property. For each:
  - python: plan.spread(q, out=rho) from Python on torch tensors, then the plan's stream
    synchronised; wall time, median of --reps;
  - c++: the same plan's spread from C++ on views made once (Plan.time_spread, one call
    and the synchronisation), median of --reps;
  - index_add_: bench/torch_baseline.py's p2m, median of CUDA-event timings;
and the same for interp (python and index_add_'s gather). With --gpu-bench PATH, the
gpu_bench binary's own figures for these cases are printed beside them.

Overhead: at 2^10 particles, --calls back-to-back spreads from Python and from C++
(time_spread), each followed by one synchronisation; the difference per call is what the
Python layer adds (array import, stream lookup, argument checks).

    python bench/python_bench.py [--quick] [--reps 11] [--calls 2000] [--gpu-bench build/bench/gpu_bench]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

import pmkit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_baseline  # noqa: E402  (bench/torch_baseline.py, beside this file)


def wall_median(f, plan, reps):
    """Median wall seconds of f() followed by the plan's synchronisation, after one warm-up."""
    f()
    plan.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        f()
        plan.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def case(log2n, cells, reps):
    n = 1 << log2n
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    x = torch.rand((n, 3), device="cuda", generator=g) * cells
    q = torch.rand(n, device="cuda", generator=g)
    grid = pmkit.Grid.periodic((cells, cells, cells), h=1.0)
    plan = pmkit.Plan(grid, "mp4", dtype="float32", backend="cuda")
    plan.set_points(x)
    rho = torch.empty(plan.mesh_shape, device="cuda")
    phi = torch.empty(n, device="cuda")
    python_spread = wall_median(lambda: plan.spread(q, out=rho), plan, reps)
    cpp_spread = statistics.median(plan._impl.time_spread([q], [rho], 1) for _ in range(reps))
    python_interp = wall_median(lambda: plan.interp(rho, out=phi), plan, reps)
    flat = rho.reshape(-1)
    torch_spread = torch_baseline.median_ms(lambda: torch_baseline.p2m(x, q, cells, 4, torch_baseline.mp4), reps) / 1e3
    torch_interp = torch_baseline.median_ms(lambda: torch_baseline.m2p(x, flat, cells, 4, torch_baseline.mp4), reps) / 1e3
    return {
        "case": f"mp4-3d-f-2^{log2n}-{cells}",
        "spread python": python_spread,
        "spread c++": cpp_spread,
        "spread index_add_": torch_spread,
        "interp python": python_interp,
        "interp torch gather": torch_interp,
    }


def overhead(calls):
    n = 1 << 10
    x = torch.rand((n, 3), device="cuda") * 32
    q = torch.rand(n, device="cuda")
    plan = pmkit.Plan(pmkit.Grid.periodic((32, 32, 32)), "mp4", dtype="float32", backend="cuda")
    plan.set_points(x)
    rho = torch.empty(plan.mesh_shape, device="cuda")
    plan.spread(q, out=rho)
    plan.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        plan.spread(q, out=rho)
    plan.synchronize()
    python = (time.perf_counter() - start) / calls
    cpp = plan._impl.time_spread([q], [rho], calls)
    return python, cpp


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2^20 particles instead of 2^24")
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--gpu-bench", help="the gpu_bench binary, for its figures of the same cases")
    args = parser.parse_args()
    if not (torch.cuda.is_available() and pmkit.built_with_cuda()):
        sys.exit("python_bench needs a GPU, torch with CUDA and a CUDA build of pmkit")

    print(f"device: {torch.cuda.get_device_name()}; pmkit {pmkit.__version__}; torch {torch.__version__}")
    log2n = 20 if args.quick else 24
    rows = [case(log2n, cells, args.reps) for cells in (256, 128)]
    columns = list(rows[0])[1:]
    print(f"{'case (ms)':<24}" + "".join(f"{c:>22}" for c in columns) + f"{'python / c++':>14}")
    for row in rows:
        ratio = row["spread python"] / row["spread c++"]
        print(f"{row['case']:<24}" + "".join(f"{row[c] * 1e3:>22.3f}" for c in columns) + f"{ratio:>14.3f}")

    python, cpp = overhead(args.calls)
    print(f"2^10 particles, {args.calls} spreads back to back: python {python * 1e6:.2f} us a call, "
          f"c++ {cpp * 1e6:.2f} us, overhead {(python - cpp) * 1e6:.2f} us")

    if args.gpu_bench:
        names = [f"p2m-mp4-3d-f-2^24-{cells}" for cells in (256, 128)]  # gpu_bench --quick shrinks them
        command = [args.gpu_bench] + (["--quick"] if args.quick else []) + [a for n in names for a in ("--case", n)]
        print("gpu_bench, same cases:")
        print(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


if __name__ == "__main__":
    main()
