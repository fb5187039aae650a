#!/bin/bash
# A compiler launcher that times each object, for docs/history/build-time.md: configure
# with -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/cmake/build_time/timelog.sh (and CUDA's), build
# with TIMELOG=<log> in the environment, and each compile appends
# "object wall_s user_s sys_s start end" to the log (user and system time are the
# compiler's CPU time, which other work on the machine does not change).
out=?; prev=
for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
t0=$(date +%s.%N)
/usr/bin/time -f "%U %S" -o "$TIMELOG.$$" "$@"; rc=$?
t1=$(date +%s.%N)
echo "$out $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') $(cat "$TIMELOG.$$") $t0 $t1" >> "$TIMELOG"
rm -f "$TIMELOG.$$"
exit $rc
