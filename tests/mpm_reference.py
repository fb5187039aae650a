#!/usr/bin/env python3
"""The MLS-MPM example (examples/mpm) against a NumPy program of the same scheme.

    python3 tests/mpm_reference.py PATH/TO/pmkit_mpm [--steps N]

runs pmkit_mpm on small cases (2D and 3D, fluid and elastic, walls with gravity and a
periodic box) in double precision with --dump-initial and --dump-final, runs the scheme
of examples/mpm/mpm.hpp from the same initial state in NumPy, and compares the final
states: every value within 1e-10 of the reference (relative to the largest of its kind).
Exits 77 (a skip for CTest) where NumPy is missing, 1 on a mismatch.
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # CTest's skip
    print("mpm_reference: NumPy is missing; skipped")
    sys.exit(77)


def read_dump(path):
    with open(path) as f:
        f.readline()
        head = f.readline().split()
        data = np.loadtxt(f, ndmin=2)
    keys = ["dim", "material", "n_grid", "steps", "dt", "h", "mass", "volume", "mu", "lambda",
            "stiffness", "gravity", "bound", "periodic"]
    p = dict(zip(keys, head))
    for k in ("dim", "n_grid", "steps", "bound", "periodic"):
        p[k] = int(p[k])
    for k in ("dt", "h", "mass", "volume", "mu", "lambda", "stiffness", "gravity"):
        p[k] = float(p[k])
    return p, data


class Scheme:
    """examples/mpm/mpm.hpp's step in NumPy, vectorised over the particles."""

    def __init__(self, p):
        self.p = p
        self.D = p["dim"]
        n = p["n_grid"]
        self.periodic = bool(p["periodic"])
        self.shape = (n if self.periodic else n + 1,) * self.D
        self.grav = np.zeros(self.D)
        self.grav[1] = p["gravity"]

    def stencil(self, x):
        """Per particle the 3^D node indices (flat), weights and offsets x_i - x_p."""
        h, D, n = self.p["h"], self.D, self.p["n_grid"]
        u = x / h
        f = np.floor(u + 0.5)
        s = u + 0.5 - f
        base = f.astype(np.int64) - 1
        w1 = np.stack([0.5 * (1 - s) ** 2, 0.75 - (s - 0.5) ** 2, 0.5 * s ** 2], axis=-1)  # (N, D, 3)
        off1 = np.stack([(k - 0.5 - s) * h for k in range(3)], axis=-1)
        idx1 = base[..., None] + np.arange(3)
        if self.periodic:
            idx1 = np.mod(idx1, n)
        else:
            idx1 = np.abs(idx1)
            idx1 = np.where(idx1 > n, 2 * n - idx1, idx1)
        N = x.shape[0]
        combos = np.array(np.meshgrid(*[np.arange(3)] * D, indexing="ij")).reshape(D, -1).T  # (3^D, D)
        w = np.ones((N, len(combos)))
        off = np.zeros((N, len(combos), D))
        flat = np.zeros((N, len(combos)), dtype=np.int64)
        stride = 1
        for d in range(D):
            w = w * w1[:, d, combos[:, d]]
            off[:, :, d] = off1[:, d, combos[:, d]]
            flat += idx1[:, d, combos[:, d]] * stride
            stride *= self.shape[d]
        return flat, w, off

    def stress(self, f):
        p, D = self.p, self.D
        eye = np.eye(D)
        if p["material"] == "fluid":
            return p["stiffness"] * (f - 1.0)[:, None, None] * eye
        J = np.linalg.det(f)
        return p["mu"] * (f @ np.swapaxes(f, 1, 2) - eye) + p["lambda"] * np.log(J)[:, None, None] * eye

    def p2g(self, x, v, C, f):
        p, D = self.p, self.D
        size = int(np.prod(self.shape))
        flat, w, off = self.stencil(x)
        scale = 4.0 / p["h"] ** 2
        affine = p["mass"] * C - p["dt"] * p["volume"] * scale * self.stress(f)
        mass = np.zeros(size)
        np.add.at(mass, flat.ravel(), (w * p["mass"]).ravel())
        mom = np.zeros((D, size))
        node_mom = p["mass"] * v[:, None, :] + np.einsum("pab,pnb->pna", affine, off)
        for d in range(D):
            np.add.at(mom[d], flat.ravel(), (w * node_mom[:, :, d]).ravel())
        return mass, mom

    def grid_update(self, mass, mom):
        p, D = self.p, self.D
        vel = np.zeros_like(mom)
        has = mass > 0
        idx = np.array(np.unravel_index(np.arange(mass.size), self.shape[::-1]))[::-1]  # x fastest
        for d in range(D):
            vd = np.where(has, mom[d] / np.where(has, mass, 1.0) + p["dt"] * self.grav[d], 0.0)
            if not self.periodic:
                b = p["bound"]
                vd = np.where((idx[d] < b) & (vd < 0), 0.0, vd)
                vd = np.where((idx[d] > self.shape[d] - 1 - b) & (vd > 0), 0.0, vd)
            vel[d] = vd
        return vel

    def g2p(self, x, f, vel):
        p, D = self.p, self.D
        flat, w, off = self.stencil(x)
        vi = np.stack([vel[d][flat] for d in range(D)], axis=-1)  # (N, 3^D, D)
        v = np.einsum("pn,pna->pa", w, vi)
        C = 4.0 / p["h"] ** 2 * np.einsum("pn,pna,pnb->pab", w, vi, off)
        x = x + p["dt"] * v
        if self.periodic:
            x = np.mod(x, p["n_grid"] * p["h"])
        if p["material"] == "fluid":
            f = f * (1 + p["dt"] * np.trace(C, axis1=1, axis2=2))
        else:
            f = (np.eye(D) + p["dt"] * C) @ f
        return x, v, C, f

    def run(self, data, steps):
        D = self.D
        x = data[:, :D].copy()
        v = data[:, D:2 * D].copy()
        C = data[:, 2 * D:2 * D + D * D].reshape(-1, D, D).copy()
        rest = data[:, 2 * D + D * D:]
        f = rest[:, 0].copy() if self.p["material"] == "fluid" else rest.reshape(-1, D, D).copy()
        vel = self.grid_update(*self.p2g(x, v, C, f))
        for _ in range(steps):
            x, v, C, f = self.g2p(x, f, vel)
            vel = self.grid_update(*self.p2g(x, v, C, f))
        return np.hstack([x, v, C.reshape(len(x), -1), f.reshape(len(x), -1)])


