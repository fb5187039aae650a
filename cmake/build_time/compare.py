#!/usr/bin/env python3
"""compare.py BEFORE_LOG AFTER_LOG: the per-object table of docs/history/build-time.md from
two timelog.sh logs (CPU and wall seconds), and each run's totals: the CPU sum, the wall
time from the first start to the last end, and the time 2 workers would take at the CPU
times, each taking the longest object left."""
import sys, heapq
def load(path):
    d = {}
    for line in open(path):
        f = line.split()
        d[f[0]] = (float(f[2]) + float(f[3]), float(f[1]), float(f[4]), float(f[5]))
    return d
b, a = load(sys.argv[1]), load(sys.argv[2])
def name(o):
    tgt = o.split(".dir/")[0].split("/")[-1]
    return f"`{o.split('.dir/')[-1][:-2]}` ({tgt})"
print("| object | before: CPU s | before: wall s | after: CPU s | after: wall s |\n|---|---:|---:|---:|---:|")
for o in sorted(b, key=lambda o: -b[o][0]):
    ac, aw = (f"{a[o][0]:.0f}", f"{a[o][1]:.0f}") if o in a else ("", "")
    print(f"| {name(o)} | {b[o][0]:.0f} | {b[o][1]:.0f} | {ac} | {aw} |")
def span(d):
    return max(v[3] for v in d.values()) - min(v[2] for v in d.values())
def mk(d):
    w = [0.0, 0.0]
    for o in sorted(d, key=lambda o: -d[o][0]):
        t = heapq.heappop(w); heapq.heappush(w, t + d[o][0])
    return max(w)
print("\n| run | objects | CPU sum | wall, first start to last end (shared machine) | longest object (CPU) | 2 workers, longest first (CPU) |\n|---|---:|---:|---:|---:|---:|")
for label, d in [("before", b), ("after", a)]:
    if not d: continue
    cpu = sum(v[0] for v in d.values())
    print(f"| {label} | {len(d)} | {cpu:.0f} s ({cpu/60:.1f} min) | {span(d):.0f} s | {max(v[0] for v in d.values()):.0f} s | {mk(d):.0f} s |")
