#!/usr/bin/env bash
# tools/gpu_check.sh where there is no GPU (CI, a developer's machine): `run` refuses at once with
# exit 2 and says why; with a GPU but no bundle it names the command that builds one; bad
# arguments exit 2; --help tells every subcommand; `exec` refuses alike, and with a stand-in GPU
# and a bundle it runs the command with the bundle's tarn as $TARN. Skipped (77) with a GPU.
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
expect 0 "tools/gpu_check.sh exec" --help
expect 2 "no GPU here" exec -- true
expect 2 "no command" exec --
expect 2 "the command comes after --" exec true

# A machine whose nvidia-smi lists a GPU, but no bundle was carried to it.
mkdir -p "$work/bin"
printf '#!/bin/sh\necho "GPU 0: Stand-in (UUID: GPU-0)"\n' >"$work/bin/nvidia-smi"
chmod +x "$work/bin/nvidia-smi"
path="$work/bin:$PATH"
expect 2 "no bundle at $work/nothing" run --bundle "$work/nothing" --out "$work/out"
expect 2 "no bundle at $work/nothing" exec --bundle "$work/nothing" -- true
# A stand-in bundle: exec puts its programs first on PATH and names its tarn in TARN.
mkdir -p "$work/bundle/bin" "$work/bundle/lib"
for exe in tarn_cuda_tests tarn; do printf '#!/bin/sh
echo "%s ran"
' "$exe" >"$work/bundle/bin/$exe"; done
chmod +x "$work/bundle/bin/"*
expect 0 "tarn ran" exec --bundle "$work/bundle" -- sh -c '"$TARN"'
expect 0 "tarn_cuda_tests ran" exec --bundle "$work/bundle" -- tarn_cuda_tests
rm "$work/bundle/bin/tarn"
expect 2 "has no tarn" exec --bundle "$work/bundle" -- true
echo "[gpu_check_test] run and exec refuse without a GPU (exit 2) and without a bundle; bad arguments exit 2;" \
     "exec runs a command with the bundle's programs"
