#!/usr/bin/env bash
# A training run's TensorBoard event files, read by TensorBoard's own reader (the tensorboard
# pip package in build/pyref, tools/setup.sh): the expected tags, every step once, also after a
# run killed between checkpoints is resumed (the events past its last checkpoint are trained
# again and must not appear twice), and after --restart (the old files move aside with the old
# checkpoints). tests/io/tensorboard_test.cpp checks the bytes with a reader of its own.
#   tensorboard_test.sh <tarn> <recipe> <python with tensorboard>
set -uo pipefail
tarn=$1 recipe=$2 python=$3
work=$(mktemp -d)
trap 'kill -9 $pid 2>/dev/null; rm -rf "$work"' EXIT
pid=
fail() {
  echo "[tensorboard_test] FAIL: $*"
  exit 1
}
if ! "$python" -c 'import tensorboard' 2>/dev/null; then
  echo "[tensorboard_test] SKIP: $python has no tensorboard module (tools/setup.sh installs it)"
  exit 77
fi

RANDOM=11
words=(the a red cat dog sees runs over small old tree stone bird child holds every wall green)
for n in 300 20; do
  for ((i = 0; i < n; i++)); do
    line=""
    for ((j = 0; j < 4 + RANDOM % 6; j++)); do line+="${words[RANDOM % ${#words[@]}]} "; done
    echo "${line% }"
  done >"$work/$n.txt"
done
run=$work/run
common=(--set data.train="$work/300.txt" --set data.valid="$work/20.txt" --set checkpoints.dir="$run"
        --set logging.every_steps=5 --set checkpoints.every_steps=20 --set checkpoints.keep_last=0
        --set validation.every_steps=20 --set training.threads=1)

# 1. A run killed (SIGKILL: no last checkpoint) once it has logged steps past a checkpoint.
"$tarn" train "$recipe" "${common[@]}" --set training.max_steps=100000 >"$work/first.log" 2>&1 &
pid=$!
for ((t = 0; t < 600; t++)); do  # 60 s at most
  last=$(grep -o '"kind":"train","step":[0-9]*' "$run/metrics.jsonl" 2>/dev/null | tail -1 | grep -o '[0-9]*$')
  [ -n "$last" ] && [ "$last" -gt 20 ] && [ $((last % 20)) -ne 0 ] && break
  kill -0 $pid 2>/dev/null || fail "the first run ended by itself: $(tail -n 3 "$work/first.log")"
  sleep 0.1
done
kill -9 $pid
wait $pid 2>/dev/null
pid=
[ -n "$last" ] && [ "$last" -gt 20 ] || fail "the first run logged no step past 20 in 60 s"
echo "[tensorboard_test] first run killed after logging step $last"

# 2. Resumed to step 60: its events from the last checkpoint on replace the first run's.
"$tarn" train "$recipe" "${common[@]}" --set training.max_steps=60 >"$work/resume.log" 2>&1 ||
  fail "the resumed run exited $?: $(tail -n 3 "$work/resume.log")"
grep -q "TensorBoard: .* rewound to step" "$work/resume.log" ||
  echo "[tensorboard_test] note: nothing to rewind (the kill came right after a checkpoint)"

check() {  # check <folder> <last step>: TensorBoard's reader over the folder's event files
  "$python" - "$1" "$2" <<'PY'
import collections, glob, os, sys
from tensorboard.backend.event_processing import event_accumulator, event_file_loader
folder, last = sys.argv[1], int(sys.argv[2])
files = sorted(glob.glob(os.path.join(folder, "*tfevents*")))
assert files, f"no event files in {folder}"
seen = collections.defaultdict(list)
for f in files:  # the raw loader: every event as written (it checks each record's CRCs)
    for event in event_file_loader.EventFileLoader(f).Load():
        for v in event.summary.value:
            seen[v.tag].append(event.step)
for tag, steps in seen.items():
    dups = [s for s, n in collections.Counter(steps).items() if n > 1]
    assert not dups, f"{tag}: steps written twice: {dups}"
want = {"train/loss", "train/ppl", "train/nll", "train/lr", "train/grad_norm", "train/tokens_per_s",
        "memory/rss_mib", "valid/ppl", "valid/nll", "memory/rss_peak_mib", "memory/live_peak_mib"}
assert want <= set(seen), f"missing tags: {sorted(want - set(seen))}"
assert sorted(seen["train/loss"]) == list(range(5, last + 1, 5)), f"train/loss steps {sorted(seen['train/loss'])}"
assert sorted(seen["valid/ppl"]) == list(range(20, last + 1, 20)), f"valid/ppl steps {sorted(seen['valid/ppl'])}"
# The accumulator TensorBoard's server builds on: the same scalars, in step order.
acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
loss = acc.Scalars("train/loss")
assert [e.step for e in loss] == list(range(5, last + 1, 5)), [e.step for e in loss]
assert all(0 < e.value < 100 for e in loss), [e.value for e in loss]
print(f"[tensorboard_test] {folder}: {len(files)} files, {len(seen)} tags, train/loss at steps 5..{last}")
PY
}
check "$run" 60 || fail "the resumed run's event files"

# 3. --restart: the old files move aside with the old checkpoints; the new run starts alone.
"$tarn" train "$recipe" "${common[@]}" --set training.max_steps=20 --restart >"$work/restart.log" 2>&1 ||
  fail "the restarted run exited $?: $(tail -n 3 "$work/restart.log")"
check "$run" 20 || fail "the restarted run's event files"
aside=$(ls -d "$run"/previous_* 2>/dev/null | head -1)
[ -n "$aside" ] || fail "--restart made no previous_* folder"
check "$aside" 60 || fail "the set-aside event files"

# 4. logging.tensorboard: off writes none.
"$tarn" train "$recipe" "${common[@]}" --set checkpoints.dir="$work/off" --set training.max_steps=5 \
  --set logging.tensorboard=off >"$work/off.log" 2>&1 || fail "the run without TensorBoard exited $?"
ls "$work/off"/*tfevents* >/dev/null 2>&1 && fail "logging.tensorboard: off wrote event files"
echo "[tensorboard_test] passed"
