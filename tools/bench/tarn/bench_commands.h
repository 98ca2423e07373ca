#pragma once
// The `tarn bench` commands, each added to the `bench` subcommand of tools/tarn/main.cpp with its
// flags; `command_line` is quoted in the JSON report beside the CSV (bench_common.h).
#include <string>

#include "tools/cli.h"

namespace tarn::app {

// Forward and forward+backward time and peak memory of softmax attention (tarn's blocked kernel,
// and the dense N x N product PyTorch eager computes) against bidirectional, causal and cross
// linear attention, per feature map, over sequence lengths: the crossover N where linear wins.
cli::Command add_bench_attention(CLI::App& bench, const std::string& command_line);

// Training tokens/s and peak memory (the allocator's live peak and the process's resident peak)
// against sequence length at a fixed token budget per batch, softmax against linear attention,
// on random token ids.
cli::Command add_bench_train(CLI::App& bench, const std::string& command_line);

// Per-token greedy generation latency and decoding-state memory against position: linear
// attention's recurrent state (constant per token) against softmax's key/value cache (growing).
cli::Command add_bench_decode(CLI::App& bench, const std::string& command_line);

// All-reduce, reduce-scatter and all-gather timed as nccl-tests times NCCL (algbw, busbw), every
// result checked; MPI ranks under mpirun, else threads of this process.
cli::Command add_bench_collectives(CLI::App& bench);

}  // namespace tarn::app
