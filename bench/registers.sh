#!/usr/bin/env bash
# Registers, stack and spills of every kernel of one CUDA translation unit, as ptxas
# reports them for sm_90 (no GPU needed; nvcc only): what the register budgets of the
# pair and spread kernels are chosen by.
#   bash bench/registers.sh src/cuda/pairs/builtin_float.cu [REGEX] [-DNAME=VALUE ...]
# REGEX (Python syntax) keeps the kernels whose mangled name matches it; the -D options
# go to nvcc (to try a constant without editing the tree).
set -euo pipefail
cd "$(dirname "$0")/.."
tu="${1:?a .cu file of the library}"
regex="${2:-.}"
shift $(( $# >= 2 ? 2 : 1 ))
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
nvcc -O3 -DNDEBUG -DPMKIT_WITH_CUDA "$@" -arch=sm_90 -cubin -Xptxas -v --expt-relaxed-constexpr -std=c++17 \
  -Iinclude -Isrc "$tu" -o "$out/tu.cubin" >"$out/ptxas.txt" 2>&1 || { tail -20 "$out/ptxas.txt"; exit 1; }
python3 - "$out/ptxas.txt" "$regex" <<'PY'
import re, sys
log, pattern = sys.argv[1], re.compile(sys.argv[2])
name, frame, spill = None, "0", "0"
print(f"{'registers':>9} {'stack':>6} {'spill':>6}  kernel (mangled)")
for line in open(log):
    m = re.search(r"Compiling entry function '([^']+)'", line)
    if m:
        name, frame, spill = m.group(1), "0", "0"
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", line)
    if m:
        frame, spill = m.group(1), m.group(2)
    m = re.search(r"Used (\d+) registers", line)
    if m and name and pattern.search(name):
        print(f"{m.group(1):>9} {frame:>6} {spill:>6}  {name}")
PY
