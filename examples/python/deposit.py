"""Deposits charges onto a periodic 2D mesh and interpolates the mesh back.

With torch and a GPU (and a CUDA build of pmkit) it runs on the GPU with torch tensors;
otherwise on the CPU with NumPy arrays. Where matplotlib is installed it plots the mesh
into deposit.png.

    python examples/python/deposit.py [--particles N] [--cells C] [--output deposit.png]
"""

import argparse

import numpy as np

import pmkit


def arrays_and_backend():
    """(make, to_numpy, backend): torch on the GPU where possible, else NumPy on the CPU."""
    try:
        import torch

        if torch.cuda.is_available() and pmkit.built_with_cuda():
            return (lambda a: torch.as_tensor(a, device="cuda")), (lambda t: t.cpu().numpy()), "cuda"
    except ImportError:
        pass
    return (lambda a: a), (lambda a: a), "cpu"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--particles", type=int, default=200_000)
    parser.add_argument("--cells", type=int, default=128)
    parser.add_argument("--output", default="deposit.png")
    args = parser.parse_args()

    make, to_numpy, backend = arrays_and_backend()
    rng = np.random.default_rng(1)
    # Two Gaussian blobs of opposite charge in the unit square.
    n = args.particles
    centres = np.where(rng.random(n)[:, None] < 0.5, [0.3, 0.4], [0.7, 0.6])
    x = np.mod(centres + 0.08 * rng.standard_normal((n, 2)), 1.0)
    q = np.where(centres[:, 0] < 0.5, 1.0, -1.0) / n

    grid = pmkit.Grid.periodic((args.cells, args.cells), h=1.0 / args.cells)
    plan = pmkit.Plan(grid, "mp4", dtype="float64", backend=backend)
    plan.set_points(make(x))
    rho = plan.spread(make(q))  # (cells, cells): rho[j, i] is node (i, j)
    phi = plan.interp(rho)      # the mesh at each particle
    rho, phi = to_numpy(rho), to_numpy(phi)

    print(f"backend {backend}, {n} particles, {args.cells}^2 mesh, spread method {plan.spread_method}")
    print(f"mesh total {rho.sum():.3e} (sum of the charges: {q.sum():.3e})")
    print(f"<spread(q), rho> = {np.vdot(rho, rho):.6e}, <q, interp(rho)> = {np.vdot(q, phi):.6e} (equal: adjoints)")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(5, 4.5))
    image = ax.imshow(rho / grid.spacing[0] ** 2, origin="lower", extent=(0, 1, 0, 1), cmap="RdBu_r")
    fig.colorbar(image, ax=ax, label="charge density")
    ax.set(xlabel="x", ylabel="y", title="M'4 deposit")
    fig.savefig(args.output, dpi=120, bbox_inches="tight")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
