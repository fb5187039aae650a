#!/usr/bin/env bash
# One call on the GPU machine: build, GPU tests (also under compute-sanitizer memcheck
# and racecheck), the PyTorch baseline, the side-by-side GPU benchmark and the CPU
# benchmark on the host's cores. Logs go to $OUT (or bench/out); the table is last.
#   bash bench/device.sh [--quick]
# PMKIT_DEVICE_STEPS="tests pairs" (a development run) limits the steps after the build
# to those named: tests, sanitizer, torch, cpu, pairs, mesh, gradient, methods, profile.
# "python" (never in the default) builds the Python extension with CUDA and runs pytest
# and bench/python_bench.py (nanobind must be importable: carry it as a wheel).
# PMKIT_TEST_FILTER (a gtest filter) runs the tests step as pmkit_tests with that filter
# instead of every test (a development run). "gradient" runs gpu_bench --gradient:
# interp_gradient and spread_gradient next to interp, spread and the finite-difference
# route (issue 33's targets), into $OUT/gpu_bench-gradient.txt. "methods" times
# the spread methods forced one by one (gpu_bench --method) on the cases around Auto's
# switch between them (PMKIT_METHOD_CASES). PMKIT_SANITIZER_TOOLS
# (default "memcheck racecheck") picks the sanitizer tools: racecheck over every CUDA
# test with a cold build passes a call's 10 minutes, so racecheck gets a call of its own
# on the machine a previous call left warm (its build is kept); PMKIT_SANITIZER_FILTER
# (a gtest filter; default every CUDA test) narrows them to the tests of a change, and
# PMKIT_SANITIZER_KERNELS to the kernels whose names contain it, and PMKIT_SANITIZER_SHARDS
# runs that many gtest shards at once. Results files come from
# full runs. "stores" (never in the default) runs bench/store_probe, what scattered stores
# cost on the device; "shared" (never in the default) bench/shared_probe, what the spread's
# shared-memory adds cost alone. "papers" (never in the default) runs bench/paper_cases: the
# seeds' own cases (PPM's Table 2 and Fig. 11, Barracuda's Table 1) beside the papers'
# figures, into $OUT/paper_cases.txt; PMKIT_COMMIT names the commit in its header. "profile" (never in the default) runs Nsight Compute on the tile kernels of
# PMKIT_PROFILE_CASE (a gpu_bench case) and prints their details and hottest SASS lines.
# "pic" (never in the default) runs the PIC step of `pmkit pic` (bench/pic_bench) beside the
# PyTorch step (bench/pic_torch.py) from the same run, into $OUT/pic_bench.txt, then the
# CPU-against-CUDA PIC test and a GPU-size Landau run (3D, 2^23 electrons) whose fitted
# damping and frequency it prints, its diagnostics in $OUT/landau-gpu.csv.
# "kernels" (never in the default) prints the median device time of every kernel that
# gpu_bench --case PMKIT_KERNELS_CASE launches (ncu, gpu__time_duration.sum; the first
# PMKIT_KERNELS_LAUNCHES launches whose name matches PMKIT_KERNELS_REGEX), through
# bench/kernel_times.py: where set_points' time goes, kernel by kernel.
# "pme" (never in the default) runs OpenMM's PME (bench/pme_openmm.py, its wheels carried in
# .whl) and pmkit's (bench/pme_bench) on the same charges, into $OUT/pme_bench.txt, and PME's
# real space by pair method beside OpenMM's direct space (bench/pme_real_space_bench), into
# $OUT/pme_real_space_bench.txt;
# PMKIT_PME_SPREADS=1 adds Guo et al.'s spreading table; PMKIT_PME_KERNELS=N the device time of
# every kernel of pmkit's MD step at N charges (ncu).
# "l2fetch" (never in the default) runs gpu_bench on PMKIT_L2_CASES at each L2 fetch
# granularity of PMKIT_L2_FETCH (bytes, or "default"; gpu_bench --l2-fetch), rounds as ab's.
# "ab" (never in the default) times this tree against a base tree, the way a tuning
# change is measured (docs/tuning.md): PMKIT_AB_BASE is a tarball of the base (git archive REV -o
# .snap/base.tar, carried to the device), or several, space-separated (variants of a
# constant: A/B/C), each labelled by its file name; every gpu_bench runs the cases
# PMKIT_AB_CASES (default: five of the reference table) one after the other,
# PMKIT_AB_ROUNDS rounds (default 2), so that a slow spell of the machine falls on all.
# PMKIT_AB_BENCH=pair_bench times the pair traversal instead: pair_bench --gpu-only with
# PMKIT_AB_ARGS (default "--size 32"), its main table each round.
# Programs built beforehand on the caller's machine (bench/prebuild.sh, carried as
# .prebuilt) replace the build where they are this tree's (same source hash), hold every
# program the steps run and start here; the tests then run as four gtest shards at once
# (ctest's files name the build folder's absolute path) and the CLI's smoke tests, CI's,
# are left out.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/out}"
mkdir -p "$out"
# Everything printed also goes to $OUT/device-run.txt, so that a caller who keeps only the
# tail of stdout still gets the whole output back as a file for bench/results.
exec > >(tee "$out/device-run.txt") 2>&1
quick="${1:-}"
jobs=$(nproc)
status=0
step() { echo; echo "== $*"; }
steps="${PMKIT_DEVICE_STEPS:-tests sanitizer torch cpu pairs mesh gradient methods}"
want() { [[ " $steps " == *" $1 "* ]]; }
# gpu_bench's arguments for the named cases, into the array case_args.
set_case_args() { case_args=(); local c; for c in "$@"; do case_args+=(--case "$c"); done; }
# gpu_bench's spread table and its set_points / interp table (and what $1 adds, a sed
# script of its own: the steps that compare runs print them alone).
mesh_tables() { sed -n "${1:-}"'/^P2M (spread)/,/^$/p;/^set_points (binning/,/^$/p'; }
# Runs a gtest program as $1 shards at once, shard K's output in $2-K.log; the rest is
# the command (a prefix such as compute-sanitizer, then the program and its arguments).
# Fails where any shard failed.
run_shards() {
  local shards=$1 logs=$2 k rc=0 pids=()
  shift 2
  for ((k = 0; k < shards; ++k)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$k "$@" >"$logs-$k.log" 2>&1 &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || rc=$?; done
  return $rc
}
# gtest's own summaries in the given logs, summed, then the failed tests by name.
gtest_summary() {
  awk '/tests? from .* ran\./ {ran += $2} /^\[  PASSED  \]/ {passed += $4} /^\[  SKIPPED \] [0-9]/ {skipped += $4}
       /^\[  FAILED  \] [0-9]+ tests?,/ {failed += $4}
       END {printf "%d tests ran: %d passed, %d failed, %d skipped\n", ran, passed, failed, skipped}' "$@"
  grep -hE "^\[  FAILED  \] [A-Za-z]" "$@" | sort -u
}

step "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$out/device.txt"
nvcc --version | tail -1
# The device copy has no .git: the caller passes PMKIT_COMMIT (see bench/results/README.md).
echo "commit ${PMKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%F)"

# The A/B step's bases and their builds (below).
ab_root="${TMPDIR:-/tmp}/pmkit-ab"
ab_builds=()
ab_bench="${PMKIT_AB_BENCH:-gpu_bench}"
want ab && : "${PMKIT_AB_BASE:?PMKIT_AB_BASE names the base tarball(s)}"

# The prebuilt programs, unpacked where they are this tree's and start here (a program
# built against a newer C library than this machine's would not).
prebuilt=0
if [ -f .prebuilt/programs.tar.xz ]; then
  step "prebuilt programs (bench/prebuild.sh)"
  want_hash=$(cat .prebuilt/source.hash 2>/dev/null) have_hash=$(bash bench/prebuild.sh --hash)
  if [ "$want_hash" != "$have_hash" ]; then
    echo "not this tree's (sources $have_hash, programs $want_hash): building instead"
  else
    unpacked="${TMPDIR:-/tmp}/pmkit-prebuilt"
    rm -rf "$unpacked" && mkdir -p "$unpacked" && tar -xJf .prebuilt/programs.tar.xz -C "$unpacked"
    prebuilt=1
    for f in "$unpacked"/build-device/*/* "$unpacked"/build-device/pmkit "$unpacked"/ab/*/build-device/bench/*; do
      [ -f "$f" ] || continue
      if ldd "$f" 2>&1 | grep -q "not found"; then echo "does not start here: $f"; ldd "$f" | grep "not found"; prebuilt=0; fi
    done
    while read -r _ f; do
      [ -f "$unpacked/build-device/$f" ] || { echo "not prebuilt: $f"; prebuilt=0; }
    done < <(bash bench/prebuild.sh --programs "$steps")
    if want ab; then
      for tarball in $PMKIT_AB_BASE; do
        side=$(basename "$tarball" .tar)
        [ "$(cat "$unpacked/ab/$side/tarball.sha256" 2>/dev/null)" = "$(sha256sum "$tarball" | cut -c1-64)" ] ||
          { echo "base $side not prebuilt from this tarball"; prebuilt=0; }
      done
    fi
    if [ $prebuilt = 1 ]; then
      mkdir -p build-device && cp -r "$unpacked"/build-device/. build-device/
      if want ab; then
        rm -rf "$ab_root" && mkdir -p "$ab_root" && cp -r "$unpacked"/ab/. "$ab_root"/
      fi
      echo "prebuilt: sources $have_hash; $(cd "$unpacked/build-device" && find . -type f | sort | tr '\n' ' ')"
    else
      echo "building instead"
    fi
  fi
fi

# The A/B step's base trees build (gpu_bench only) alongside this tree, sharing half the
# cores: one after the other, two base builds would take a whole call on a cold machine.
if want ab && [ $prebuilt = 0 ]; then
  rm -rf "$ab_root" && mkdir -p "$ab_root"
  for tarball in $PMKIT_AB_BASE; do
    dir="$ab_root/$(basename "$tarball" .tar)"
    mkdir -p "$dir" && tar -xf "$tarball" -C "$dir" || exit 1
    (cd "$dir" && cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DPMKIT_CUDA=ON \
       -DCMAKE_CUDA_ARCHITECTURES=90 >build.log 2>&1 &&
     cmake --build build-device -j$(( (jobs + 1) / 2 )) --target "$ab_bench" >>build.log 2>&1) &
    ab_builds+=($!)
  done
  jobs=$(( (jobs + 1) / 2 ))
fi

if [ $prebuilt = 0 ]; then
step "build (Release, sm_90)"
# A run of steps that only run gpu_bench (ab, methods, mesh, gradient, profile, kernels)
# builds gpu_bench only; filtered tests (PMKIT_TEST_FILTER) add pmkit_tests alone.
targets=(--target gpu_bench)
want ab && [ "$ab_bench" = pair_bench ] && targets+=(--target pair_bench)
[ -n "${PMKIT_TEST_FILTER:-}" ] && want tests && targets+=(--target pmkit_tests)
for s in $steps; do
  case $s in ab | methods | mesh | gradient | profile | kernels | l2fetch | papers | python | pme | pic) ;;
    tests) [ -n "${PMKIT_TEST_FILTER:-}" ] || targets=() ;;
    *) targets=() ;; esac
done
want papers && [ ${#targets[@]} -gt 0 ] && targets+=(--target paper_cases)
want pme && [ ${#targets[@]} -gt 0 ] && targets+=(--target pme_bench --target pme_real_space_bench)
want pic && [ ${#targets[@]} -gt 0 ] && targets+=(--target pic_bench --target pmkit_tests --target pmkit_cli)
python_flags=()
if want python; then
  python_flags=(-DPMKIT_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)")
  [ ${#targets[@]} -gt 0 ] && targets+=(--target _pmkit)
fi
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DPMKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  ${python_flags[@]+"${python_flags[@]}"} >"$out/build.log" 2>&1 &&
  cmake --build build-device -j"$jobs" ${targets[@]+"${targets[@]}"} >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "built"
if want ab; then
  for b in "${ab_builds[@]}"; do wait "$b" || { echo "a base build failed"; tail -20 "$ab_root"/*/build.log; exit 1; }; done
  jobs=$(nproc)
