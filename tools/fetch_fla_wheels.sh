#!/usr/bin/env bash
# Fetches FLA's wheels (flash-linear-attention and fla-core, pinned with their hashes) into .whl/
# at the repository root, for tools/gpu_check.sh perf on the GPU machine, which has PyTorch,
# Triton, einops and transformers but no network (docs/experiment/gpu_perf.md). Both wheels are
# pure Python (py3-none-any); their other needs are on that machine already: einops; torch >= 2.7
# and triton >= 3.3 (there: 2.11 and 3.6); transformers >= 5.6.2, < 6 (there: 5.17).
#   tools/fetch_fla_wheels.sh [DIR]     (default: .whl, which .git/info/exclude then ignores)
# Then carry the folder with the device tool: carry ["build/gpu_bundle", ".whl"].
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/.whl}
# The pins: FLA 0.6.0, the newest on PyPI when this was written (2026-12-02); its Triton kernels
# support Triton >= 3.3 and PyTorch >= 2.7.
pins=(
  "fla-core==0.6.0 --hash=sha256:b0708b70e0b119cd58a0a5146ea56cb175cef6ed969d8ac60267e3e077ce3ebd"
  "flash-linear-attention==0.6.0 --hash=sha256:6dec9735f8454523c13553622e98aff30152dde6586b4ac7d88010fbb7a06b5f"
)

python=${PYTHON:-python3}
"$python" -m pip --version >/dev/null 2>&1 || { echo "fetch_fla_wheels: $python has no pip" >&2; exit 2; }
mkdir -p "$dest"
# The default folder stays out of git (and out of the working tree the device tool sends, but
# for the carried copy): .git/info/exclude, once.
if [ "$dest" = "$root/.whl" ] && [ -d "$root/.git" ]; then
  exclude="$root/.git/info/exclude"
  mkdir -p "$(dirname "$exclude")"
  grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
fi
# Other versions of the same wheels would install side by side with the pinned ones and stop the
# whole install there (pip refuses two versions of a package): remove them.
find "$dest" -maxdepth 1 \( -name 'fla_core-*.whl' -o -name 'flash_linear_attention-*.whl' \) \
  ! -name '*-0.6.0-*' -delete
reqs=$(mktemp)
trap 'rm -f "$reqs"' EXIT
printf '%s\n' "${pins[@]}" >"$reqs"
# The GPU machine's Python is 3.12 on x86-64 (Linux); the wheels are pure Python, so the platform
# flags only say where they will run.
"$python" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$dest" -r "$reqs"
echo "[fetch_fla_wheels] $dest:"
ls -l "$dest"/*.whl
echo "[fetch_fla_wheels] $(du -sh "$dest" | cut -f1) to carry; on the GPU machine: tools/gpu_check.sh perf"
