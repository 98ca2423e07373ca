#!/usr/bin/env bash
# Keeps raw kernel launches (triple angle brackets) and `extern __shared__` in their two homes:
# files whose path contains "launch" (kernels/cuda/launch.cuh, tarn::launch) or "emu" (the CPU
# emulator, kernels/emu/). Every other kernel launches through tarn::launch and takes dynamic
# shared memory through TARN_DYNAMIC_SHARED, so that it also builds against the emulator.
# Checks every .cu/.cuh of the source tree (build folders and .git left out).
#   tools/lint_cuda.sh [source root]   exit 0 when clean, 1 with the offending lines
#   tools/lint_cuda.sh --self-test     checks that the lint rejects what it must (a ctest too)
set -euo pipefail

if [ "${1:-}" = "--self-test" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/kernels/cuda" "$tmp/kernels/emu"
  printf '__global__ void k() {}\nvoid f() { k<<<1, 1>>>(); }\n' >"$tmp/kernels/cuda/raw_kernel.cu"
  printf 'extern  __shared__ float s[];\n' >"$tmp/kernels/cuda/raw_shared.cuh"
  printf '// k<<<1, 1>>>() in a comment counts\n' >"$tmp/kernels/cuda/commented.cu"
  printf 'void f() { k<<<1, 1>>>(); }\n' >"$tmp/kernels/cuda/launch.cuh"   # allowed: the helper
  printf 'extern __shared__ char s[];\n' >"$tmp/kernels/emu/emu_case.cuh"  # allowed: the emulator
  printf 'int a = b << 2;\n' >"$tmp/kernels/cuda/shift.cu"                # allowed: a shift
  if out=$("$0" "$tmp" 2>&1); then
    echo "lint_cuda self-test: the lint passed a tree with raw launches" >&2
    exit 1
  fi
  hits=$(grep -c 'raw launch or extern __shared__' <<<"$out" || true)
  if [ "$hits" -ne 3 ]; then
    echo "lint_cuda self-test: expected 3 offending lines, got $hits:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "lint_cuda self-test: the 3 planted violations were rejected, the 3 allowed forms passed"
  exit 0
fi

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

status=0
checked=0
while IFS= read -r -d '' file; do
  checked=$((checked + 1))
  case "$file" in
    *launch* | *emu*) continue ;;
  esac
  # Comments count too: a commented-out raw launch is one edit away from a real one.
  if hits=$(grep -nE '<<<|extern[[:space:]]+__shared__' "$file"); then
    while IFS= read -r hit; do
      echo "${file#./}:${hit%%:*}: raw launch or extern __shared__ outside the launch helper / emulator:" \
           "use tarn::launch and TARN_DYNAMIC_SHARED (kernels/cuda/launch.cuh): ${hit#*:}" >&2
    done <<<"$hits"
    status=1
  fi
done < <(find . \( -path ./.git -o -path './build*' -o -path ./.gl -o -path ./.whl \) -prune -o \
              -type f \( -name '*.cu' -o -name '*.cuh' \) -print0)

if [ "$status" -eq 0 ]; then
  echo "lint_cuda: $checked CUDA files checked, no raw launch or extern __shared__ outside launch/emu files"
fi
exit "$status"
