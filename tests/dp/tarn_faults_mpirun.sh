#!/usr/bin/env bash
# Faults under mpirun, measured (ctest: dp_faults; issue 56). 2 ranks train the tiny recipe
# (one thread each, a checkpoint every 4 steps) and each case injects one fault:
#   a. SIGKILL of rank 1 while rank 0 writes a checkpoint;
#   b. SIGKILL of rank 0 while it writes a checkpoint;
#   c. rank 0's checkpoint folder is full (ENOSPC) in the middle of a checkpoint;
#   d. a rank stops making progress (SIGSTOP): rank 1 (d1), then rank 0 (d2).
# After each: the job ends with the exit status below within its stated bound (never hangs), no
# process of the job is left (mpirun, ranks, stopped ones included), the run folder holds
# complete checkpoints and nothing a reader would take for one, and a rerun resumes from the
# newest complete checkpoint, losing only the steps after it, and reaches step $final with
# exactly the bits of an uninterrupted run's model and optimizer state (resuming on the CPU is
# bit for bit), so no checkpoint loaded but was wrong. Each case prints one line
#   [dp_faults] case X: exit E after T s (bound B s); ...; resumed from step K: N steps lost
#
# "While a checkpoint is being written": the script polls the run folder (bash builtins only,
# no process per round) until rank 0's step_N.tmp/ holds its first file, SIGSTOPs rank 0 and
# checks that step_N.tmp/ is still there once rank 0 is stopped: rank 0 is then frozen between
# beginning the checkpoint's files and renaming the folder into place, i.e. mid-write,
# deterministically, whatever the machine's load (a write it finished in between is let go and
# the next one tried). The fault is then injected (a: SIGKILL rank 1, SIGCONT rank 0; b: SIGKILL
# rank 0), the frozen folder's files and sizes reported.
#
# Exit statuses (README, "Troubleshooting"; mpirun's status is the job's): a rank killed
# outright makes Open MPI's mpirun end the job at once, exit 137 (128 + SIGKILL, the dead rank's);
# a full disk is an error rank 0 raises, exit 2 (MPI_Abort(2)); a stopped rank makes the other
# one's collective time out after training.collective_timeout_s, exit 4 (MPI_Abort(4)).
#
# The full disk (c): a 48 MiB tmpfs mounted on the run folder in a private mount namespace
# (unshare -m: the mount vanishes with the test's processes, even when ctest kills it), filled
# with fallocate while rank 0 is stopped after its first checkpoint, leaving half a checkpoint
# free: the next checkpoint's write() fails with ENOSPC in the middle of a file. Where mounts
# are not allowed (a container without CAP_SYS_ADMIN), or with TARN_FAULTS_DISK=fsize, rank 0's
# RLIMIT_FSIZE is lowered instead (prlimit, SIGXFSZ ignored): write() then fails with EFBIG in
# the middle of model.safetensors, the same failure path with another errno.
#   tarn_faults_mpirun.sh <tarn> <recipe> <mpiexec and its flags...>
set -uo pipefail
if [ -z "${TARN_FAULTS_IN_NS:-}" ] && [ "${TARN_FAULTS_DISK:-tmpfs}" = tmpfs ] &&
  unshare -m --propagation private true 2>/dev/null; then
  TARN_FAULTS_IN_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi
