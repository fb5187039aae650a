"""Plots the field energy of a `pmkit pic --csv` run against time, on a log scale, with
the theoretical rate beside it: Landau damping at the run's k (field energy ~
exp(2 gamma t), gamma the imaginary part of the Maxwellian dispersion relation's root,
as `pmkit pic` prints it), or the cold two-beam growth rate for two-stream.

    python3 apps/pic/plot_energy.py landau.csv --case landau --k 0.5 -o landau.png

The theory is apps/pic/theory.cpp's, in Python: the Faddeeva function by the rational
series of J. A. C. Weideman, "Computation of the Complex Error Function", SIAM J. Numer.
Anal. 31 (1994) 1497-1518, and Newton on 1 + (1 + zeta Z(zeta)) / k^2 = 0 from the
weak-damping estimate, continued along k.
"""
import argparse
import cmath
import csv
import math

TERMS = 32


def _weideman_series():
    m = 2 * TERMS
    L = math.sqrt(TERMS / math.sqrt(2.0))
    a = [0.0] * (TERMS + 1)
    for n in range(1, TERMS + 1):
        total = 0.0
        for k in range(-m + 1, m):
            theta = k * math.pi / m
            t = L * math.tan(0.5 * theta)
            total += math.exp(-t * t) * (L * L + t * t) * math.cos(n * theta)
        a[n] = total / (2 * m)
    return L, a


_SERIES = _weideman_series()


def faddeeva(z):
    """w(z) = exp(-z^2) erfc(-i z); the lower half-plane by w(z) = 2 exp(-z^2) - w(-z)."""
    if z.imag < 0:
        return 2 * cmath.exp(-z * z) - faddeeva(-z)
    L, a = _SERIES
    below = L - 1j * z
    ratio = (L + 1j * z) / below
    p = 0j
    for n in range(TERMS, 0, -1):
        p = p * ratio + a[n]
    return 2 * p / (below * below) + 1 / (math.sqrt(math.pi) * below)


def _newton(k, zeta):
    for _ in range(60):
        Z = 1j * math.sqrt(math.pi) * faddeeva(zeta)
        one_plus = 1 + zeta * Z
        f = k * k + one_plus
        step = f / (Z - 2 * zeta * one_plus)
        zeta -= step
        if abs(step) <= 1e-12 * abs(zeta) or abs(f) <= 1e-12 * (1 + k * k):
            return zeta
    raise ValueError(f"no root of the dispersion relation found at k = {k}")


def landau_root(k):
    """The least damped root omega of 1 + (1 + zeta Z(zeta)) / k^2 = 0, zeta = omega / (sqrt 2 k)."""
    start = min(k, 0.3)
    omega = math.sqrt(1 + 3 * start * start)
    gamma = -math.sqrt(math.pi / 8) * math.exp(-0.5 / (start * start) - 1.5) / start**3
    zeta = _newton(start, complex(omega, gamma) / (math.sqrt(2) * start))
    steps = math.ceil((k - start) / 0.05)
    for s in range(1, steps + 1):
        before, after = start + (k - start) * (s - 1) / steps, start + (k - start) * s / steps
        zeta = _newton(after, zeta * before / after)
    root = math.sqrt(2) * k * zeta
    return complex(root.real, min(0.0, root.imag))


def two_stream_rate(k_v0):
    a2 = k_v0 * k_v0
    w2 = a2 + 0.5 - math.sqrt(2 * a2 + 0.25)
    return math.sqrt(-w2) if w2 < 0 else 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--case", choices=["landau", "two-stream"], default="landau")
    parser.add_argument("--k", type=float, default=0.5, help="landau: the run's --k")
    parser.add_argument("--k-v0", type=float, default=0.5, help="two-stream: k times the beam speed")
    parser.add_argument("-o", "--output", default="field_energy.png")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(args.csv) as f:
        rows = [(float(r["t"]), float(r["field"])) for r in csv.DictReader(f)]
    t = [r[0] for r in rows]
    w = [r[1] for r in rows]

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.semilogy(t, w, lw=1.2, label="pmkit pic: field energy")
    if args.case == "landau":
        gamma = landau_root(args.k).imag
        # The theory's line through the first peak after the free streaming (t = 1 / k).
        first = next(i for i in range(1, len(w) - 1) if t[i] >= 1 / args.k and w[i - 1] < w[i] >= w[i + 1])
        label = f"theory at k = {args.k:g}: exp(2 gamma t), gamma = {gamma:.4f}"
    else:
        gamma = two_stream_rate(args.k_v0)
        peak = max(w)
        first = min(i for i in range(len(w)) if w[i] >= 1e-3 * peak)
        label = f"cold two-beam theory: exp(2 gamma t), gamma = {gamma:.4f}"
    line = [w[first] * math.exp(2 * gamma * (x - t[first])) for x in t]
    ax.semilogy(t, line, "--", color="k", lw=1, label=label)
    ax.set_ylim(min(w) * 0.5, max(w) * 3)
    ax.set_xlabel("t (1 / plasma frequency)")
    ax.set_ylabel("field energy")
    ax.legend(loc="best")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


if __name__ == "__main__":
    main()