fi
fi

if want tests && [ -n "${PMKIT_TEST_FILTER:-}" ]; then
step "tests matching $PMKIT_TEST_FILTER"
./build-device/tests/pmkit_tests --gtest_filter="$PMKIT_TEST_FILTER" --gtest_brief=1 >"$out/ctest.log" 2>&1 || status=1
gtest_summary "$out/ctest.log"
elif want tests && [ $prebuilt = 0 ]; then
step "tests (all, CUDA included)"
ctest --test-dir build-device -j4 --output-on-failure >"$out/ctest.log" 2>&1 || status=1
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)" "$out/ctest.log"
echo "skipped: $(grep -c '(Skipped)' "$out/ctest.log") (CPU-only determinism checks instantiated for Cuda)"
elif want tests; then
step "tests (every gtest test, CUDA included; four shards at once)"
# The shards' logs stay out of $OUT (the device tool brings back at most 8 files); their
# concatenation is ctest.log.
shard_logs="${TMPDIR:-/tmp}/pmkit-shards" && rm -rf "$shard_logs" && mkdir -p "$shard_logs"
run_shards 4 "$shard_logs/gtest" ./build-device/tests/pmkit_tests --gtest_brief=1 || status=1
cat "$shard_logs"/gtest-*.log >"$out/ctest.log"
gtest_summary "$out/ctest.log"
fi

