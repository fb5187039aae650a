#!/usr/bin/env bash
# Builds here (nvcc needs no GPU) the programs bench/device.sh runs on the GPU machine, and
# packs them into .prebuilt/ for the call to carry, so that the call spends its device
# time on the GPU and not on nvcc (a cold build there, the A/B bases' builds included,
# takes about half a call): compile here, carry the outputs. The source hash covers
# every file under src/, include/, cmake/, tests/ and apps/ whatever their layout.
#   bash bench/prebuild.sh [STEPS]    # STEPS as PMKIT_DEVICE_STEPS (default: device.sh's)
#   bash bench/prebuild.sh --hash     # the hash of the sources the programs are built from
#   bash bench/prebuild.sh --programs STEPS   # "target file" of each program the steps run
# PMKIT_AB_BASE (as device.sh's) also builds each base tarball's PMKIT_AB_BENCH. Then
# run device.sh with carry [".prebuilt", ".snap"]. device.sh takes .prebuilt/ only where
# its source hash is the tree's and its programs start there; else it builds as before.
# The packed programs are compressed (~9 MB each): the carried tree must stay under 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."

# The sources every program is built from, by content (paths relative to the root, so the
# device's copy, which has no .git, gives the same hash). Results and notes are left out:
# a results file committed after the build does not make its programs stale.
source_hash() {
  { find CMakeLists.txt cmake include src tests apps -type f; ls bench/CMakeLists.txt bench/*.cu bench/*.cuh bench/*.cpp; } |
    grep -v __pycache__ | LC_ALL=C sort | tr '\n' '\0' | xargs -0 sha256sum | sha256sum | cut -c1-16
}

# The programs device.sh's steps run, one "target file" line each (file: under a build
# folder; torch needs nothing built). device.sh asks for these too (--programs), so
# that what is packed and what is looked for come from this one table.
programs_for() {
  local s
  for s in $1; do
    case $s in
      tests | sanitizer) echo "pmkit_tests tests/pmkit_tests" ;;
      cpu) echo "pmkit_cli pmkit" ;;
      pairs) echo "pair_bench bench/pair_bench" ;;
      mesh | gradient | methods | profile | kernels | l2fetch) echo "gpu_bench bench/gpu_bench" ;;
      ab) echo "gpu_bench bench/gpu_bench"; echo "${PMKIT_AB_BENCH:-gpu_bench} bench/${PMKIT_AB_BENCH:-gpu_bench}" ;;
      stores) echo "store_probe bench/store_probe" ;;
      shared) echo "shared_probe bench/shared_probe" ;;
      papers) echo "paper_cases bench/paper_cases" ;;
      pme) echo "pme_bench bench/pme_bench" ;;
      pic) echo "pic_bench bench/pic_bench"; echo "pmkit_tests tests/pmkit_tests"; echo "pmkit_cli pmkit" ;;
    esac
  done | sort -u
}
case "${1:-}" in
  --hash) source_hash; exit 0 ;;
  --programs) programs_for "${2:-}"; exit 0 ;;
esac

steps="${1:-${PMKIT_DEVICE_STEPS:-tests sanitizer torch cpu pairs mesh methods}}"
mapfile -t programs < <(programs_for "$steps")
[ ${#programs[@]} -gt 0 ] || { echo "nothing to build for steps: $steps"; exit 0; }
targets=() files=()
for line in "${programs[@]}"; do targets+=("${line%% *}"); files+=("${line#* }"); done
configure() { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DPMKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null; }

rm -rf .prebuilt && mkdir -p .prebuilt
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
echo "building ${targets[*]} (the tree, $(source_hash))"
configure . build-device
cmake --build build-device -j"$(nproc)" --target "${targets[@]}" >.prebuilt/build.log 2>&1 ||
  { tail -30 .prebuilt/build.log; exit 1; }
for f in "${files[@]}"; do
  mkdir -p "$stage/build-device/$(dirname "$f")"
  cp "build-device/$f" "$stage/build-device/$f"
done
# The A/B bases: device.sh runs each from $ab_root/NAME/build-device/bench/.
for tarball in ${PMKIT_AB_BASE:-}; do
  name=$(basename "$tarball" .tar)
  src="$stage/src/$name"
  mkdir -p "$src" && tar -xf "$tarball" -C "$src"
  bench="${PMKIT_AB_BENCH:-gpu_bench}"
  echo "building $bench of $name"
  configure "$src" "$src/build-device"
  cmake --build "$src/build-device" -j"$(nproc)" --target "$bench" >>.prebuilt/build.log 2>&1 ||
    { tail -30 .prebuilt/build.log; exit 1; }
  mkdir -p "$stage/ab/$name/build-device/bench"
  cp "$src/build-device/bench/$bench" "$stage/ab/$name/build-device/bench/"
  sha256sum "$tarball" | cut -c1-64 >"$stage/ab/$name/tarball.sha256"
done
tar -C "$stage" -cf - build-device $( [ -d "$stage/ab" ] && echo ab ) | xz -T"$(nproc)" -6 >.prebuilt/programs.tar.xz
source_hash >.prebuilt/source.hash
rm -f .prebuilt/build.log
echo "packed: $(du -h .prebuilt/programs.tar.xz | cut -f1) (.prebuilt/programs.tar.xz); carry .prebuilt"