tarn=$1 recipe=$2
shift 2
mpirun=("$@")
work=$(mktemp -d)
# Nothing of a job may outlive the test, even when it fails half-way: every process whose
# command line names the work folder (mpirun and the ranks) is continued and killed, by pid.
cleanup() {
  local p
  for p in $(pgrep -f -- "$work"); do
    kill -CONT "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  mountpoint -q "$work/disk" 2>/dev/null && umount "$work/disk"
  if [ -n "${TARN_FAULTS_KEEP:-}" ]; then echo "[dp_faults] kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
cd "$work"
fail() {
  echo "[dp_faults] FAIL: $*"
  for f in "${logs[@]}"; do [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }; done
  exit 1
}
logs=()
now_ms() { echo $(( ${EPOCHREALTIME/[.,]/} / 1000 )); }
secs() { printf '%d.%01d' $(($1 / 1000)) $(($1 % 1000 / 100)); }  # ms -> "12.3"

# A small corpus of made-up sentences (deterministic), as tests/dp/tarn_train_mpirun.sh.
mkdir -p work/tiny
awk 'BEGIN { split("the a every some", d); split("small red old quiet bright green", a);
             split("cat bird river stone house tree child road", n); split("sees follows finds crosses holds likes", v);
             s = 7; for (i = 0; i < 700; i++) { for (k = 0; k < 6; k++) { s = (s * 1103515245 + 12345) % 2147483648; r[k] = s }
               print d[r[0] % 4 + 1], a[r[1] % 6 + 1], n[r[2] % 8 + 1], v[r[3] % 6 + 1], d[r[4] % 4 + 1], n[r[5] % 8 + 1], "." } }' \
  > all.txt
head -n 600 all.txt > work/tiny/train.txt
tail -n 100 all.txt > work/tiny/valid.txt
# The recipe is copied here so that every process of a job names $work on its command line.
cp "$recipe" tiny.yaml

final=24 every=4
timeout_s=10   # training.collective_timeout_s in cases a-c
stop_timeout_s=5  # in case d
# The bounds on the time from the fault to mpirun's exit, generous for a loaded 2-core machine.
# a, b: mpirun ends the job when a rank dies (measured 2 s: SIGTERM to the others, which tarn
# takes as a stop request, then SIGKILL after odls_base_sigkill_timeout), else the survivors'
# collective deadline would; c: rank 0 aborts the job at once (1 s); d: the deadline (5-6 s).
bound_kill=$((timeout_s + 20)) bound_disk=20 bound_stop=$((stop_timeout_s + 20))
common=(--set training.threads=1 --set training.max_steps=$final --set checkpoints.every_steps=$every
        --set checkpoints.keep_last=3 --set logging.every_steps=1 --set logging.tensorboard=off)

train() {  # run_dir log [--set ...]: mpirun -np 2 tarn train, in the foreground
  local dir=$1 log=$2
  shift 2
  "${mpirun[@]}" "$tarn" train "$work/tiny.yaml" "${common[@]}" --set checkpoints.dir="$dir" "$@" >"$log" 2>&1
}

# Starts the job in the background (job=mpirun's pid) and waits for its ranks (r0, r1) and the
# first complete checkpoint.
start_job() {  # run_dir log [--set ...]
  local dir=$1 log=$2
  shift 2
  logs=("$log")
  local wrap=()
  # Open MPI starts a rank with SIGXFSZ at its default (ignoring it around mpirun does not
  # carry over): a shell ignores it, then execs tarn (same pid), so that writing past
  # RLIMIT_FSIZE fails with EFBIG instead of killing rank 0.
  [ -n "${xfsz_ignored:-}" ] && wrap=(bash -c 'trap "" XFSZ; exec "$0" "$@"')
  "${mpirun[@]}" "${wrap[@]}" "$tarn" train "$work/tiny.yaml" "${common[@]}" --set checkpoints.dir="$dir" "$@" >"$log" 2>&1 &
  job=$!
  r0="" r1=""
  local until=$((SECONDS + 60)) p rank
  while [ -z "$r0" ] || [ -z "$r1" ]; do
    [ $SECONDS -lt $until ] || fail "the ranks did not start within 60 s"
    kill -0 "$job" 2>/dev/null || fail "the job ended before its ranks were seen"
    for p in $(pgrep -f -- "$work/tiny.yaml"); do
      rank=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^\(OMPI_COMM_WORLD_RANK\|PMIX_RANK\|PMI_RANK\)=//p' | head -n 1)
      [ "$rank" = 0 ] && r0=$p
      [ "$rank" = 1 ] && r1=$p
    done
    sleep 0.05
  done
  until [ -n "$(newest_complete "$dir")" ]; do
    [ $SECONDS -lt $until ] || fail "no checkpoint within 60 s"
    kill -0 "$job" 2>/dev/null || fail "the job ended before its first checkpoint"
    sleep 0.02
  done
}

