#!/usr/bin/env bash
# The test command: installs what is missing, builds Release (with the CUDA backend where nvcc
# exists) and an ASan+UBSan build (CPU only), and runs every ctest suite in both; then fuzzes
# each input loader for a minute (clang + libFuzzer, fuzz/README.md).
#   tools/test.sh            everything
#   TARN_SKIP_FUZZ=1 tools/test.sh       without the fuzz stage
#   TARN_SKIP_SANITIZE=1 tools/test.sh   Release only (quicker, for local iteration)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${TARN_JOBS:-$(nproc)}

start=$(date +%s)
bash tools/setup.sh

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

run_suite() {  # name, build dir, cmake args...; $targets (optional): build only these
  local name=$1 dir=$2
  shift 2
  echo "[test] === $name: configure ==="
  cmake -S "$root" -B "$dir" "${launcher[@]}" "$@"
  echo "[test] === $name: build ($(( $(date +%s) - start )) s in) ==="
  cmake --build "$dir" -j"$jobs" ${targets:+--target $targets}
  echo "[test] === $name: ctest ($(( $(date +%s) - start )) s in) ==="
  # Tests run side by side, one per core: the suites that train models use one thread each
  # (tests/CMakeLists.txt), and the MPI jobs ask ctest for their ranks' cores (PROCESSORS).
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ctest --test-dir "$dir" --output-on-failure -j"$jobs"
  echo "[test] === $name: done ($(( $(date +%s) - start )) s in) ==="
}

run_suite "Release" build/release -DCMAKE_BUILD_TYPE=Release -DTARN_CUDA=AUTO
if [ -f build/release/cuda_resource_usage.txt ]; then
  # nvcc's per-kernel registers, spills and shared memory (cmake/TarnEmulator.cmake): CI's artefact.
  echo "[test] nvcc resource usage (sm_80, sm_90): $root/build/release/cuda_resource_usage.txt"
fi
if [ "${TARN_SKIP_SANITIZE:-0}" != "1" ]; then
  # The sanitizer build leaves out nvcc (ASan does not instrument device code) and the benches.
  # -O1 -g1 (line tables: reports still name file:line) compiles in about half the time of
  # RelWithDebInfo's -O2 -g, which made this build the longest stage of CI.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_suite "ASan+UBSan" build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DTARN_SANITIZE=ON -DTARN_CUDA=OFF -DTARN_BUILD_BENCH=OFF
  if [ "${TARN_SKIP_FUZZ:-0}" != "1" ]; then
    # Each loader's fuzzer for TARN_FUZZ_SECONDS (60) over its corpus, failing on any finding.
    # clang builds the fuzzers and the loader sources only: the kernels are GCC code.
    targets=fuzzers run_suite "Fuzz" build/fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTARN_FUZZ=ON -DTARN_CUDA=OFF -DTARN_BUILD_TESTS=OFF -DTARN_BUILD_BENCH=OFF
  fi
fi
echo "[test] all suites passed in $(( $(date +%s) - start )) s"
