#!/usr/bin/env bash
# The first GPU hour in one command (issue 27). The GPU machine we are lent now and then has the
# NVIDIA driver, the CUDA toolkit, compute-sanitizer and ncu, and nothing else (no yaml-cpp,
# OpenBLAS, Open MPI, SentencePiece or GoogleTest, no network), so everything is built here and
# carried there as one relocatable bundle.
#
#   tools/gpu_check.sh bundle [--arch "90"]
#       On the CPU machine: builds the CUDA test executables, benches and tarn for the GPU (Release,
#       the compiler's default x86-64 instruction set, oneDNN off) in build/gpu, packs them
#       stripped with the non-system shared libraries they load (CUDA's own left out) into build/gpu_bundle/ and
#       build/gpu_bundle.tar.gz, then checks the bundle from a clean folder: every library
#       resolves inside it (or to the system's C/C++ runtime, or CUDA's), and every executable
#       starts and lists its tests.
#   tools/gpu_check.sh run [--bundle DIR|TARBALL] [--out DIR]
#       On the GPU machine, from the repository root: an environment report, every GPU test
#       (the Gpu|OnCuda|Nccl suites), the two CUDA benches, compute-sanitizer racecheck and
#       memcheck on the causal attention conformance tests, ncu on one launch of the causal scan
#       and one of flash softmax, then a one-page summary (summary.md). Each step has its own
#       timeout and writes its log as it goes, into --out (default: $OUT when set, else
#       gpu_check_out/). The whole run stays under 9 minutes. Without a GPU it says so and exits 2.
#   tools/gpu_check.sh perf [--bundle DIR|TARBALL] [--out DIR] [--wheels DIR] [--budget S] [--step-budget S] [--quick]
#       On the GPU machine (issue 50, item 6): tarn's kernels beside PyTorch's
#       scaled_dot_product_attention (flash backend) and FLA's chunk_linear_attn (normalised) and
#       chunk_gated_delta_rule, on the same shapes in the same run: B*H 8 and 128, N 1,024, 4,096
#       and 16,384, d 64 (and 128 for the delta rule), bf16 (tarn's f32 kernels too), each a
#       median of 15 CUDA-event times after warm-up with the inputs rotated past the L2, and as a
#       fraction of the copy bandwidth and the matrix rate measured in the same run. Installs the
#       FLA wheels of .whl/ (or --wheels DIR) into a folder of /tmp first; without FLA it times
#       the rest and records "fla": "unavailable (why)". Steps: the bundle's cuda_attention_bench
#       --json, tools/gpu_perf.py measure (torch, FLA), tools/gpu_perf.py report. Each step has
#       its own timeout inside --budget (default 450 s: under 8 minutes); writes into --out
#       (default as run's) perf.log, the steps' JSON, perf-<date>-<commit>.json (the bundle's
#       commit) and perf_table.md, and prints the table last. Exit 0 when every step ran, 1 when
#       one failed or timed out (the JSON holds what was measured), 2 without a GPU or a bundle.
#       How to run it: here, tools/gpu_check.sh bundle and tools/fetch_fla_wheels.sh (the pinned
#       FLA wheels into .whl/, which git ignores); then the device tool's run with the command
#       `tools/gpu_check.sh perf` and carry ["build/gpu_bundle.tar.gz", ".whl"] (about 26 MB with
#       the 1.5 MB of wheels; the unpacked build/gpu_bundle, ~70 MB, is over the tool's 64 MiB);
#       commit the perf-*.json it returns under docs/experiment/data/gpu/
#       (docs/experiment/gpu_perf.md says more).
#       First, within --step-budget S (default 120 s of the budget; 0 skips it), training steps
#       (issue 51): `tarn bench train` of recipes/base-softmax.yaml and base-delta.yaml (bf16,
#       N 512 and 2,048 at 16,384 tokens a batch, 20 timed steps) beside HuggingFace's BART in
#       PyTorch on the same shapes (tools/gpu_step_perf.py measure: SDPA, bf16 autocast, fused
#       AdamW), merged into step-perf-<date>-<commit>.json (the table goes to perf.log).
#       Then routed cross-attention (issue 53) beside softmax and linear cross-attention,
#       `tarn bench attention --device cuda` (B 4, H 8, d 64, N 1,024 to 16,384), its CSV into perf.log.
#   tools/gpu_check.sh exec [--bundle DIR|TARBALL] -- COMMAND...
#       On the GPU machine: runs COMMAND with the bundle's programs first on PATH, TARN set to its
#       tarn and the loader path set as for run, e.g. the experiment's training runs on the device:
#       tools/gpu_check.sh exec -- tools/experiment.sh --full --only quality --device cuda --jobs 1
#   tools/gpu_check.sh --help
#
# Exit status of run: 0 when every step passed, 1 when a test failed, a sanitizer found a
# hazard or a step timed out, 2 when there is no GPU or no bundle.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bundle_dir="$root/build/gpu_bundle"
tarball="$root/build/gpu_bundle.tar.gz"
build_dir="$root/build/gpu"