# The newest step_N holding COMPLETE (empty when none).
newest_complete() {
  local d n best=""
  for d in "$1"/step_*; do
    n=${d##*/step_}
    [[ $n =~ ^[0-9]+$ ]] && [ -f "$d/COMPLETE" ] && { [ -z "$best" ] || [ "$n" -gt "$best" ]; } && best=$n
  done
  echo "$best"
}

wait_stopped() {  # pid: until the kernel reports it stopped (SIGSTOP is delivered asynchronously)
  local state _
  for _ in $(seq 1 500); do
    read -r _ _ state _ <"/proc/$1/stat" 2>/dev/null || return 1
    [ "$state" = T ] && return 0
    sleep 0.01
  done
  return 1
}

# Freezes rank 0 in the middle of a checkpoint write (see the top): the folder in `tmp`, the
# writes it let go first in `tries`.
freeze_rank0_mid_write() {  # run_dir
  local until=$((SECONDS + 60)) t
  tries=0
  while [ $SECONDS -lt $until ]; do
    # step_N.tmp only (not step_N.old.tmp, *.removing.tmp), once its first file is begun.
    for t in "$1"/step_*[0-9].tmp; do
      [ -e "$t/model.safetensors" ] || continue
      kill -STOP "$r0"
      wait_stopped "$r0" || return 1
      if [ -d "$t" ]; then
        tmp=$t
        return 0
      fi
      kill -CONT "$r0"  # it finished that write in between: the next one
      tries=$((tries + 1))
    done
    kill -0 "$job" 2>/dev/null || return 1
  done
  return 1
}

# Waits for the job to end, at most `bound` seconds after the fault at fault_ms: exit status in
# rc, the time from the fault in end_ms. A job still running then has hung: the test fails (and
# cleanup ends it).
wait_job() {  # bound_s
  while kill -0 "$job" 2>/dev/null; do
    [ $(($(now_ms) - fault_ms)) -le $(($1 * 1000)) ] || fail "the job still runs $1 s after the fault: it hangs"
    sleep 0.05
  done
  end_ms=$(($(now_ms) - fault_ms))
  wait "$job"
  rc=$?
}

# No process of this job (mpirun, a rank) may be left once mpirun has returned.
check_no_orphans() {
  local left
  left=$(pgrep -af -- "$work")
  [ -z "$left" ] || fail "processes left after the job ended: $left"
}

# The last step the job finished: the newest train line rank 0 appended (and flushed) to the
# run's metrics.jsonl, which each faulted job starts afresh.
last_step() {  # run_dir
  local n
  n=$(grep -Eo '"step": ?[0-9]+' "$1/metrics.jsonl" 2>/dev/null | tail -n 1 | grep -Eo '[0-9]+$')
  echo "${n:-0}"
}

# What a fault left in the run folder: K, the newest complete step_N (COMPLETE written last;
# the rerun then checks its manifest and CRC-32s and the continuation its contents), and in
# `leftovers` everything else named step_* or *.tmp, which every reader ignores (step_N.tmp, a
# step_N without COMPLETE, *.old.tmp).
inspect_run() {  # run_dir
  local d name
  K=$(newest_complete "$1")
  [ -n "$K" ] || fail "no complete checkpoint left in $1"
  leftovers=""
  for d in "$1"/*; do
    [[ ${d##*/} =~ ^step_|\.tmp$ ]] || continue
    name=${d##*/}
    if [[ $name =~ ^step_[0-9]+$ ]] && [ -f "$d/COMPLETE" ]; then continue; fi
    leftovers+=" $name"
  done
}