if want sanitizer; then
step "compute-sanitizer (every test that runs on CUDA)"
# PMKIT_SANITIZER_KERNELS (a substring of kernel names) checks only the kernels it names;
# the rest run uninstrumented, so a test too large for racecheck as a whole can still
# have one kernel checked.
kernel_filter=()
[ -n "${PMKIT_SANITIZER_KERNELS:-}" ] && kernel_filter=(--kernel-name "kns=$PMKIT_SANITIZER_KERNELS") &&
  echo "instrumented: kernels whose name contains $PMKIT_SANITIZER_KERNELS"
# PMKIT_SANITIZER_SHARDS (default 1) runs the tests as that many gtest shards at once,
# each under its own compute-sanitizer (racecheck over the whole suite in one process
# nearly fills a call; the host's CPUs do much of a sanitizer's work).
shards="${PMKIT_SANITIZER_SHARDS:-1}"
shard_dir="${TMPDIR:-/tmp}/pmkit-sanitizer" && rm -rf "$shard_dir" && mkdir -p "$shard_dir"
for tool in ${PMKIT_SANITIZER_TOOLS:-memcheck racecheck}; do
  started=$(date +%s)
  run_shards "$shards" "$shard_dir/$tool" env PMKIT_TEST_SMALL=1 compute-sanitizer --tool $tool --error-exitcode 9 \
    ${kernel_filter[@]+"${kernel_filter[@]}"} ./build-device/tests/pmkit_tests \
    --gtest_filter="${PMKIT_SANITIZER_FILTER:-Cuda*:*/Cuda:*/Cuda_*}" --gtest_brief=1
  rc=$?
  cat "$shard_dir/$tool"-*.log >"$out/sanitizer-$tool.log"
  echo "$tool: exit $rc ($shards shard(s), $(( $(date +%s) - started )) s); $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$shard_dir/$tool"-*.log | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  gtest_summary "$out/sanitizer-$tool.log"
  [ $rc -eq 0 ] || status=1