# What the bundle holds. The test executables carry every GPU suite; the benches time the kernels;
# tarn itself trains, evaluates and benches recipes on the device (--set training.device=cuda).
tests=(tarn_cuda_tests tarn_cuda_model_tests)
benches=(cuda_attention_bench cuda_kernels_bench)
programs=(tarn)
# Libraries the GPU machine has of its own: the C and C++ runtimes (its distribution's, newer
# than Debian 12's, so backward compatible) and CUDA's, which must match its driver.
system_libs='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so'
cuda_libs='^(libcuda|libcudart|libcublas|libcublasLt|libcurand|libnccl|libnvidia-[a-z-]+|libnvrtc|libnvJitLink)\.so'

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "gpu_check: $*" >&2; exit 2; }

# --------------------------------------------------------------------------------------------
# bundle

do_bundle() {
  local arch="90"
  while [ $# -gt 0 ]; do
    case "$1" in
      --arch) [ $# -ge 2 ] || die "--arch needs a value, e.g. --arch \"80;90\""; arch=$2; shift 2 ;;
      *) die "bundle: unknown argument '$1' (see --help)" ;;
    esac
  done
  command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] ||
    die "bundle needs nvcc (the CUDA toolkit) on this machine"
  bash "$root/tools/setup.sh" >/dev/null || die "tools/setup.sh failed"
  local launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  mkdir -p "$root/build"  # a fresh checkout has none, and the configure log goes there
  echo "[gpu_check] configure $build_dir (sm $arch, default x86-64 instruction set, oneDNN off)"
  cmake -S "$root" -B "$build_dir" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release -DTARN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DTARN_ARCH_FLAGS=NONE -DTARN_WITH_DNNL=OFF -DTARN_BUILD_TESTS=ON \
    -DTARN_BUILD_BENCH=ON >"$root/build/gpu_configure.log" 2>&1 ||
    { tail -30 "$root/build/gpu_configure.log" >&2; die "configure failed (build/gpu_configure.log)"; }
  echo "[gpu_check] build ${tests[*]} ${benches[*]} ${programs[*]} (the CUDA kernels take a while on 2 cores)"
  cmake --build "$build_dir" -j"${TARN_JOBS:-$(nproc)}" --target "${tests[@]}" "${benches[@]}" "${programs[@]}" ||
    die "build failed"

  rm -rf "$bundle_dir" "$tarball"
  mkdir -p "$bundle_dir/bin" "$bundle_dir/lib"
  local exe
  for exe in "${tests[@]}"; do cp "$build_dir/tests/$exe" "$bundle_dir/bin/"; done
  for exe in "${benches[@]}" "${programs[@]}"; do cp "$build_dir/tools/$exe" "$bundle_dir/bin/"; done
  strip "$bundle_dir"/bin/*
  # The non-system libraries they load, as the loader resolves them here (sonames kept).
  local lib name
  while read -r name lib; do
    [[ $name =~ $system_libs || $name =~ $cuda_libs ]] && continue
    [ -f "$lib" ] || die "cannot find $name (ldd: $lib)"
    cp -L "$lib" "$bundle_dir/lib/$name"
  done < <(for exe in "$bundle_dir"/bin/*; do
             ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
           done | sort -u)
  strip --strip-unneeded "$bundle_dir"/lib/* 2>/dev/null || true
  cp "$0" "$bundle_dir/gpu_check.sh"
  cp "$root/tools/gpu_perf.py" "$bundle_dir/gpu_perf.py"
  cp "$root/tools/gpu_step_perf.py" "$bundle_dir/gpu_step_perf.py"
  git -C "$root" rev-parse HEAD >"$bundle_dir/commit" 2>/dev/null || echo unknown >"$bundle_dir/commit"
  {
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) for sm $arch"
    local nvcc
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    echo "nvcc: $("$nvcc" --version | tail -1)"
    echo "commit: $(cat "$bundle_dir/commit")$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  } >"$bundle_dir/BUILD_INFO"
  tar -C "$(dirname "$bundle_dir")" -czf "$tarball" "$(basename "$bundle_dir")"
  echo "[gpu_check] bundle: $bundle_dir ($(du -sh "$bundle_dir" | cut -f1)), $tarball ($(du -h "$tarball" | cut -f1))"
  verify_bundle
}

# Unpacks the tarball into a clean folder and checks that it stands alone there.
verify_bundle() {
  local tmp status=0 exe
  tmp=$(mktemp -d)
  tar -C "$tmp" -xzf "$tarball"
  local b="$tmp/gpu_bundle"
  for exe in "$b"/bin/*; do
    # Every NEEDED library: in the bundle, or the system's runtime, or CUDA's.
    while read -r name arrow path _; do
      [ "$arrow" = "=>" ] || continue
      if [[ $name =~ $system_libs || $name =~ $cuda_libs ]]; then continue; fi
      case "$path" in
        "$b"/lib/*) ;;
        *) echo "[gpu_check] $(basename "$exe"): $name resolves outside the bundle ($path)" >&2; status=1 ;;
      esac
    done < <(LD_LIBRARY_PATH="$b/lib" ldd "$exe")
  done
  for exe in "${tests[@]}"; do
    local n
    if ! n=$(LD_LIBRARY_PATH="$b/lib" "$b/bin/$exe" --gtest_list_tests --gtest_filter="$(gpu_filter "$exe")" 2>&1 |
             grep -c '^  '); then
      echo "[gpu_check] $exe did not start from the bundle" >&2
      status=1
    else
      echo "[gpu_check] $exe starts from the bundle: $n GPU tests listed"
    fi
  done
  rm -rf "$tmp"
  [ $status -eq 0 ] || die "the bundle does not stand alone (above)"
  echo "[gpu_check] verified from a clean folder: every library resolves inside the bundle, to the C/C++" \
       "runtime or to CUDA's; carry build/gpu_bundle.tar.gz (or build/gpu_bundle) to the GPU machine and run" \
       "tools/gpu_check.sh run there"
}

# The GPU suites of each test executable: the conformance tests' Gpu target, and every suite
# that runs on the device (OnCuda) or across devices (Nccl).
gpu_filter() {
  case "$1" in
    tarn_cuda_tests) echo '*Gpu*:*OnCuda*:*Nccl*' ;;
    tarn_cuda_model_tests) echo '*OnCuda*' ;;
  esac
}

# --------------------------------------------------------------------------------------------
# run

out=""
summary_lines=()
overall=0

# step NAME TIMEOUT_S COMMAND...: runs the command with its own timeout, its output in
# $out/NAME.log (written as it goes); returns the command's status (124 on a timeout).
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  echo "[gpu_check] --- $name (timeout ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - start))
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "[gpu_check] $name: TIMED OUT after ${took}s (log: $out/$name.log)"
  else
    echo "[gpu_check] $name: exit $rc in ${took}s"
  fi
  return $rc
}

# Counts of a gtest log: "passed failed skipped".
gtest_counts() {
  local log=$1 p f s
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*listed below.*/\1/p' "$log" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  echo "${p:-0} ${f:-0} ${s:-0}"
}