CASES = [  # dim, material, particles, periodic, steps (the 2D fluid falls onto the floor and splashes)
    (2, "fluid", 600, False, 1500),
    (2, "elastic", 600, True, 200),
    (3, "fluid", 800, True, 200),
    (3, "elastic", 800, False, 200),
]


def compare(binary, dim, material, particles, periodic, steps, tolerance=1e-10):
    with tempfile.TemporaryDirectory() as tmp:
        initial, final = os.path.join(tmp, "initial.txt"), os.path.join(tmp, "final.txt")
        cmd = [binary, "--dim", str(dim), "--material", material, "--particles", str(particles),
               "--steps", str(steps), "--dump-initial", initial, "--dump-final", final]
        if periodic:
            cmd.append("--periodic")
        subprocess.run(cmd, check=True)
        p, start = read_dump(initial)
        _, got = read_dump(final)
    want = Scheme(p).run(start, steps)
    D = dim
    diff = got - want
    if periodic:  # positions on either side of the seam
        L = p["n_grid"] * p["h"]
        diff[:, :D] -= L * np.round(diff[:, :D] / L)
    groups = {"x": slice(0, D), "v": slice(D, 2 * D), "C": slice(2 * D, 2 * D + D * D),
              "F or J": slice(2 * D + D * D, None)}
    worst = {}
    for name, cols in groups.items():
        scale = max(np.abs(want[:, cols]).max(), 1e-300)
        worst[name] = np.abs(diff[:, cols]).max() / scale
    label = f"{dim}D {material} {'periodic' if periodic else 'walls'} {particles} particles {steps} steps"
    print(f"{label}: " + ", ".join(f"{k} {e:.2e}" for k, e in worst.items()))
    return all(e <= tolerance for e in worst.values()), worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--steps", type=int, default=0, help="steps of every case (0: the cases' own)")
    args = ap.parse_args()
    ok = True
    for *case, steps in CASES:
        good, _ = compare(args.binary, *case, steps=args.steps or steps)
        ok = ok and good
    if not ok:
        print("mpm_reference: pmkit's MPM differs from the NumPy reference by more than 1e-10")
        sys.exit(1)


if __name__ == "__main__":
    main()