done

fi

if want torch; then
step "PyTorch baseline"
PYTHONUNBUFFERED=1 python3 bench/torch_baseline.py $quick >"$out/torch.csv" 2>"$out/torch.err" || { echo "torch failed"; tail -5 "$out/torch.err"; }
cat "$out/torch.csv"

fi

if want cpu; then
step "CPU backend on $jobs host cores (pmkit bench)"
./build-device/pmkit bench >"$out/cpu_bench.txt" 2>&1 || status=1
tail -32 "$out/cpu_bench.txt"

fi

if want pairs; then
step "Cutoff pairs on the GPU and on $jobs host cores"
./build-device/bench/pair_bench $quick 2>"$out/pair_bench.err" | tee "$out/pair_bench.txt" || status=1

fi

if want pme; then
step "PME: OpenMM 8.6.1 (CUDA, single) and pmkit on the same charges, 10^4, 10^5 and 10^6 at water density"
# OpenMM's wheels travel in .whl (openmm, openmm-cuda-13; docs/pme.md); the CUDA 13
# libraries its CUDA platform loads are those of the machine's PyTorch. The cases (positions,
# charges, OpenMM's forces: 56 MB at 10^6) stay out of $OUT.
site="${TMPDIR:-/tmp}/pmkit-site" cases="${TMPDIR:-/tmp}/pmkit-pme"
mkdir -p "$cases"
nvidia_libs=$(python3 -c 'import nvidia, glob; print(":".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")))' 2>/dev/null || true)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl &&
  PYTHONPATH="$site" LD_LIBRARY_PATH="$nvidia_libs:${LD_LIBRARY_PATH:-}" PYTHONUNBUFFERED=1 \
    python3 bench/pme_openmm.py "$cases" ${PMKIT_PME_SIZES:-} 2>&1 | tee "$out/pme_openmm.txt" || status=1
