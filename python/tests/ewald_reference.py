"""The Ewald sum of point charges in a periodic orthorhombic box, float64 NumPy, converged
to rounding (as src/verify/ewald.cpp): real-space images, the reciprocal sum, the self
term and the neutralising background. Energy, forces, potentials dE/dq and the virial
W = -dE/d(strain) (Voigt order xx, yy, zz, yz, xz, xy), Gaussian units. For a few hundred
charges."""

import numpy as np

VOIGT = [(0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1)]


def ewald(positions, charges, box):
    x = np.asarray(positions, dtype=np.float64)
    q = np.asarray(charges, dtype=np.float64)
    box = np.asarray(box, dtype=np.float64)
    n = len(q)
    rc = box.min()
    alpha = 6.0 / rc  # erfc(6) = 2e-17
    volume = np.prod(box)
    from math import erfc, pi, sqrt

    verfc = np.vectorize(erfc)
    forces = np.zeros((n, 3))
    potential = np.zeros(n)
    virial = np.zeros(6)
    energy = 0.0
    # Real space: the 27 nearest images of each minimum-image pair, within rc.
    d0 = x[:, None, :] - x[None, :, :]
    d0 -= box * np.round(d0 / box)
    for shift in np.array(np.meshgrid([-1, 0, 1], [-1, 0, 1], [-1, 0, 1])).T.reshape(-1, 3):
        r = d0 + shift * box
        rr = np.sqrt((r**2).sum(-1))
        mask = (rr < rc) & (rr > 0)
        rr_safe = np.where(mask, rr, 1.0)
        e = np.where(mask, verfc(alpha * rr_safe) / rr_safe, 0.0)
        g = np.where(mask, (e + 2 * alpha / sqrt(pi) * np.exp(-(alpha * rr_safe) ** 2)) / rr_safe**2, 0.0)
        qq = q[:, None] * q[None, :]
        energy += 0.5 * (qq * e).sum()
        potential += (e * q[None, :]).sum(1)
        forces += ((qq * g)[:, :, None] * r).sum(1)
        for v, (a, b) in enumerate(VOIGT):
            virial[v] += 0.5 * (qq * g * r[..., a] * r[..., b]).sum()
    # Reciprocal space.
    m2max = 38.0 * alpha**2 / pi**2
    kmax = np.ceil(np.sqrt(m2max) * box).astype(int)
    k = np.array(np.meshgrid(*[np.arange(-m, m + 1) for m in kmax], indexing="ij")).reshape(3, -1).T
    m = k / box
    m2 = (m**2).sum(1)
    keep = (m2 > 0) & (m2 <= m2max)
    m, m2 = m[keep], m2[keep]
    g = np.exp(-(pi**2) * m2 / alpha**2) / m2 / (pi * volume)
    phase = np.exp(2j * pi * (x @ m.T))  # (N, K)
    structure = q @ phase
    e_m = 0.5 * g * np.abs(structure) ** 2
    energy += e_m.sum()
    c = np.conj(structure)[None, :] * phase
    potential += (g[None, :] * c.real).sum(1)
    forces += 2 * pi * q[:, None] * ((g[None, :] * c.imag) @ m)
    factor = 2 * (1 + pi**2 * m2 / alpha**2) / m2
    for v, (a, b) in enumerate(VOIGT):
        virial[v] += (e_m * ((1.0 if a == b else 0.0) - factor * m[:, a] * m[:, b])).sum()
    # Self term and background.
    total = q.sum()
    background = -pi * total**2 / (2 * volume * alpha**2)
    energy += -alpha / sqrt(pi) * (q**2).sum() + background
    potential += -2 * alpha / sqrt(pi) * q - pi * total / (volume * alpha**2)
    virial[:3] += background
    return energy, forces, potential, virial


def random_system(rng, n, box, net=0.0):
    """n random charges in the box (float32 values, so float32 plans see the same system),
    summing to `net`."""
    box = np.asarray(box, dtype=np.float64)
    x = (rng.random((n, 3)) * box).astype(np.float32).astype(np.float64)
    q = rng.uniform(-1, 1, n)
    q += (net - q.sum()) / n
    return x, q.astype(np.float32).astype(np.float64)
