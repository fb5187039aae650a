#!/usr/bin/env python3
"""Summarises an A/B run (the `ab` step of bench/device.sh, or bench/ab_plans.sh): for every
case, each side's time in each round, the medians of the sides, new / base, and whether the
difference exceeds the spread between rounds of the same side (noise). It reads gpu_bench's
spread, set_points and interp tables, pic_bench's step, pme_bench's MD steps and
distributed_bench's weak-scaling steps, each after a line "-- round N: SIDE".

    python3 bench/ab_summary.py device-run.txt
"""
import re
import statistics
import sys
from collections import defaultdict


# The first line of each table that is read, and the table's name.
TABLES = [("P2M (spread)", "spread"), ("set_points (binning", "set_points"), ("PIC step", "pic"),
          ("MD steps:", "md"), ("weak scaling:", "weak")]


def parse(path):
    # times[(case, metric)][side] = [one value a round]
    times = defaultdict(lambda: defaultdict(list))
    side, table = None, None
    for line in open(path):
        m = re.match(r"^-- round (\d+): (\S+)", line)
        if m:
            side, table = m.group(2), None
            continue
        started = next((name for prefix, name in TABLES if line.startswith(prefix)), None)
        if started:
            table = started
            continue
        if side is not None and table in ("pic", "md", "weak"):
            parse_step_line(table, line, times, side)
            continue
        fields = line.split()
        if side is None or table is None or len(fields) < 3 or fields[0] == "case":
            continue
        try:
            if table == "spread":
                times[(fields[0], "spread")][side].append(float(fields[1]))
            else:
                times[(fields[0], "set_points")][side].append(float(fields[1]))
                bar = fields.index("|")
                times[(fields[0], "interp")][side].append(float(fields[bar + 1]))
        except (ValueError, IndexError):
            continue
    return times


def parse_step_line(table, line, times, side):
    """The step rows of pic_bench, pme_bench (MD steps) and distributed_bench (weak scaling)."""
    if table == "pic":
        # "128^3 2^24 cic      gradient             1.899 ..." (the variant is 20 wide)
        m = re.match(r"^\s*(\d+\^3 2\^\d+\s+\w+)\s+(.{20})\s+([\d.]+)\s", line)
        if m:
            case = " ".join(m.group(1).split()) + ", " + m.group(2).strip()
            times[(case, "pic step")][side].append(float(m.group(3)))
    elif table == "md":
        # "N  OpenMM | set_points step | update_points at six fractions | default | speed-ups"
        parts = line.split("|")
        if len(parts) >= 5 and parts[0].split() and parts[0].split()[0].isdigit():
            n = parts[0].split()[0]
            times[(f"PME MD step, N = {n}", "set_points")][side].append(float(parts[1]))
            times[(f"PME MD step, N = {n}", "update")][side].append(float(parts[3]))
    elif table == "weak":
        # "  2 GPUs, NCCL                       step    3.185 ms = ..."
        m = re.match(r"^\s+(\d+ GPUs?, [\w ]+?)\s+step\s+([\d.]+) ms", line)
        if m:
            times[("weak: " + m.group(1), "step")][side].append(float(m.group(2)))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    times = parse(sys.argv[1])
    sides = sorted({s for per in times.values() for s in per if s != "new"}) + ["new"]
    base = sides[0]
    print(f"{'case':40s} {'metric':10s} " + " ".join(f"{s + ' (rounds)':>22s}" for s in sides) +
          f" {'new/' + base:>9s}  verdict")
    slower = 0
    for (case, metric), per in times.items():
        if base not in per or "new" not in per:
            continue
        b, n = per[base], per["new"]
        mb, mn = statistics.median(b), statistics.median(n)
        # Noise: the larger spread between the rounds of one side, at least 2% of the time.
        noise = max(max(b) - min(b), max(n) - min(n), 0.02 * mb)
        if mn - mb > noise:
            verdict = "SLOWER"
            slower += 1
        elif mb - mn > noise:
            verdict = "faster"
        else:
            verdict = "same"
        cols = " ".join(f"{' '.join(f'{v:.3f}' for v in per[s]):>22s}" for s in sides)
        print(f"{case:40s} {metric:10s} {cols} {mn / mb:9.3f}  {verdict}")
    print(f"\n{slower} of {len(times)} rows slower than {base} beyond noise "
          "(the larger of the two sides' spread between rounds, at least 2%)")


if __name__ == "__main__":
    main()
