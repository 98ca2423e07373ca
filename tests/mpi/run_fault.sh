#!/usr/bin/env bash
# Runs an MPI job that is meant to fail (tests/mpi/faults_main.cpp) and checks how it ends:
# non-zero, within a time limit, with a message on its output.
#   run_fault.sh <max_seconds (whole)> <extended regex> -- <mpiexec command...>
set -uo pipefail
max_s=$1 pattern=$2
shift 2
[ "$1" = "--" ] && shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s%N)
"$@" >"$out" 2>&1
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
elapsed=$(printf '%d.%03d' $((elapsed_ms / 1000)) $((elapsed_ms % 1000)))
echo "[run_fault] $* -> exit $rc after ${elapsed} s (limit ${max_s} s)"
sed 's/^/  | /' "$out"
fail=0
if [ "$rc" -eq 0 ]; then
  echo "[run_fault] FAIL: the job exited 0; it must end non-zero"
  fail=1
fi
if [ "$elapsed_ms" -gt $((max_s * 1000)) ]; then
  echo "[run_fault] FAIL: took ${elapsed} s, more than ${max_s} s"
  fail=1
fi
if ! grep -Eq -- "$pattern" "$out"; then
  echo "[run_fault] FAIL: no line matches: $pattern"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "[run_fault] ok"
exit "$fail"
