#!/usr/bin/env bash
# Builds here (nvcc needs no GPU) the programs bench/device.sh runs on the GPU machine, and
# packs them into .prebuilt/ for the call to carry, so that the call spends its device
# time on the GPU and not on nvcc: a cold build there took 140-180 s of a ~350 s call
# (2026-11-26), the A/B bases' builds included. The device tool's METHOD.md asks for
# this: compile here, carry the outputs.
#   bash bench/prebuild.sh [STEPS]    # STEPS as PMKIT_DEVICE_STEPS (default: device.sh's)
#   bash bench/prebuild.sh --hash     # the hash of the sources the programs are built from
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
  { find CMakeLists.txt cmake include src tests apps -type f; ls bench/CMakeLists.txt bench/*.cu bench/*.cuh; } |
    grep -v __pycache__ | LC_ALL=C sort | tr '\n' '\0' | xargs -0 sha256sum | sha256sum | cut -c1-16
}
if [ "${1:-}" = --hash ]; then source_hash; exit 0; fi

steps="${1:-${PMKIT_DEVICE_STEPS:-tests sanitizer torch cpu pairs mesh methods}}"
# What each step runs (device.sh's steps; torch needs nothing built).
targets=()
for s in $steps; do
  case $s in
    tests | sanitizer) targets+=(pmkit_tests) ;;
    cpu) targets+=(pmkit_cli) ;;
    pairs) targets+=(pair_bench) ;;
    mesh | methods | profile | kernels | l2fetch) targets+=(gpu_bench) ;;
    ab) targets+=("${PMKIT_AB_BENCH:-gpu_bench}") ;;
    stores) targets+=(store_probe) ;;
    shared) targets+=(shared_probe) ;;
  esac
done
mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sort -u)
[ ${#targets[@]} -gt 0 ] || { echo "nothing to build for steps: $steps"; exit 0; }
program() {  # a target's file under a build folder
  case $1 in pmkit_tests) echo tests/pmkit_tests ;; pmkit_cli) echo pmkit ;; *) echo "bench/$1" ;; esac
}
configure() { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DPMKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null; }

rm -rf .prebuilt && mkdir -p .prebuilt
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
echo "building ${targets[*]} (the tree, $(source_hash))"
configure . build-device
cmake --build build-device -j"$(nproc)" --target "${targets[@]}" >.prebuilt/build.log 2>&1 ||
  { tail -30 .prebuilt/build.log; exit 1; }
for t in "${targets[@]}"; do
  mkdir -p "$stage/build-device/$(dirname "$(program "$t")")"
  cp "build-device/$(program "$t")" "$stage/build-device/$(program "$t")"
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
printf '%s\n' "${targets[@]}" >.prebuilt/targets
rm -f .prebuilt/build.log
echo "packed: $(du -h .prebuilt/programs.tar.xz | cut -f1) (.prebuilt/programs.tar.xz); carry .prebuilt"