# Adds CUDA's libraries to the loader path where the bundle's executables cannot find them:
# the toolkit's folders, then the NVIDIA wheels of the machine's Python (NCCL often lives only
# there).
find_cuda_libs() {
  local dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64)
  local py
  for py in python3 /opt/torch/.venv/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    local site
    site=$("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) || continue
    local s
    for s in $site; do
      for d in "$s"/nvidia/*/lib; do [ -d "$d" ] && dirs+=("$d"); done
    done
  done
  local path="$bundle/lib"
  local d
  for d in "${dirs[@]}"; do [ -d "$d" ] && path="$path:$d"; done
  export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# No GPU, no run: says so before anything else. $1: the subcommand, for the message.
require_gpu() {
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    die "no GPU here (nvidia-smi $(command -v nvidia-smi >/dev/null 2>&1 && echo 'lists no device' || echo 'is not installed')):" \
        "tools/gpu_check.sh $1 is for the GPU machine; build the bundle here with tools/gpu_check.sh bundle"
  fi
}

# Sets $bundle to the unpacked bundle (the folder or tarball given, else build/gpu_bundle, else
# build/gpu_bundle.tar.gz) and the loader path to its libraries and CUDA's.
open_bundle() {
  local given=$1
  bundle=${given:-$bundle_dir}
  if [ -z "$given" ] && [ ! -d "$bundle" ] && [ -f "$tarball" ]; then bundle=$tarball; fi
  if [ -f "$bundle" ]; then
    local unpacked
    unpacked=$(mktemp -d)
    tar -C "$unpacked" -xzf "$bundle" || die "cannot unpack $bundle"
    bundle="$unpacked/gpu_bundle"
  fi
  [ -x "$bundle/bin/tarn_cuda_tests" ] ||
    die "no bundle at ${given:-$bundle_dir} (build one on the CPU machine: tools/gpu_check.sh bundle, then carry build/gpu_bundle)"
  bundle=$(cd "$bundle" && pwd)
  find_cuda_libs
}

# Runs a command with the bundle's programs first on PATH, TARN set to its tarn (which
# tools/experiment.sh and the bench scripts take) and the loader path set as for run.
do_exec() {
  local given=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --bundle) [ $# -ge 2 ] || die "--bundle needs a folder or a .tar.gz"; given=$2; shift 2 ;;
      --) shift; break ;;
      *) die "exec: unknown argument '$1' (the command comes after --; see --help)" ;;
    esac
  done
  [ $# -gt 0 ] || die "exec: no command (tools/gpu_check.sh exec [--bundle B] -- COMMAND...)"
  require_gpu exec
  open_bundle "$given"
  [ -x "$bundle/bin/tarn" ] || die "the bundle at $bundle has no tarn (built before tarn joined it): build it again"
  export PATH="$bundle/bin:$PATH" TARN="$bundle/bin/tarn"
  exec "$@"
}

do_run() {
  local given=""
  out=${OUT:-$root/gpu_check_out}
  while [ $# -gt 0 ]; do
    case "$1" in
      --bundle) [ $# -ge 2 ] || die "--bundle needs a folder or a .tar.gz"; given=$2; shift 2 ;;
      --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
      *) die "run: unknown argument '$1' (see --help)" ;;
    esac
  done
  require_gpu run
  mkdir -p "$out" || die "cannot create the output folder $out"
  out=$(cd "$out" && pwd)
  open_bundle "$given"
  local started=$SECONDS

  # 1. The environment.
  {
    echo "== date"; date -u
    echo "== bundle"; cat "$bundle/BUILD_INFO"
    echo "== nvidia-smi"; nvidia-smi
    echo "== nvidia-smi -q (clocks, memory)"; nvidia-smi -q -d CLOCK,MEMORY 2>&1 | head -60
    echo "== nvcc"; nvcc --version 2>&1 || echo "nvcc not on PATH"
    echo "== host"; uname -a; nproc; grep -m1 'model name' /proc/cpuinfo
    echo "== LD_LIBRARY_PATH"; echo "$LD_LIBRARY_PATH" | tr ':' '\n'
    for exe in "$bundle"/bin/*; do echo "== ldd $(basename "$exe")"; ldd "$exe"; done
  } >"$out/env.log" 2>&1
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  summary_lines+=("- GPU: $gpu; bundle: $(head -1 "$bundle/BUILD_INFO"), $(sed -n 's/^commit: //p' "$bundle/BUILD_INFO")")
  if grep -q 'not found' "$out/env.log"; then
    summary_lines+=("- **libraries not found**: $(grep 'not found' "$out/env.log" | awk '{print $1}' | sort -u | tr '\n' ' ')")
    overall=1
  fi

  # 2. Every GPU test.
  local exe limit rc counts
  summary_lines+=("" "| tests | passed | failed | skipped | status |" "|---|---|---|---|---|")
  for exe in "${tests[@]}"; do
    limit=90
    [ "$exe" = tarn_cuda_model_tests ] && limit=60
    step "$exe" "$limit" "$bundle/bin/$exe" --gtest_filter="$(gpu_filter "$exe")" --gtest_color=no
    rc=$?
    counts=$(gtest_counts "$out/$exe.log")
    read -r p f s <<<"$counts"
    local word
    word=$(status_word $rc)
    # On a GPU machine a GPU suite that ran nothing did not reach the device: as bad as a failure.
    if [ "$p" = 0 ] && [ "$f" = 0 ]; then word="NOTHING RAN ($word)"; rc=1; fi
    summary_lines+=("| $exe | $p | $f | $s | $word |")
    if [ "$f" != 0 ]; then
      grep '^\[  FAILED  \] .*\.' "$out/$exe.log" | sed 's/^\[  FAILED  \] /  - failed: /' | head -20 >>"$out/failures.txt"
    fi
    [ $rc -eq 0 ] || overall=1
  done

  # 3. The benches.
  step cuda_attention_bench 90 "$bundle/bin/cuda_attention_bench" --quick || overall=1
  step cuda_kernels_bench 45 "$bundle/bin/cuda_kernels_bench" --quick || overall=1

  # 4. compute-sanitizer on the causal attention conformance tests (and two of the delta rule's).
  # The delta rule's cases with a head of 64 opt in to more shared memory: the recurrent one runs
  # both of the backward's barriers a token, the chunked one (ChunkedHeadOf64) every barrier of
  # its sub-chunks, two sub-chunks a checkpoint's chunk; ChunkedChunksOf... runs all four of the
  # chunked kernels on partial column tiles and sub-chunks; the bf16 chunked kernels' HeadOf64
  # runs their tensor-core tiles with every barrier between a sub-chunk's products.
  local causal='*LinearAttention*Causal*/Gpu:*SoftmaxAttention*Causal*/Gpu:*DeltaRuleConformance.*HeadOf64*/Gpu'
  causal+=':*DeltaRuleConformance.ChunkedChunksOf*/Gpu:*DeltaRuleBf16Conformance.HeadOf64/Gpu'
  summary_lines+=("" "| sanitizer | tests | verdict |" "|---|---|---|")
  local tool
  for tool in racecheck memcheck; do
    # racecheck took 53 s on these tests on an H100 (memcheck 2 s).
    local limit=120
    [ "$tool" = memcheck ] && limit=45
    if ! command -v compute-sanitizer >/dev/null 2>&1; then
      summary_lines+=("| $tool | - | compute-sanitizer not found |")
      continue
    fi
    step "sanitizer_$tool" "$limit" compute-sanitizer --tool "$tool" --print-limit 20 \
      "$bundle/bin/tarn_cuda_tests" --gtest_filter="$causal" --gtest_color=no
    rc=$?
    local verdict
    verdict=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_$tool.log" | tail -1 | sed 's/^=* *//')
    read -r p f s <<<"$(gtest_counts "$out/sanitizer_$tool.log")"
    summary_lines+=("| $tool | $p passed, $f failed | ${verdict:-no summary line} ($(status_word $rc)) |")
    if [ $rc -ne 0 ] || ! grep -qE '(ERROR|RACECHECK) SUMMARY: 0 ' "$out/sanitizer_$tool.log"; then overall=1; fi
  done

  # 5. ncu on one launch of each headline kernel.
  if command -v ncu >/dev/null 2>&1; then
    # The first launch at the target shape (B*H 128, N 4096, d 64): no check launches before it.
    local kernel algo
    for pair in linear_scan:linear_attention_scan_kernel:linear_causal_f32 \
                flash_softmax:softmax_attention_forward_kernel:softmax_causal_f32; do
      IFS=: read -r name kernel algo <<<"$pair"
      step "ncu_$name" 40 ncu --launch-count 1 --kernel-name "regex:$kernel" \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
        "$bundle/bin/cuda_attention_bench" --quick --min-n 4096 --skip-check --algos "$algo" --repeats 1 || true
    done
  fi

  write_summary $((SECONDS - started))
  return $overall
}

