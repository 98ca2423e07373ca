#!/usr/bin/env bash
# tools/gpu_check.sh where there is no GPU (CI, a developer's machine): `run` refuses at once with
# exit 2 and says why; with a GPU but no bundle it names the command that builds one; bad
# arguments exit 2; --help tells both subcommands. Skipped (77) on a machine with a GPU.
#   gpu_check_test.sh <repo root>
set -uo pipefail
root=$1
script=$root/tools/gpu_check.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "[gpu_check_test] FAIL: $*"
  exit 1
}

# expect <status> <text> <args...>: gpu_check.sh <args> exits <status> and prints <text>.
expect() {
  local want=$1 text=$2
  shift 2
  local out rc
  out=$(cd "$work" && PATH="$path" bash "$script" "$@" 2>&1)
  rc=$?
  [ "$rc" -eq "$want" ] || fail "gpu_check.sh $* exited $rc, not $want: $out"
  grep -qF -- "$text" <<<"$out" || fail "gpu_check.sh $* did not say '$text': $out"
}

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "[gpu_check_test] a GPU is present: tools/gpu_check.sh run is the real test here"
  exit 77
fi

path=$PATH
expect 2 "no GPU here" run --out "$work/out"
[ ! -e "$work/out/summary.md" ] || fail "run without a GPU wrote a summary"
expect 0 "tools/gpu_check.sh bundle" --help
expect 0 "tools/gpu_check.sh run" --help
expect 2 "unknown command 'frobnicate'" frobnicate
expect 2 "--bundle needs a folder" run --bundle
expect 2 "unknown argument '--fast'" run --fast

# A machine whose nvidia-smi lists a GPU, but no bundle was carried to it.
mkdir -p "$work/bin"
printf '#!/bin/sh\necho "GPU 0: Stand-in (UUID: GPU-0)"\n' >"$work/bin/nvidia-smi"
chmod +x "$work/bin/nvidia-smi"
path="$work/bin:$PATH"
expect 2 "no bundle at $work/nothing" run --bundle "$work/nothing" --out "$work/out"
echo "[gpu_check_test] run refuses without a GPU (exit 2) and without a bundle; bad arguments exit 2"
