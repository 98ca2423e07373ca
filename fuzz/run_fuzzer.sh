#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time and says what came of it; the fuzz_<target>
# ctests (fuzz/CMakeLists.txt) and tools/fuzz.sh both run fuzzers through it.
#   run_fuzzer.sh FUZZER SECONDS CORPUS_DIR SEED_DIR FINDINGS_DIR
# New inputs go to CORPUS_DIR (created; SEED_DIR is only read), crash/timeout/OOM inputs to
# FINDINGS_DIR, the full log to FINDINGS_DIR/last-run.log. Exits non-zero on a finding: any
# crash or sanitizer report, an exception other than tarn::Error escaping (the fuzzers catch
# that one), an input running over 10 s, or the process growing past 2 GB.
set -uo pipefail
if [ $# -ne 5 ]; then
  echo "usage: $0 FUZZER SECONDS CORPUS_DIR SEED_DIR FINDINGS_DIR" >&2
  exit 2
fi
fuzzer=$1 seconds=$2 corpus=$3 seeds=$4 findings=$5
name=$(basename "$fuzzer")
mkdir -p "$corpus" "$findings"
log=$findings/last-run.log

# A dictionary beside this script, fuzz/<target>.dict (recipe_fuzzer -> recipe.dict), when there is one.
dict_flag=()
dict=$(dirname "$0")/${name%_fuzzer}.dict
[ -f "$dict" ] && dict_flag=(-dict="$dict")

start=$(date +%s)
# One process (no -jobs/-workers); leak detection stays on (ASan's default under libFuzzer).
"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "${dict_flag[@]}" \
  -artifact_prefix="$findings/" "$corpus" "$seeds" >"$log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))

runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
if [ "$rc" -eq 0 ]; then
  echo "[fuzz] $name: ${elapsed} s, ${runs:-?} runs, no finding (corpus: $corpus)"
  exit 0
fi
echo "[fuzz] $name: FINDING after ${elapsed} s (exit $rc); log: $log"
# libFuzzer's report: the sanitizer or libFuzzer summary and where the input went.
grep -E "^(==[0-9]+==ERROR|SUMMARY|.*runtime error|.*Test unit written to|.*uncaught exception|.*ALARM|.*out-of-memory|.*leak)" "$log" \
  | head -n 20 | sed 's/^/[fuzz]   /'
artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
if [ -n "$artifact" ]; then
  echo "[fuzz] $name: input saved as $artifact; reproduce with: $fuzzer $artifact"
fi
exit 1