status_word() {
  case "$1" in
    0) echo ok ;;
    124 | 137) echo "TIMED OUT" ;;
    *) echo "exit $1" ;;
  esac
}

# The one-page summary: tests, each timed kernel's fraction of the roofline, sanitizer hazards,
# ncu's headline figures.
write_summary() {
  local took=$1
  {
    echo "# gpu_check summary ($(date -u +%Y-%m-%d), ${took} s)"
    echo
    printf '%s\n' "${summary_lines[@]}"
    if [ -s "$out/failures.txt" ]; then echo; echo "Failed tests:"; cat "$out/failures.txt"; fi
    echo
    echo "## Attention kernels (cuda_attention_bench --quick): fraction of the roofline"
    if [ -f "$out/cuda_attention_bench.log" ]; then
      grep -E '^# (device|check)|MISMATCH' "$out/cuda_attention_bench.log" | head -12
      echo '```'
      grep -vE '^#' "$out/cuda_attention_bench.log" | grep ',' | head -40
      echo '```'
      grep -E '^# .*(target|roofline)' "$out/cuda_attention_bench.log" | tail -4
    fi
    echo
    echo "## Other kernels (cuda_kernels_bench --quick)"
    if [ -f "$out/cuda_kernels_bench.log" ]; then
      echo '```'
      head -40 "$out/cuda_kernels_bench.log"
      echo '```'
    fi
    local n
    for n in ncu_linear_scan ncu_flash_softmax; do
      [ -f "$out/$n.log" ] || continue
      echo
      echo "## $n (one launch)"
      echo '```'
      grep -E 'Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Block Limit|Stall|Warp Cycles Per Issued|==PROF==|==ERROR==' \
        "$out/$n.log" | head -30
      echo '```'
    done
  } >"$out/summary.md"
  echo
  cat "$out/summary.md"
  echo
  echo "[gpu_check] logs and summary.md in $out"
}

