"""Plots the field energy of a `pmkit pic --csv` run against time, on a log scale, with
the theoretical rate beside it: Landau damping at k lambda_D = 0.5 (field energy ~
exp(2 gamma t), gamma = -0.1533), or the cold two-beam growth rate for two-stream.

    python3 apps/pic/plot_energy.py landau.csv --case landau -o landau.png
"""
import argparse
import csv
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def two_stream_rate(k_v0):
    a2 = k_v0 * k_v0
    w2 = a2 + 0.5 - math.sqrt(2 * a2 + 0.25)
    return math.sqrt(-w2) if w2 < 0 else 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--case", choices=["landau", "two-stream"], default="landau")
    parser.add_argument("--k-v0", type=float, default=0.5, help="two-stream: k times the beam speed")
    parser.add_argument("-o", "--output", default="field_energy.png")
    args = parser.parse_args()
    with open(args.csv) as f:
        rows = [(float(r["t"]), float(r["field"])) for r in csv.DictReader(f)]
    t = [r[0] for r in rows]
    w = [r[1] for r in rows]

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.semilogy(t, w, lw=1.2, label="pmkit pic: field energy")
    if args.case == "landau":
        gamma = -0.1533
        # The theory's line through the first peak after t = 2 (W ~ exp(2 gamma t) cos^2).
        first = next(i for i in range(1, len(w) - 1) if t[i] >= 2 and w[i - 1] < w[i] >= w[i + 1])
        label = "theory: exp(2 gamma t), gamma = -0.1533"
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
