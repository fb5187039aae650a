#!/usr/bin/env python3
"""Median device time per kernel from `ncu --metrics gpu__time_duration.sum --csv`.

    ncu --metrics gpu__time_duration.sum --csv ... > times.csv
    python3 bench/kernel_times.py times.csv

ncu prints its own lines and the program's output around the CSV; only rows with a
"Kernel Name" and that metric count. Kernel names are shortened to the function name
(namespaces and template arguments kept, the parameter list dropped). Where the query
also asked for dram__bytes_read.sum and dram__bytes_write.sum, each kernel's median DRAM
bytes and their rate over its median time are printed beside it; where it asked for
sm__throughput and lts__throughput (.avg.pct_of_peak_sustained_elapsed), the median
percentages of the SMs' and of L2's peak: what bounds each kernel."""
import csv
import statistics
import sys

BYTES = ('dram__bytes_read.sum', 'dram__bytes_write.sum')
BYTE_UNITS = {'byte': 1.0, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9}
PERCENTS = {'sm__throughput.avg.pct_of_peak_sustained_elapsed': 'SM %',
            'lts__throughput.avg.pct_of_peak_sustained_elapsed': 'L2 %'}


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
    launches = {}  # (launch id, metric) -> value, for the bytes
    percents = {}  # metric -> kernel -> values
    order = []
    for row in csv.DictReader(lines):
        metric = row.get('Metric Name')
        if 'Kernel Name' not in row or metric not in ('gpu__time_duration.sum',) + BYTES + tuple(PERCENTS):
            continue
        value = float(row['Metric Value'].replace(',', ''))
        name = short(row['Kernel Name'])
        if metric in PERCENTS:
            percents.setdefault(metric, {}).setdefault(name, []).append(value)
            continue
        if metric in BYTES:
            launches.setdefault((name, row.get('ID')), {})[metric] = value * BYTE_UNITS.get(row.get('Metric Unit', ''), 1.0)
            continue
        scale = {'nsecond': 1e-3, 'usecond': 1.0, 'msecond': 1e3}.get(row.get('Metric Unit', ''), 1e-3)
        if name not in times:
            times[name] = []
            order.append(name)
        times[name].append(value * scale)
    if not times:
        print('no gpu__time_duration.sum rows found in', path)
        return 1
    moved = {}
    for (name, _), metrics in launches.items():
        moved.setdefault(name, []).append(sum(metrics.values()))
    print(f"{'kernel':80s} {'launches':>8s} {'median us':>10s} {'min us':>8s}" + (f" {'DRAM MB':>8s} {'TB/s':>6s}" if moved else '') +
          ''.join(f" {PERCENTS[m]:>6s}" for m in PERCENTS if m in percents))
    for name in order:
        t = times[name]
        line = f"{name[:80]:80s} {len(t):8d} {statistics.median(t):10.1f} {min(t):8.1f}"
        if name in moved:
            mb = statistics.median(moved[name]) / 1e6
            line += f" {mb:8.1f} {mb / statistics.median(t):6.2f}"
        for m in PERCENTS:
            if m in percents:
                line += f" {statistics.median(percents[m].get(name, [0.0])):6.1f}"
        print(line)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
