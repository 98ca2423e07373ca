#pragma once
// `model.init_from: DIR`: a new run's first weights from another checkpoint (docs/design.md
// section 8, "Initialising from another model"). Every tensor whose name and shape match is
// loaded; the model's tensors the checkpoint lacks keep their initialisation (what a new
// attention kind adds: Taylor and Hedgehog maps, the delta rule's beta, alpha, convolutions and
// gates, hybrid gates); the checkpoint's tensors the model lacks are dropped. A name with
// another shape, or a tokenizer whose pieces differ, is refused: the weights would mean
// something else.
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "layers/bart.h"

namespace tarn::app {

struct InitFromReport {
  std::string checkpoint;            // the checkpoint folder read
  std::vector<std::string> loaded;   // name and shape in both
  std::vector<std::string> fresh;    // in the model only: their initialisation kept
  std::vector<std::string> dropped;  // in the checkpoint only
  int64_t loaded_values = 0;
};

// `dir`: a checkpoint or a run folder (its newest valid checkpoint). `tokenizer`: the run's,
// compared piece by piece with the checkpoint's. Throws tarn::Error naming every mismatch.
InitFromReport init_from_checkpoint(const std::string& dir, const Tokenizer& tokenizer,
                                    BartForConditionalGeneration& model);

// The report as log lines: counts, then the names of the new and dropped tensors.
void log_init_from(const InitFromReport& r);

}  // namespace tarn::app
