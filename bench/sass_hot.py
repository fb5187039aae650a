#!/usr/bin/env python3
"""The hot SASS of one kernel from `ncu --page source --csv --print-source sass`: every
instruction executed at least FRACTION (default 0.2) as often as the most executed one,
with its warp-level execution count, average active threads and stall samples, in
program order, and the kernel's totals: how to count the steps of a kernel's loop and
what each costs. A report of several launches holds one table per
launch (a header line each, and between tables the next launch's name): RESULT (default
0) picks the table, counted from 0.
    python3 bench/sass_hot.py prof-KERNEL-sass.csv [FRACTION] [RESULT]
"""
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
fraction = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
result = int(sys.argv[3]) if len(sys.argv) > 3 else 0
headers = [k for k, r in enumerate(rows) if "Instructions Executed" in r]
print(f"table {result} of {len(headers)}")
header = rows[headers[result]]
end = headers[result + 1] if result + 1 < len(headers) else len(rows)
data = [r for r in rows[headers[result] + 1:end] if r and r[0].startswith("0x")]  # SASS lines only
executed = header.index("Instructions Executed")
threads = header.index("Avg. Threads Executed")
stalls = header.index("Warp Stall Sampling (All Samples)")
source = header.index("Source")
counts = [int(r[executed]) for r in data]
print(f"instructions executed (warp level) {sum(counts)}, stall samples "
      f"{sum(int(r[stalls]) for r in data)}, SASS lines {len(data)}")
print(f"{'line':>5} {'executed':>10} {'threads':>7} {'stalls':>6}  instruction")
top = max(counts)
for k, r in enumerate(data):
    if counts[k] >= top * fraction:
        print(f"{k:>5} {counts[k]:>10} {r[threads]:>7} {r[stalls]:>6}  {r[source].strip()}")
