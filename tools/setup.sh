#!/usr/bin/env bash
# Installs everything tarn needs on a fresh Debian 12 machine. Idempotent and non-interactive:
# packages already present are not fetched again.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ccache
  libopenblas-openmp-dev libopenblas0-openmp
  libdnnl-dev  # oneDNN: bf16 GEMMs on the CPU (training.precision: bf16)
  libyaml-cpp-dev
  libcli11-dev  # CLI11 (header-only): the command-line parsing of tarn and the benches (tools/cli.h)
  nlohmann-json3-dev  # the JSON parser behind framework/io/json.h (safetensors headers, manifests)
  zlib1g-dev  # crc32() for checkpoint checksums (framework/io/crc32.h)
  libboost-dev  # header-only: CRC-32C of TensorBoard's event files (framework/log/tensorboard.cpp)
  libsentencepiece-dev sentencepiece
  libpcre2-dev  # byte-level BPE (data/byte_level_bpe.cpp): GPT-2's pre-tokenisation regex with Unicode properties
  libgtest-dev libgmock-dev googletest
  libopenmpi-dev openmpi-bin
  wordnet-base
  python3-matplotlib  # the plots of docs/experiment.md (tools/experiment/report.py, Debian's /usr/bin/python3)
  python3-numpy python3-venv  # tools/reference/bart_reference.py, in build/pyref with pip's sentencepiece
  python3-torch  # PyTorch 1.13 for transformers in build/pyhf (tests/tools/hf_export_test.sh)
  clang libclang-rt-14-dev libomp-dev  # the fuzz build (tools/fuzz.sh): libFuzzer, clang's OpenMP
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[setup] all packages present"
fi

# The export's independent reader (tools/reference/bart_reference.py) needs SentencePiece's Python
# module, and TensorBoard (to watch runs; the tests read tarn's event files with its reader) is
# not packaged by Debian 12 either: a venv over the system's numpy and matplotlib, with pip's.
root=$(cd "$(dirname "$0")/.." && pwd)
pyref=$root/build/pyref
if ! "$pyref/bin/python" -c 'import numpy, sentencepiece, tensorboard' 2>/dev/null; then
  echo "[setup] build/pyref: a Python venv with sentencepiece and tensorboard (pip)"
  /usr/bin/python3 -m venv --system-site-packages "$pyref"
  "$pyref/bin/pip" install -q --disable-pip-version-check sentencepiece tensorboard
fi

# An export through HuggingFace transformers (tests/tools/hf_export_test.sh, ctest hf_export_*):
# a venv over Debian's python3-torch (1.13) with a pinned transformers (4.44.2, tested with that
# torch; it runs the export's modeling_tarn_bart.py) and SentencePiece from pip.
pyhf=$root/build/pyhf
if ! "$pyhf/bin/python" -c 'import torch, sentencepiece, transformers; assert transformers.__version__ == "4.44.2"' 2>/dev/null; then
  echo "[setup] build/pyhf: a Python venv over Debian's torch with transformers 4.44.2 and sentencepiece (pip)"
  /usr/bin/python3 -m venv --system-site-packages "$pyhf"
  "$pyhf/bin/pip" install -q --disable-pip-version-check "transformers==4.44.2" sentencepiece
fi

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "[setup] CUDA toolkit found: $( (command -v nvcc || echo /usr/local/cuda/bin/nvcc) )"
else
  echo "[setup] no CUDA toolkit: the CPU backend only will be built"
fi
