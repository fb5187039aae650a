#!/usr/bin/env python3
"""pmkit's MLS-MPM (examples/mpm) beside Taichi's on the same setting: particle-steps/s.

    python3 bench/mpm_taichi.py [--pmkit build/examples/mpm/pmkit_mpm_cuda] [--sizes 20 24]
    python3 bench/mpm_taichi.py --quick     # tiny sizes on the CPU (pmkit_mpm, Taichi's CPU)

The setting is mpm3d's (a weakly compressible fluid block in [0.15, 0.55)^D falling
under gravity in the unit box, walls 3 nodes thick, about 4 particles a cell at rest:
n_grid = round((4 N)^(1/D)), dt = 1e-4 x 128 / n_grid, E = 400, density 1, particle
volume (h/2)^D), in single precision. Taichi's program below is that scheme written out
(P2G with atomics on a dense grid, the grid update, G2P), the same arithmetic as
examples/mpm/mpm.hpp; pmkit runs as the program pmkit_mpm_cuda (--bench), whose grid
update runs over the box of nodes the particles reach (Taichi's, as mpm3d's, over the
dense grid). Each side
runs --warmup untimed steps, then --steps timed ones, synchronised at either end. The
table gives both rates and pmkit's ratio to Taichi; --json writes the rows.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setting(particles, dim):
    n_grid = int(round((4.0 * particles) ** (1.0 / dim)))
    h = 1.0 / n_grid
    return {"n_grid": n_grid, "h": h, "dt": 1e-4 * 128.0 / n_grid, "E": 400.0, "volume": (0.5 * h) ** dim,
            "gravity": 9.8, "bound": 3}


def taichi_rate(particles, dim, steps, warmup, arch):
    import numpy as np
    import taichi as ti

    # On the GPU a pool that holds 2^24 particles (1 GiB) and the grid (1 GiB at 407^3).
    memory = {} if arch == ti.cpu else {"device_memory_GB": 8}
    ti.init(arch=arch, default_fp=ti.f32, random_seed=1, **memory)
    s = setting(particles, dim)
    n_grid, dt, E, bound = s["n_grid"], s["dt"], s["E"], s["bound"]
    dx = s["h"]
    inv_dx = 1.0 / dx
    p_vol = s["volume"]
    p_mass = p_vol
    gravity = s["gravity"]
    nodes = n_grid + 1  # pmkit's bounded grid: nodes 0 .. n_grid
    x = ti.Vector.field(dim, float, particles)
    v = ti.Vector.field(dim, float, particles)
    C = ti.Matrix.field(dim, dim, float, particles)
    J = ti.field(float, particles)
    grid_v = ti.Vector.field(dim, float, (nodes,) * dim)
    grid_m = ti.field(float, (nodes,) * dim)
    neighbour = (3,) * dim

    @ti.kernel
    def substep():
        for I in ti.grouped(grid_m):
            grid_v[I] = ti.zero(grid_v[I])
            grid_m[I] = 0
        for p in x:
            Xp = x[p] * inv_dx
            base = int(Xp - 0.5)
            fx = Xp - base
            w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1) ** 2, 0.5 * (fx - 0.5) ** 2]
            stress = -dt * 4 * E * p_vol * (J[p] - 1) * inv_dx * inv_dx
            affine = ti.Matrix.identity(float, dim) * stress + p_mass * C[p]
            for offset in ti.static(ti.grouped(ti.ndrange(*neighbour))):
                dpos = (offset - fx) * dx
                weight = 1.0
                for i in ti.static(range(dim)):
                    weight *= w[offset[i]][i]
                grid_v[base + offset] += weight * (p_mass * v[p] + affine @ dpos)
                grid_m[base + offset] += weight * p_mass
        for I in ti.grouped(grid_m):
            if grid_m[I] > 0:
                grid_v[I] /= grid_m[I]
                grid_v[I][1] -= dt * gravity
            cond = (I < bound) & (grid_v[I] < 0) | (I > nodes - 1 - bound) & (grid_v[I] > 0)
            grid_v[I] = ti.select(cond, 0, grid_v[I])
        for p in x:
            Xp = x[p] * inv_dx
            base = int(Xp - 0.5)
            fx = Xp - base
            w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1) ** 2, 0.5 * (fx - 0.5) ** 2]
            new_v = ti.zero(v[p])
            new_C = ti.zero(C[p])
            for offset in ti.static(ti.grouped(ti.ndrange(*neighbour))):
                dpos = (offset - fx) * dx
                weight = 1.0
                for i in ti.static(range(dim)):
                    weight *= w[offset[i]][i]
                g_v = grid_v[base + offset]
                new_v += weight * g_v
                new_C += 4 * weight * g_v.outer_product(dpos) * inv_dx * inv_dx
            v[p] = new_v
            x[p] += dt * v[p]
            J[p] *= 1 + dt * new_C.trace()
            C[p] = new_C

    # examples/mpm/simulation.hpp's initial state: the block, moving, spinning, swelling.
    rng = np.random.default_rng(1)
    x0 = (0.15 + 0.4 * rng.random((particles, dim))).astype(np.float32)
    v0 = x0 - 0.35
    v0[:, 0] += 0.5 - 2.0 * (x0[:, 1] - 0.35)
    v0[:, 1] += 0.25 + 2.0 * (x0[:, 0] - 0.35)
    x.from_numpy(x0)
    v.from_numpy(v0.astype(np.float32))
    J.fill(1)
    C.fill(0)
    for _ in range(warmup):
        substep()
    ti.sync()
    start = time.perf_counter()
    for _ in range(steps):
        substep()
    ti.sync()
    seconds = time.perf_counter() - start
    finite = bool(np.isfinite(x.to_numpy()).all())
    ti.reset()
    return particles * steps / seconds, seconds, finite


def pmkit_rate(program, particles, dim, steps, warmup):
    s = setting(particles, dim)
    cmd = [program, "--dim", str(dim), "--material", "fluid", "--precision", "float", "--particles", str(particles),
           "--n-grid", str(s["n_grid"]), "--steps", str(steps), "--bench", str(warmup)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    m = re.search(r"seconds (\S+) particle_steps_per_second (\S+)", out)
    if not m:
        raise RuntimeError(f"{' '.join(cmd)} printed no rate:\n{out}")
    return float(m.group(2)), float(m.group(1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pmkit", help="the pmkit program (default: build/examples/mpm/pmkit_mpm_cuda, "
                    "pmkit_mpm with --quick)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[20, 24], help="log2 of the particle counts")
    ap.add_argument("--dim", type=int, default=3, choices=[2, 3])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="tiny sizes on the CPU (a check that both sides run)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    import taichi as ti

    if args.quick:
        args.sizes, args.steps, args.warmup = [12], 10, 2
    arch = ti.cpu if args.quick else ti.cuda
    program = args.pmkit or os.path.join(ROOT, "build", "examples", "mpm",
                                         "pmkit_mpm" if args.quick else "pmkit_mpm_cuda")
    rows = []
    print(f"MLS-MPM, {args.dim}D fluid (mpm3d setting), float, {args.steps} timed steps after {args.warmup}")
    print(f"{'particles':>10} {'n_grid':>6} {'pmkit p-steps/s':>16} {'Taichi p-steps/s':>17} {'pmkit/Taichi':>12}")
    for log2 in args.sizes:
        n = 1 << log2
        ours, ours_s = pmkit_rate(program, n, args.dim, args.steps, args.warmup)
        theirs, theirs_s, finite = taichi_rate(n, args.dim, args.steps, args.warmup, arch)
        row = {"particles": n, "dim": args.dim, "n_grid": setting(n, args.dim)["n_grid"], "steps": args.steps,
               "pmkit_particle_steps_per_s": ours, "taichi_particle_steps_per_s": theirs, "ratio": ours / theirs,
               "pmkit_seconds": ours_s, "taichi_seconds": theirs_s, "taichi_finite": finite}
        rows.append(row)
        print(f"{n:>10} {row['n_grid']:>6} {ours:>16.4g} {theirs:>17.4g} {ours / theirs:>11.2f}x"
              + ("" if finite else "  (Taichi's state went non-finite)"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
