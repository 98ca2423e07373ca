#pragma once
// A progress.json's contents with every field set, shared by the round-trip tests
// (tests/app/progress_test.cpp) and the seed the checkpoint fuzzer writes (fuzz/).
#include "app/progress.h"

namespace tarn::testing {

inline app::Progress sample_progress() {
  app::Progress p;
  p.step = 1200;
  p.data = {2, 37};
  p.dropout = {42, 9600};
  p.rank_dropout = {{42, 9600}, {43, 9600}};
  p.tokens_seen = 3'456'789;
  p.elapsed_s = 725.5;
  p.has_best = true;
  p.best_val_nll = 3.25;
  p.best_step = 1000;
  p.favor["model.encoder.layers.0.self_attn"] = {{7, 1, 4096}, 12};
  return p;
}

}  // namespace tarn::testing
