#pragma once
// A training run's counters (progress.json in a checkpoint, app/checkpoint_state.h) and
// their JSON form. Apart from the checkpoint code so that the parser can be tested and fuzzed
// (fuzz/checkpoint_fuzzer.cpp) without the model, the optimizer and the tokenizer.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "data/batch.h"
#include "framework/io/json.h"
#include "framework/rng.h"
#include "layers/dropout.h"

namespace tarn::app {

struct Progress {
  int64_t step = 0;             // optimizer updates done
  DataPosition data;            // the next batch to read
  DropoutState dropout;         // the next dropout stream (rank 0's)
  // Data-parallel runs: every rank's dropout stream, rank r at index r (empty on one rank).
  // Each rank draws its own masks (seed derived from the run's seed and the rank, see
  // rank_dropout_seed), so an exact resume needs every rank's counter.
  std::vector<DropoutState> rank_dropout;
  int64_t tokens_seen = 0;      // source + target tokens trained on
  double elapsed_s = 0;         // training wall time over all runs
  bool has_best = false;
  double best_val_nll = 0;      // lowest validation NLL per token so far
  int64_t best_step = 0;
  int64_t evals_without_improvement = 0;
  int64_t bad_steps_in_row = 0;  // non-finite loss or gradient
  int64_t skipped_steps = 0;     // over the whole run
  // FAVOR+ projections: where each one's next draw comes from and the steps since its last
  // (the projection matrices themselves are model buffers).
  struct Favor {
    RngState rng;
    int64_t steps = 0;
  };
  std::map<std::string, Favor> favor;
};

json::Json progress_json(const Progress& progress);
// Reads what progress_json wrote; throws tarn::Error naming `source` and the field on anything
// missing, of the wrong kind or out of range.
Progress parse_progress(std::string_view text, const std::string& source);

}  // namespace tarn::app
