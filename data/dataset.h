#pragma once
// What the batcher draws from: a fixed number of (source, target) examples whose content may
// depend on the epoch (denoising draws new noise each epoch) but never on the order in which
// examples are asked for, so batches can be planned, sharded and resumed freely.
#include <cstdint>
#include <string>
#include <vector>

namespace tarn {

// Token ids; both sequences end with </s> (kEosId). The decoder input is made by the batcher.
struct Example {
  std::vector<int32_t> source;
  std::vector<int32_t> target;
};

// Counts a dataset reports once built (the read/skip counts live in ReadStats).
struct DatasetStats {
  int64_t examples = 0;
  int64_t lines = 0;              // token-id lines the examples were made from
  int64_t empty_lines = 0;        // lines that encoded to no token at all: dropped
  int64_t truncated_source = 0;   // over-long lines cut to the source length limit
  int64_t truncated_target = 0;   // over-long lines cut to the target length limit
  int64_t target_tokens = 0;      // sum of target lengths, </s> included

  std::string summary() const;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual size_t size() const = 0;
  // Example `index` as seen in `epoch`: the same for the same arguments, whatever was asked before.
  virtual Example example(size_t index, uint64_t epoch) const = 0;
  // What building it kept, cut and dropped (zero for a dataset that counts nothing).
  const DatasetStats& stats() const { return stats_; }

 protected:
  DatasetStats stats_;
};

}  // namespace tarn