# --------------------------------------------------------------------------------------------
# perf

perf_steps=()

# pstep NAME LIMIT COMMAND...: one step of perf, its output appended to $out/perf.log; records
# "NAME=how it ended" for the JSON; returns the command's status (124 on a timeout or when the
# budget left no time for it).
pstep() {
  local name=$1 limit=$2
  shift 2
  if [ "$limit" -lt 5 ]; then
    echo "[gpu_check] --- $name: skipped (the budget is spent)"
    perf_steps+=("$name=skipped: the budget is spent")
    return 124
  fi
  local start=$SECONDS rc how
  echo "[gpu_check] --- $name (timeout ${limit}s)"
  { echo; echo "===== $name (timeout ${limit}s): $*"; } >>"$out/perf.log"
  timeout --kill-after=10 "$limit" "$@" >>"$out/perf.log" 2>&1
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then how="TIMED OUT after $((SECONDS - start))s"; else how="exit $rc in $((SECONDS - start))s"; fi
  echo "[gpu_check] $name: $how"
  perf_steps+=("$name=$how")
  [ $rc -eq 0 ] || tail -6 "$out/perf.log" | sed 's/^/[gpu_check]   | /'
  return $rc
}

do_perf() {
  local given="" wheels="" budget=450 quick=0 step_budget=120
  out=${OUT:-$root/gpu_check_out}
  while [ $# -gt 0 ]; do
    case "$1" in
      --bundle) [ $# -ge 2 ] || die "--bundle needs a folder or a .tar.gz"; given=$2; shift 2 ;;
      --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
      --wheels) [ $# -ge 2 ] || die "--wheels needs a folder of .whl files"; wheels=$2; shift 2 ;;
      --budget)
        if ! [[ ${2:-} =~ ^[0-9]+$ ]] || [ "$2" -lt 120 ]; then die "--budget needs seconds, at least 120"; fi
        budget=$2; shift 2 ;;
      --step-budget)
        if ! [[ ${2:-} =~ ^[0-9]+$ ]]; then die "--step-budget needs seconds (0: no training steps)"; fi
        step_budget=$2; shift 2 ;;
      --quick) quick=1; shift ;;
      *) die "perf: unknown argument '$1' (see --help)" ;;
    esac
  done
  require_gpu perf
  command -v python3 >/dev/null 2>&1 || die "perf needs python3 (the GPU machine's, with torch)"
  mkdir -p "$out" || die "cannot create the output folder $out"
  out=$(cd "$out" && pwd)
  open_bundle "$given"
  [ -x "$bundle/bin/cuda_attention_bench" ] || die "the bundle at $bundle has no cuda_attention_bench"
  local perf_py="$root/tools/gpu_perf.py"
  [ -f "$perf_py" ] || perf_py="$bundle/gpu_perf.py"
  [ -f "$perf_py" ] || die "no tools/gpu_perf.py beside this script or in the bundle"
  local started=$SECONDS
  local end=$((started + budget))
  rm -f "$out/perf.log" "$out/tarn_d64.json" "$out/tarn_d128.json" "$out/torch.json" "$out/perf_table.md"
  : >"$out/perf.log"
  echo "[gpu_check] perf: budget ${budget}s, output in $out"

  # 1. FLA's wheels (.whl/ or --wheels), into a folder of their own on PYTHONPATH.
  [ -n "$wheels" ] || { [ -d "$root/.whl" ] && wheels="$root/.whl"; }
  if [ -n "$wheels" ]; then
    [ -d "$wheels" ] || die "--wheels: no folder $wheels"
    local site="${TMPDIR:-/tmp}/tarn_perf_site"
    if compgen -G "$wheels/*.whl" >/dev/null; then
      pstep wheels 90 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$wheels"/*.whl && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    else
      echo "[gpu_check] no .whl files in $wheels: FLA only if this python has it" | tee -a "$out/perf.log"
    fi
  else
    echo "[gpu_check] no .whl folder (tools/fetch_fla_wheels.sh fetches FLA's): FLA only if this python has it" |
      tee -a "$out/perf.log"
  fi

  # 2. The environment and the bundle's identity.
  local commit dirty=0 version day
  commit=$(cat "$bundle/commit" 2>/dev/null || echo unknown)
  grep -q 'uncommitted changes' "$bundle/BUILD_INFO" 2>/dev/null && dirty=1
  version=$("$bundle/bin/tarn" --version 2>/dev/null | head -1)
  day=$(date -u +%Y-%m-%d)
  {
    echo "===== environment"; date -u; cat "$bundle/BUILD_INFO" 2>/dev/null; echo "tarn --version: $version"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
    timeout 60 python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)' 2>&1
  } >>"$out/perf.log"

  local report_args=(report --torch "$out/torch.json" --tarn "$out/tarn_d64.json" --tarn "$out/tarn_d128.json"
                     --out-dir "$out" --commit "$commit" --date "$day" --tarn-version "$version"
                     --build-info "$(head -1 "$bundle/BUILD_INFO" 2>/dev/null)")
  [ $dirty -eq 1 ] && report_args+=(--dirty)
  local ns=1024,4096,16384 measure_args=()
  [ $quick -eq 1 ] && { ns=1024,4096; report_args+=(--quick); measure_args+=(--quick); }
  # Merges what the steps wrote so far (quietly), so that the JSON in $out is current after each.
  interim_report() {
    local s args=("${report_args[@]}")
    for s in "${perf_steps[@]}"; do args+=(--step "$s"); done
    timeout 60 python3 "$perf_py" "${args[@]}" --quiet >>"$out/perf.log" 2>&1 || true
  }
  left() { echo $((end - SECONDS)); }
  local failed=0 limit

  # 2b. Training steps (issue 51), first and within step_budget: tarn's base recipes (bf16) and
  # HF BART in PyTorch on the same N and tokens a batch, then their table. A quarter each for
  # the two recipes, the rest less 5 s for PyTorch.
  # The benches' CSVs, PyTorch's JSON and the table stay in a scratch folder (the device tool
  # brings back 8 files of $out): $out gets step-perf-<date>-<commit>.json, perf.log the table.
  if [ "$step_budget" -gt 0 ]; then
    local step_py="$root/tools/gpu_step_perf.py" step_end=$((SECONDS + step_budget)) r step_args=() scratch
    [ -f "$step_py" ] || step_py="$bundle/gpu_step_perf.py"
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/tarn_steps.XXXXXX")
    for r in base-softmax base-delta; do
      pstep "steps_$r" $((step_budget / 4)) "$bundle/bin/tarn" bench train "$root/recipes/$r.yaml" --attention recipe \
        --n 512,2048 --tokens 16384 --steps 20 --device cuda --precision bf16 --out "$scratch/$r" || failed=1
      step_args+=(--tarn "$r=$scratch/$r")
    done
    limit=$((step_end - SECONDS - 5))
    pstep steps_torch $limit env PYTHONUNBUFFERED=1 python3 "$step_py" measure --out "$scratch/torch.json" \
      --ns 512,2048 --tokens 16384 --steps 20 --warmup 3 --deadline $(( $(date +%s) + limit - 20 )) || failed=1
    timeout 60 python3 "$step_py" report --torch "$scratch/torch.json" "${step_args[@]}" --out-dir "$out" \
      --table "$scratch/step_perf_table.md" --commit "$commit" --date "$day" 2>&1 | tee -a "$out/perf.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
    rm -rf "$scratch"
  fi

  # 2c. Routed cross-attention (issue 53; docs/design.md, "Routed cross-attention"), flat and as
  # small-recall's tree: tarn bench attention's forward and forward+backward beside softmax and
  # linear cross-attention on the same shapes, f32, its CSV into perf.log. A tenth of what is left, at most 40 s.
  limit=$(( $(left) / 10 )); [ $limit -gt 40 ] && limit=40
  pstep routed_cross $limit "$bundle/bin/tarn" bench attention --device cuda --algos softmax,linear_cross,routed_cross,routed_tree \
    --maps elu1 --n 1024,4096,16384 --batch 4 --heads 8 --head-dim 64 --reps 5 --min-time 0.1 --max-seconds 2 ||
    failed=1

  # 3. tarn's kernels from the bundle: every algorithm at d = 64 (checked against the CPU
  # first), then the delta rule at d = 128. Each stops starting rows 15 s before its timeout.
  # shellcheck disable=SC2054  # the commas are the bench's lists
  local bench=("$bundle/bin/cuda_attention_bench" --rotate --repeats 15 --min-repeats 10 --warmup 2 --keep-going
               --bh 8,128 --n "$ns" --max-n 16384)
  # Shares of what is left: a third for d = 64 (at most 150 s), a quarter of the rest for d = 128
  # (at most 100 s), the rest less 30 s for measure (FLA's Triton compilation is most of it).
  limit=$(( $(left) / 3 )); [ $limit -gt 150 ] && limit=150
  pstep tarn_d64 $limit "${bench[@]}" --d 64 --deadline-s $((limit > 20 ? limit - 15 : 5)) --json "$out/tarn_d64.json" \
    --algos linear_causal_f32,linear_causal_bf16,delta_causal_f32,delta_causal_bf16,softmax_causal_f32,softmax_causal_bf16 ||
    failed=1
  interim_report
  limit=$(( $(left) / 4 )); [ $limit -gt 100 ] && limit=100
  pstep tarn_d128 $limit "${bench[@]}" --d 128 --skip-check --deadline-s $((limit > 20 ? limit - 15 : 5)) \
    --json "$out/tarn_d128.json" --algos delta_causal_f32,delta_causal_bf16 || failed=1
  interim_report

  # 4. PyTorch's SDPA and FLA, with the ceilings, until 30 s before the budget's end.
  limit=$(( $(left) - 30 ))
  pstep measure $limit env PYTHONUNBUFFERED=1 python3 "$perf_py" measure --out "$out/torch.json" \
    --deadline $(( $(date +%s) + limit - 25 )) "${measure_args[@]}" || failed=1

  # 5. The merge: the JSON to commit and the table, printed last.
  local s args=("${report_args[@]}")
  for s in "${perf_steps[@]}"; do args+=(--step "$s"); done
  echo "[gpu_check] perf: ${budget}s budget, $((SECONDS - started))s spent; log: $out/perf.log"
  echo
  timeout 60 python3 "$perf_py" "${args[@]}" || { echo "[gpu_check] the report failed (perf.log)"; return 1; }
  return $failed
}

case "${1:-}" in
  bundle) shift; do_bundle "$@" ;;
  run) shift; do_run "$@"; exit $? ;;
  perf) shift; do_perf "$@"; exit $? ;;
  exec) shift; do_exec "$@" ;;
  -h | --help | help) usage ;;
  "") usage >&2; exit 2 ;;
  *) echo "gpu_check: unknown command '$1'" >&2; usage >&2; exit 2 ;;
esac
