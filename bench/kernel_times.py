#!/usr/bin/env python3
"""Median device time per kernel from `ncu --metrics gpu__time_duration.sum --csv`.

    ncu --metrics gpu__time_duration.sum --csv ... > times.csv
    python3 bench/kernel_times.py times.csv

ncu prints its own lines and the program's output around the CSV; only rows with a
"Kernel Name" and that metric count. Kernel names are shortened to the function name
(namespaces and template arguments kept, the parameter list dropped)."""
import csv
import statistics
import sys


def short(name):
    depth = 0
    for i, c in enumerate(name):  # the parameter list: the first '(' outside <...>
        if c == '<':
            depth += 1
        elif c == '>':
            depth -= 1
        elif c == '(' and depth == 0:
            return name[:i].replace('void ', '', 1)
    return name


def main(path):
    lines = [l for l in open(path, errors='replace') if l.startswith('"')]
    times = {}
    order = []
    for row in csv.DictReader(lines):
        if row.get('Metric Name') != 'gpu__time_duration.sum' or 'Kernel Name' not in row:
            continue
        value = float(row['Metric Value'].replace(',', ''))
        scale = {'nsecond': 1e-3, 'usecond': 1.0, 'msecond': 1e3}.get(row.get('Metric Unit', ''), 1e-3)
        name = short(row['Kernel Name'])
        if name not in times:
            times[name] = []
            order.append(name)
        times[name].append(value * scale)
    if not times:
        print('no gpu__time_duration.sum rows found in', path)
        return 1
    print(f"{'kernel':80s} {'launches':>8s} {'median us':>10s} {'min us':>8s}")
    for name in order:
        t = times[name]
        print(f"{name[:80]:80s} {len(t):8d} {statistics.median(t):10.1f} {min(t):8.1f}")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
