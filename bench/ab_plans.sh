#!/usr/bin/env bash
# An A/B of two builds of pmkit across its plans, on the GPU machine, the way a change that
# must not cost speed is checked: the mesh plan's reference cases (gpu_bench), the PIC step
# (pic_bench --quick), PME's MD step at 10^5 and 10^6 charges on OpenMM's charges
# (pme_bench --openmm, after bench/pme_openmm.py; OpenMM's wheels carried in .whl) and, where
# the machine has two GPUs or more, the distributed plan's weak-scaling step at 2 ranks
# (distributed_bench --skip-strong). The two sides run one after the other within each
# round, so that a slow spell of the machine falls on both; bench/ab_summary.py then gives
# each row's medians, new / base and whether the difference exceeds the rounds' spread.
#   OUT=... bash bench/ab_plans.sh BASE NEW
# BASE and NEW are build folders holding bench/gpu_bench, bench/pic_bench, bench/pme_bench
# and bench/distributed_bench (bench/prebuild.sh's build-device layout). PMKIT_AB_ROUNDS
# (default 2) rounds; PMKIT_AB_PARTS (default "mesh pic pme distributed") the parts to run;
# PMKIT_AB_CASES the gpu_bench cases.
set -uo pipefail
cd "$(dirname "$0")/.."
base="$1" new="$2"
out="${OUT:-bench/out}"
mkdir -p "$out"
exec > >(tee "$out/ab-plans.txt") 2>&1
parts="${PMKIT_AB_PARTS:-mesh pic pme distributed}"
want() { [[ " $parts " == *" $1 "* ]]; }
status=0

echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
gpus=$(nvidia-smi -L | wc -l)

cases_dir="${TMPDIR:-/tmp}/pmkit-pme"
if want pme && [ -f "$cases_dir/pme-case-1000000.bin" ]; then
  echo "== OpenMM's charges and times: from this machine's earlier call ($cases_dir)"
elif want pme; then
  echo "== OpenMM's charges and times (bench/pme_openmm.py)"
  site="${TMPDIR:-/tmp}/pmkit-site"
  mkdir -p "$cases_dir"
  nvidia_libs=$(python3 -c 'import nvidia, glob; print(":".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")))' 2>/dev/null || true)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl &&
    PYTHONPATH="$site" LD_LIBRARY_PATH="$nvidia_libs:${LD_LIBRARY_PATH:-}" PYTHONUNBUFFERED=1 \
      python3 bench/pme_openmm.py "$cases_dir" 100000 1000000 || { echo "OpenMM failed: no PME rows"; parts=${parts/pme/}; }
fi

# The reference cases of the mesh plan: the default A/B cases of device.sh, the small and
# the double and deterministic spreads, and 2D.
mesh_cases=${PMKIT_AB_CASES:-p2m-mp4-3d-f-2^24-256 p2m-mp4-3d-f-2^24-128 p2m-linear-3d-f-2^24-256 p2m-mp4-3d-f-2^20-64 p2m-mp4-3d-d-2^24-256 det-mp4-3d-f-2^24-128 p2m-mp4-2d-f-2^22-2048 p2m-mp4-3d-f-2^24-256-binned}
case_args=()
for c in $mesh_cases; do case_args+=(--case "$c"); done

run_side() {  # $1: build folder
  local b=$1
  if want mesh; then "$b/bench/gpu_bench" "${case_args[@]}" 2>&1 | sed -n '/^P2M (spread)/,/^$/p;/^set_points (binning/,/^$/p' || status=1; fi
  if want pic; then "$b/bench/pic_bench" --quick 2>&1 | sed -n '/^PIC step/,/^target/p' || status=1; fi
  if want pme; then "$b/bench/pme_bench" --openmm "$cases_dir" 100000 1000000 2>&1 | sed -n '/^MD steps/,/^(default/p' || status=1; fi
  if want distributed && [ "$gpus" -ge 2 ]; then
    mkdir -p "${TMPDIR:-/tmp}/pmkit-ab-distributed"
    OUT="${TMPDIR:-/tmp}/pmkit-ab-distributed" bash bench/distributed_device.sh "$b/bench" "" "2" --nccl-only --skip-strong 2>&1 | sed -n '/^weak scaling/,/by the whole/p'
  fi
}

# PMKIT_AB_FIRST_ROUND numbers the rounds of a run that continues an earlier call's.
first=${PMKIT_AB_FIRST_ROUND:-1}
for round in $(seq "$first" $((first + ${PMKIT_AB_ROUNDS:-2} - 1))); do
  for side in base new; do
    echo "-- round $round: $side"
    if [ $side = base ]; then run_side "$base"; else run_side "$new"; fi
  done
done

echo "== summary (bench/ab_summary.py)"
python3 bench/ab_summary.py "$out/ab-plans.txt"
exit $status