./build-device/bench/pme_bench --openmm "$cases" ${PMKIT_PME_SIZES:-} 2>&1 | tee "$out/pme_bench.txt" || status=1
./build-device/bench/pme_real_space_bench --openmm "$cases" ${PMKIT_PME_SIZES:-} 2>&1 |
  tee "$out/pme_real_space_bench.txt" || status=1
# PMKIT_PME_SPREADS=1 adds Guo et al.'s table (1 and 20 spreads a binning).
if [ -n "${PMKIT_PME_SPREADS:-}" ]; then
  ./build-device/bench/pme_bench --spreads 2>&1 | tee -a "$out/pme_bench.txt" || status=1
fi
# PMKIT_PME_KERNELS=N adds the device time, DRAM bytes and SM and L2 load of every kernel of
# 20 MD steps at N charges (Nsight Compute, caches and clocks left as they run; medians by
# kernel).
if [ -n "${PMKIT_PME_KERNELS:-}" ]; then
  step "PME: device time per kernel (ncu) of pmkit's MD step at ${PMKIT_PME_KERNELS} charges"
  # With the SMs' and L2's share of their peak where this ncu knows the metrics.
  pme_ncu() {
    ncu --metrics "gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum$1" --csv --cache-control none \
      --clock-control none ./build-device/bench/pme_bench --md-kernels "$cases" "$PMKIT_PME_KERNELS" 20 \
      >"$out/pme-kernel-times.csv" 2>&1
  }
  pme_ncu ",sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed" ||
    pme_ncu "" || echo "ncu failed: $(tail -3 "$out/pme-kernel-times.csv")"
  python3 bench/kernel_times.py "$out/pme-kernel-times.csv" | tee -a "$out/pme_bench.txt"
fi
fi

if want mesh; then
step "GPU benchmark"
./build-device/bench/gpu_bench $quick --torch "$out/torch.csv" 2>&1 | tee "$out/gpu_bench.txt"
fi
if want gradient; then
step "gradient at the particles (gpu_bench --gradient)"
./build-device/bench/gpu_bench $quick --gradient 2>&1 | tee "$out/gpu_bench-gradient.txt"
fi
if want python; then
step "Python package with the CUDA backend: pytest on the GPU, then bench/python_bench.py"
# The extension built above goes beside the package's sources, as an in-place build;
# nanobind (and pytest, where the image lacks it) come as wheels on PYTHONPATH.
cp build-device/python/pmkit/_pmkit*.so python/pmkit/ || status=1
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
# One process a test file, so that a crash in one (a segfault ends its process) leaves the
# others' results standing and names its file.
: >"$out/pytest.log"
for f in python/tests/test_*.py; do
  echo "-- $f" >>"$out/pytest.log"
  python3 -X faulthandler -m pytest "$f" -q -rs -p no:cacheprovider >>"$out/pytest.log" 2>&1 ||
    { status=1; echo "$f: pytest exit $?"; }