# The rerun: resumes from step_K (nothing newer was accepted, nothing was skipped as damaged)
# and ends at $final with the reference run's bits.
resume_and_compare() {  # case run_dir
  local log=rerun_$1.log
  logs=("$log")
  train "$2" "$log" || fail "case $1: the rerun exited $?"
  grep -q "resumed from $2/step_$K (" "$log" || fail "case $1: the rerun did not resume from step_$K"
  ! grep -q "skipping" "$log" || fail "case $1: the rerun skipped a checkpoint: a complete one was damaged"
  local f
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$2/step_$final/$f" "$work/runs/ref/step_$final/$f" ||
      fail "case $1: step_$final/$f after resuming from step_$K differs from the uninterrupted run's"
  done
}

report() {  # case bound what
  echo "[dp_faults] case $1: exit $rc after $(secs "$end_ms") s (bound $2 s); $3; resumed from step $K: $lost steps lost"
}

echo "[dp_faults] reference: $final uninterrupted steps on 2 ranks"
logs=(ref.log)
train "$work/runs/ref" ref.log || fail "the reference run exited $?"
[ -f "runs/ref/step_$final/COMPLETE" ] || fail "no reference checkpoint step_$final"

# ---------------------------------------------------------------------------------------------
# a, b: SIGKILL while rank 0 writes a checkpoint. Expected: exit 137 within bound_kill; in b the
# frozen write's step_N.tmp stays (a reader ignores it, the rerun removes it); K >= N - every.
for c in a b; do
  run=$work/runs/$c
  start_job "$run" "$c.log" --set training.collective_timeout_s=$timeout_s
  freeze_rank0_mid_write "$run" || fail "case $c: no checkpoint write of rank 0 caught"
  writing=${tmp##*/step_}
  writing=${writing%.tmp}
  written=$(cd "$tmp" && for f in *; do [ -f "$f" ] && printf ' %s %s' "$f" "$(stat -c %s "$f")"; done)
  fault_ms=$(now_ms)
  if [ $c = a ]; then
    kill -KILL "$r1"
    kill -CONT "$r0"
  else
    kill -KILL "$r0"
  fi
  wait_job $bound_kill
  check_no_orphans
  [ $rc -eq 137 ] || fail "case $c: exit $rc, expected 137 (mpirun: a rank was killed by SIGKILL)"
  inspect_run "$run"
  reached=$(last_step "$run")
  lost=$((reached - K))
  [ "$reached" -eq "$writing" ] && [ $lost -ge 0 ] && [ $lost -le $every ] ||
    fail "case $c: newest complete checkpoint step_$K, step $reached reached, step_$writing being written"
  [ $c = a ] || [ -d "$run/step_$writing.tmp" ] || fail "case b: rank 0 killed mid-write left no step_$writing.tmp"
  resume_and_compare $c "$run"
  if [ $c = b ]; then
    grep -q "removed an incomplete checkpoint left by an interrupted run: removed $run/step_$writing.tmp" "rerun_$c.log" ||
      fail "case b: the rerun did not remove step_$writing.tmp"
  fi
  who=$([ $c = a ] && echo "rank 1" || echo "rank 0")
  report $c $bound_kill "SIGKILL of $who while rank 0 wrote step_$writing (caught after $tries writes let go; step_$writing.tmp held:${written:- nothing}); left:${leftovers:- nothing}"
done

# ---------------------------------------------------------------------------------------------
# c: the checkpoint folder fills up (see the top). Expected: exit 2 within bound_disk, a message
# naming the file and folder, the failed step_N.tmp removed by the writer, K = the checkpoint
# before, which loads once space is freed.
run=$work/runs/c
xfsz_ignored=""
if [ "${TARN_FAULTS_DISK:-tmpfs}" = tmpfs ] && mkdir -p disk && mount -t tmpfs -o size=48m tarn-faults disk 2>/dev/null; then
  disk_kind="48 MiB tmpfs filled (ENOSPC)"
  run=$work/disk/run
else
  disk_kind="RLIMIT_FSIZE of 512 KiB on rank 0 (EFBIG; no tmpfs mount)"
  xfsz_ignored=1
fi
start_job "$run" c.log --set training.collective_timeout_s=$timeout_s
kill -STOP "$r0"
wait_stopped "$r0" || fail "case c: rank 0 did not stop"
had=$(newest_complete "$run")
if [ -z "$xfsz_ignored" ]; then
  ckpt_bytes=$(du -sb "$run/step_$had" | cut -f1)
  avail=$(df -B1 --output=avail disk | tail -n 1 | tr -d ' ')
  fallocate -l $((avail - ckpt_bytes / 2)) disk/filler || fail "case c: fallocate failed"
else
  prlimit --pid "$r0" --fsize=$((512 * 1024)) || fail "case c: prlimit failed"
fi
fault_ms=$(now_ms)
kill -CONT "$r0"
wait_job $bound_disk
check_no_orphans
[ $rc -eq 2 ] || fail "case c: exit $rc, expected 2 (an error rank 0 raised)"
message=$(grep -E "^tarn: rank 0 of 2: $run/step_[0-9]+\.tmp/[a-z.]+: write failed after [0-9,]+ bytes: (No space left on device|File too large)" c.log) ||
  fail "case c: no message naming the checkpoint folder and the failed write"
failed=$(grep -Eo "$run/step_[0-9]+\.tmp" <<<"$message" | head -n 1)
failed=${failed##*/step_}
failed=${failed%.tmp}
inspect_run "$run"
[ -z "$leftovers" ] || fail "case c: the failed checkpoint was not removed:$leftovers"
reached=$(last_step "$run")
lost=$((reached - K))
[ "$reached" -eq "$failed" ] && [ "$K" -ge "$had" ] && [ $lost -ge 1 ] && [ $lost -le $every ] ||
  fail "case c: newest complete checkpoint step_$K, step $reached reached, step_$failed failed"
rm -f disk/filler  # the user frees space, then reruns
resume_and_compare c "$run"
report c $bound_disk "$disk_kind while rank 0 wrote step_$failed: \"${message#tarn: rank 0 of 2: $work/}\"; left: nothing"
xfsz_ignored=""
if mountpoint -q disk; then umount disk; fi

# ---------------------------------------------------------------------------------------------
# d: a rank stops (SIGSTOP) once step 6 is logged, between two checkpoints, wherever it then is.
# Expected: the other rank's collective times out after stop_timeout_s, exit 4 within
# bound_stop, the stopped rank killed by mpirun.
for c in d1 d2; do
  run=$work/runs/$c
  start_job "$run" "$c.log" --set training.collective_timeout_s=$stop_timeout_s
  until [ "$(last_step "$run")" -ge 6 ]; do
    kill -0 "$job" 2>/dev/null || fail "case $c: the job ended before step 6"
    sleep 0.01
  done
  stopped=$([ $c = d1 ] && echo "$r1" || echo "$r0")
  fault_ms=$(now_ms)
  kill -STOP "$stopped"
  wait_stopped "$stopped" || fail "case $c: the rank did not stop"
  wait_job $bound_stop
  check_no_orphans
  [ $rc -eq 4 ] || fail "case $c: exit $rc, expected 4 (a collective failed)"
  survivor=$([ $c = d1 ] && echo 0 || echo 1)
  message=$(grep -E "^tarn: rank $survivor of 2: .* did not complete within $stop_timeout_s s" "$c.log") ||
    fail "case $c: no message naming the collective that timed out"
  [ $end_ms -ge $((stop_timeout_s * 1000)) ] || fail "case $c: ended before the collective deadline"
  inspect_run "$run"
  reached=$(last_step "$run")
  lost=$((reached - K))
  [ $lost -ge 0 ] && [ $lost -le $every ] || fail "case $c: newest complete checkpoint step_$K, step $reached reached"
  resume_and_compare $c "$run"
  report $c $bound_stop "SIGSTOP of rank $((1 - survivor)) after step $reached: \"${message%% another rank*}\"; left:${leftovers:- nothing}"
done
echo "[dp_faults] ok"
