#!/usr/bin/env bash
# `tarn train` under mpirun as a user runs it (ctest: dp_cli): 2 ranks train the tiny recipe,
# a SIGTERM to one rank stops both after the same step with a checkpoint, the run resumes on
# 2 ranks and continues on 1, the time budget stops both, and a rank killed outright ends the
# whole job non-zero. Rank 0 alone writes the TensorBoard event file.
#   tarn_train_mpirun.sh <tarn> <recipe> <mpiexec and its flags...>
set -uo pipefail
tarn=$1 recipe=$2
shift 2
mpirun=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "[dp_cli] FAIL: $*"; exit 1; }
# A small corpus of made-up sentences (deterministic).
mkdir -p work/tiny
awk 'BEGIN { split("the a every some", d); split("small red old quiet bright green", a);
             split("cat bird river stone house tree child road", n); split("sees follows finds crosses holds likes", v);
             s = 7; for (i = 0; i < 700; i++) { w = ""; for (k = 0; k < 6; k++) { s = (s * 1103515245 + 12345) % 2147483648; r[k] = s } 
               print d[r[0] % 4 + 1], a[r[1] % 6 + 1], n[r[2] % 8 + 1], v[r[3] % 6 + 1], d[r[4] % 4 + 1], n[r[5] % 8 + 1], "." } }' \
  > all.txt
head -n 600 all.txt > work/tiny/train.txt
tail -n 100 all.txt > work/tiny/valid.txt
common=(--set training.threads=1 --set checkpoints.every_steps=0)

echo "[dp_cli] 1: mpirun -np 2 tarn train (20 steps)"
"${mpirun[@]}" "$tarn" train "$recipe" "${common[@]}" --set training.max_steps=20 >log1 2>&1 || { cat log1; fail "exit $?"; }
grep -q "\[dist\] 2 ranks (mpi" log1 || { cat log1; fail "no world-size line"; }
grep -q "\[dist\] rank 1: cpu, 1 threads" log1 || { cat log1; fail "no per-rank line"; }
[ "$(grep -c '^\[train\] step' log1)" -ge 4 ] || { cat log1; fail "progress missing"; }
[ "$(grep -c 'stopped (max_steps) at step 20' log1)" -eq 1 ] || { cat log1; fail "not exactly one rank logged the end"; }
[ -f runs/tiny/step_20/COMPLETE ] || fail "no checkpoint step_20"
# Rank 0 alone writes the TensorBoard event file (one process, one file) and the metrics.
[ "$(ls runs/tiny/*tfevents* 2>/dev/null | wc -l)" -eq 1 ] || fail "expected one TensorBoard event file: $(ls runs/tiny)"

echo "[dp_cli] 2: SIGTERM to rank 1 stops both ranks after the same step, with a checkpoint"
"${mpirun[@]}" "$tarn" train "$recipe" "${common[@]}" --set training.max_steps=1000000 >log2 2>&1 &
job=$!
for _ in $(seq 1 100); do grep -q "step 30/" log2 2>/dev/null && break; sleep 0.2; done
ranks=($(pgrep -f -- "^$tarn train $recipe" | sort -n))
[ "${#ranks[@]}" -eq 2 ] || { kill $job; cat log2; fail "expected 2 rank processes, found ${#ranks[@]}"; }
kill -TERM "${ranks[1]}"
wait $job
rc=$?
[ $rc -eq 0 ] || { cat log2; fail "exit $rc after SIGTERM"; }
grep -q "stopped (SIGTERM)" log2 || { cat log2; fail "the run did not stop on SIGTERM"; }
last=$(ls -d runs/tiny/step_* | sed 's/.*step_//' | sort -n | tail -1)
[ "$last" -gt 20 ] || fail "no checkpoint after the SIGTERM (newest step_$last)"

echo "[dp_cli] 3: resume on 2 ranks, then continue on 1"
"${mpirun[@]}" "$tarn" train "$recipe" "${common[@]}" --set training.max_steps=$((last + 5)) >log3 2>&1 || { cat log3; fail "2-rank resume exit $?"; }
grep -q "resumed from runs/tiny/step_$last" log3 || { cat log3; fail "did not resume from step_$last"; }
"$tarn" train "$recipe" "${common[@]}" --set training.max_steps=$((last + 8)) >log4 2>&1 || { cat log4; fail "1-rank continue exit $?"; }
grep -q "written by 2 ranks\|resumed from runs/tiny/step_$((last + 5))" log4 || { cat log4; fail "1 rank did not continue"; }
[ -f runs/tiny/step_$((last + 8))/COMPLETE ] || fail "no checkpoint step_$((last + 8))"

echo "[dp_cli] 4: the time budget stops every rank after the same step"
"${mpirun[@]}" "$tarn" train "$recipe" "${common[@]}" --set training.max_steps=1000000 --set training.max_time_minutes=0.05 \
  --set checkpoints.dir=runs/timed >log_t 2>&1 || { cat log_t; fail "exit $? on the time budget"; }
grep -q "stopped (max_time)" log_t || { cat log_t; fail "the run did not stop on its time budget"; }
[ -n "$(ls -d runs/timed/step_* 2>/dev/null)" ] || fail "no checkpoint after the time budget"

echo "[dp_cli] 5: a rank killed outright ends the job non-zero, leaving no process"
"${mpirun[@]}" "$tarn" train "$recipe" "${common[@]}" --set training.max_steps=1000000 --set training.collective_timeout_s=5 >log5 2>&1 &
job=$!
for _ in $(seq 1 100); do grep -q "step .*[05]/" log5 2>/dev/null && break; sleep 0.2; done
ranks=($(pgrep -f -- "^$tarn train $recipe" | sort -n))
kill -KILL "${ranks[1]}"
start=$(date +%s)
wait $job
rc=$?
[ $rc -ne 0 ] || { cat log5; fail "the job exited 0 after a rank was killed"; }
[ $(( $(date +%s) - start )) -le 20 ] || fail "the job took more than 20 s to end"
sleep 0.5
! pgrep -f -- "^$tarn train $recipe" >/dev/null || fail "a rank is still running"
echo "[dp_cli] ok"