done
grep -E "^-- |^(SKIPPED|FAILED|ERROR)|passed|failed|Fatal Python error" "$out/pytest.log" | tail -40
python3 examples/python/deposit.py --output "$out/deposit.png" || status=1
PYTHONUNBUFFERED=1 python3 bench/python_bench.py $quick 2>&1 | tee "$out/python_bench.txt" || status=1
fi
if want l2fetch; then
step "the L2 fetch granularity (gpu_bench --l2-fetch), baselines included"
set_case_args ${PMKIT_L2_CASES:-p2m-mp4-3d-f-2^24-256 p2m-linear-3d-f-2^24-256 p2m-mp4-3d-f-2^24-256-3props p2m-mp4-3d-f-2^24-256-binned p2m-mp4-2d-f-2^22-2048}
for round in $(seq "${PMKIT_AB_ROUNDS:-2}"); do
  for bytes in ${PMKIT_L2_FETCH:-default 32 128}; do
    echo "-- round $round: L2 fetch $bytes"
    if [ "$bytes" = default ]; then fetch=(); else fetch=(--l2-fetch "$bytes"); fi
    ./build-device/bench/gpu_bench ${fetch[@]+"${fetch[@]}"} "${case_args[@]}" 2>&1 | mesh_tables '/^device:/p;'
  done
done
fi
if want methods; then
step "spread methods forced, around Auto's switch between them"
method_cases="${PMKIT_METHOD_CASES:-p2m-mp4-3d-f-2^20-256 p2m-mp4-3d-f-2^18-256 p2m-mp4-3d-f-2^17-256 p2m-mp4-3d-f-2^16-256 p2m-linear-2d-f-2^18-2048 p2m-mp4-2d-f-2^16-2048 p2m-mp4-2d-f-2^20-4096 p2m-linear-2d-f-2^20-4096 p2m-mp4-3d-f-2^20-64 p2m-mp4-3d-f-2^20-128-clustered p2m-mp4-2d-f-2^20-1024-clustered}"
set_case_args $method_cases
for m in tiles atomics cells; do
  echo "-- --method $m"
  ./build-device/bench/gpu_bench $quick --method $m "${case_args[@]}" >"$out/gpu_bench-$m.txt" 2>&1
  sed -n '/^P2M (spread)/,/^$/p' "$out/gpu_bench-$m.txt"
done
fi
if want stores; then
step "scattered stores (bench/store_probe)"
./build-device/bench/store_probe 2>&1 | tee "$out/store_probe.txt"
fi
if want shared; then
step "shared-memory adds and reads alone (bench/shared_probe)"
./build-device/bench/shared_probe 2>&1 | tee "$out/shared_probe.txt"
fi
if want papers; then
step "the papers' own cases (bench/paper_cases)"
PMKIT_COMMIT="${PMKIT_COMMIT:-unknown}" ./build-device/bench/paper_cases $quick >"$out/paper_cases.txt" 2>&1 || status=1
cat "$out/paper_cases.txt"
fi
if want profile; then
step "ncu profile of ${PMKIT_PROFILE_CASE:=p2m-mp4-3d-f-2^24-256}"
# The report, its SASS and raw pages stay in a scratch folder (the device tool brings back
# at most 8 files from $OUT); the details page comes back, and its headline figures and
# warp stall reasons are printed here.
prof="${TMPDIR:-/tmp}/pmkit-profile" && rm -rf "$prof" && mkdir -p "$prof"
for k in ${PMKIT_PROFILE_KERNELS:-spread_tiles interp_tiles scatter classify}; do
  ncu --clock-control none --kernel-name "regex:${k}" --launch-skip 2 --launch-count 1 --set full \
    -f -o "$prof/prof-$k" ./build-device/bench/gpu_bench --case "$PMKIT_PROFILE_CASE" >"$prof/prof-$k.log" 2>&1 ||
    { echo "ncu $k failed"; tail -5 "$prof/prof-$k.log"; continue; }
  ncu -i "$prof/prof-$k.ncu-rep" --page details >"$out/prof-$k-details.txt" 2>&1
  ncu -i "$prof/prof-$k.ncu-rep" --page source --csv --print-source sass >"$prof/prof-$k-sass.csv" 2>&1
  { echo; echo "== hot SASS (bench/sass_hot.py)"; python3 bench/sass_hot.py "$prof/prof-$k-sass.csv" 0.5 2>&1; } \
    >>"$out/prof-$k-details.txt"
  echo "-- $k"
  grep -E "Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|Executed Ipc A|Issue Slots Busy|L1/TEX Hit|L2 Hit|Theoretical Occ|Block Limit|Warp Cycles Per Issued|Eligible Warps|No Eligible" "$out/prof-$k-details.txt" | head -24
  # The stall reasons ncu names (its rules' text), for where the warps wait.
  grep -oE "[^.]*(stall|stalled)[^.]*\." "$out/prof-$k-details.txt" | head -6 | cut -c1-300
  # What DRAM and L2 moved: bytes against the kernel's own streams tell a sector's
  # read-modify-write (partial sectors leaving L2) from a bound elsewhere.
  ncu -i "$prof/prof-$k.ncu-rep" --page raw --csv >"$prof/prof-$k-raw.csv" 2>&1
  python3 - "$prof/prof-$k-raw.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) >= 3:
    names, units, values = rows[0], rows[1], rows[2]
    for want in ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sectors_op_read.sum",
                 "lts__t_sectors_op_write.sum", "lts__t_requests_op_write.sum", "lts__t_sectors_op_atom.sum"):
        if want in names:
            i = names.index(want)
            print(f"   {want:32} {values[i]:>16} {units[i]}")
