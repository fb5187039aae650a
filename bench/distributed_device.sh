#!/usr/bin/env bash
# The distributed plan's GPU runs on the device machine, one rank per GPU, with programs
# built elsewhere and carried (tests/pmkit_distributed_tests, bench/distributed_bench and,
# where present, bench/distributed_fft_bench, bench/distributed_pme_bench and
# bench/pic_distributed_bench in the folder given): the distributed tests at TEST_RANKS
# ranks, then distributed_bench and distributed_fft_bench at each of BENCH_RANKS and
# distributed_pme_bench and pic_distributed_bench once at the largest (they run 1, 2, 4...
# GPUs in one launch), through the image's Open MPI (not
# CUDA-aware) and the NCCL of its Python nvidia packages. Output into $OUT.
#   OUT=... bash bench/distributed_device.sh PROGRAMS "TEST_RANKS" "BENCH_RANKS" [bench args...]
set -u
programs="$1" test_ranks="$2" bench_ranks="$3"
shift 3
out="${OUT:-.}"
nvidia_libs=$(python3 -c 'import nvidia, glob; print(":".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$nvidia_libs:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=4
launch=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader,tcp
        --mca btl_vader_single_copy_mechanism none -x NCCL_NVLS_ENABLE -x OMP_NUM_THREADS -x LD_LIBRARY_PATH)
{
  echo "# NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=4 ${launch[*]} -np P"
  mpirun --version | head -1
  nvidia-smi -L
  echo "nsys: $(command -v nsys || echo none)"
} 2>&1 | tee "$out/machine.txt"
status=0
for np in $test_ranks; do
  echo "== tests ($np ranks)" | tee -a "$out/tests.txt"
  "${launch[@]}" -np "$np" "$programs/pmkit_distributed_tests" --gtest_color=no >>"$out/tests.txt" 2>&1 || status=1
  grep -E "PASSED|FAILED|Failure" "$out/tests.txt" | tail -4
done
for np in $bench_ranks; do
  echo "== bench ($np ranks)" | tee -a "$out/bench.txt"
  "${launch[@]}" -np "$np" "$programs/distributed_bench" "$@" 2>&1 | tee -a "$out/bench.txt" || status=1
done
# DistributedPmePlan's weak scaling (all rank counts in one launch), where the folder has it.
if [ -x "$programs/distributed_pme_bench" ]; then
  echo "== pme bench" | tee -a "$out/pme_bench.txt"
  np_max=$(echo $bench_ranks | tr ' ' '\n' | sort -n | tail -1)
  "${launch[@]}" -np "$np_max" "$programs/distributed_pme_bench" 2>&1 | tee -a "$out/pme_bench.txt" || status=1
fi
# `pmkit pic` across GPUs, weak and strong (all rank counts in one launch), where the folder
# has its program.
if [ -x "$programs/pic_distributed_bench" ]; then
  echo "== pic bench" | tee -a "$out/pic_bench.txt"
  np_max=$(echo $bench_ranks | tr ' ' '\n' | sort -n | tail -1)
  "${launch[@]}" -np "$np_max" "$programs/pic_distributed_bench" 2>&1 | tee -a "$out/pic_bench.txt" || status=1
fi
# DistributedRealFft's weak and strong scaling, where the folder has its program.
if [ -x "$programs/distributed_fft_bench" ]; then
  for np in $bench_ranks; do
    echo "== fft bench ($np ranks)" | tee -a "$out/fft_bench.txt"
    "${launch[@]}" -np "$np" "$programs/distributed_fft_bench" 2>&1 | tee -a "$out/fft_bench.txt" || status=1
  done
fi
# PMKIT_NSYS=1: a short profile of rank 0's weak-scaling steps at 2 ranks (nsys's summary).
if [ -n "${PMKIT_NSYS:-}" ] && command -v nsys >/dev/null; then
  echo "== nsys, rank 0 of 2, weak scaling, 2 steps" | tee "$out/nsys.txt"
  timeout 180 "${launch[@]}" -np 2 bash -c 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then
      exec nsys profile --stats=true -t cuda -o /tmp/rank0 "$0" --skip-strong --steps 2; else exec "$0" --skip-strong --steps 2; fi' \
    "$programs/distributed_bench" >>"$out/nsys.txt" 2>&1 || echo "nsys run failed" | tee -a "$out/nsys.txt"
fi
exit $status