PY
done
fi
if want pic; then
step "PIC: the whole step against the PyTorch step (same run), CPU against CUDA, Landau at GPU size"
PYTHONUNBUFFERED=1 python3 bench/pic_torch.py >"$out/pic_torch.txt" 2>"$out/pic_torch.err" ||
  { echo "torch failed"; tail -5 "$out/pic_torch.err"; }
cat "$out/pic_torch.txt"
./build-device/bench/pic_bench $quick --torch "$out/pic_torch.txt" 2>&1 | tee "$out/pic_bench.txt" || status=1
./build-device/tests/pmkit_tests --gtest_filter='PicCuda*' --gtest_brief=1 || status=1
./build-device/pmkit pic --backend cuda --dim 3 --cells 128,4,4 --particles 2^23 --steps 200 \
  --csv "$out/landau-gpu.csv" || status=1
fi
if want kernels; then
step "device time per kernel (ncu) of ${PMKIT_KERNELS_CASE:=p2m-mp4-3d-f-2^22-128}"
ncu --metrics gpu__time_duration.sum --csv --kernel-name "regex:${PMKIT_KERNELS_REGEX:-.}" \
  --launch-count "${PMKIT_KERNELS_LAUNCHES:-400}" ./build-device/bench/gpu_bench --case "$PMKIT_KERNELS_CASE" \
  >"$out/kernel-times.csv" 2>&1 || echo "ncu failed: $(tail -3 "$out/kernel-times.csv")"
python3 bench/kernel_times.py "$out/kernel-times.csv"
fi
if want ab; then
step "A/B: $PMKIT_AB_BASE (bases, built above) against this tree (new)"
set_case_args ${PMKIT_AB_CASES:-p2m-mp4-3d-f-2^24-256 p2m-mp4-3d-f-2^24-128 p2m-linear-3d-f-2^24-256 p2m-mp4-2d-f-2^22-2048 p2m-mp4-3d-f-2^24-256-binned}
for round in $(seq "${PMKIT_AB_ROUNDS:-2}"); do
  for tarball in $PMKIT_AB_BASE new; do
    if [ "$tarball" = new ]; then side=new exe="./build-device/bench/$ab_bench"
    else side=$(basename "$tarball" .tar) exe="$ab_root/$side/build-device/bench/$ab_bench"; fi
    echo "-- round $round: $side"
    if [ "$ab_bench" = pair_bench ]; then
      # shellcheck disable=SC2086
      "$exe" --gpu-only ${PMKIT_AB_ARGS:---size 32} 2>/dev/null | sed -n '/^d  *ppc/,/^$/p'
    else
      "$exe" "${case_args[@]}" 2>&1 | mesh_tables
    fi
  done
done
fi
exit $status
