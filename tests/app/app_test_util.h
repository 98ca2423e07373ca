#pragma once
// Shared by the end-to-end suites: a small synthetic corpus (deterministic sentences from a
// toy grammar, so tests need no downloaded data) and the tiny recipe pointed at it.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "framework/io/checkpoint_dir.h"
#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "framework/rng.h"

namespace tarn::testing {

inline std::string fresh_dir(const std::string& name) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("tarn_app_" + name)).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Lines like "the small cat sees a red bird near the river ." from a fixed seed.
inline void write_corpus(const std::string& path, int lines, uint64_t seed) {
  static const std::vector<std::string> det = {"the", "a", "every", "some"};
  static const std::vector<std::string> adj = {"small", "red", "old", "quiet", "bright", "green"};
  static const std::vector<std::string> noun = {"cat", "bird", "river", "stone", "house", "tree", "child", "road"};
  static const std::vector<std::string> verb = {"sees", "follows", "finds", "crosses", "holds", "likes"};
  static const std::vector<std::string> prep = {"near", "under", "beside", "behind"};
  Philox rng(seed);
  auto pick = [&](const std::vector<std::string>& v) { return v[rng.below(static_cast<uint32_t>(v.size()))]; };
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    out << pick(det) << " " << pick(adj) << " " << pick(noun) << " " << pick(verb) << " " << pick(det) << " "
        << pick(noun);
    if (rng.below(2)) out << " " << pick(prep) << " " << pick(det) << " " << pick(adj) << " " << pick(noun);
    out << " .\n";
  }
}

// Lines of 5 to 10 words drawn independently and uniformly from the toy grammar's words: no
// sentence is likelier than another, so a model that reproduces one cannot be leaning on a
// language-model prior; it has to read its input.
inline void write_word_salad(const std::string& path, int lines, uint64_t seed) {
  static const std::vector<std::string> words = {
      "the",  "a",      "every",  "some",  "small", "red",     "old",   "quiet", "bright", "green",
      "cat",  "bird",   "river",  "stone", "house", "tree",    "child", "road",  "sees",   "follows",
      "finds", "crosses", "holds", "likes", "near",  "under",  "beside", "behind"};
  Philox rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    const uint32_t n = 5 + rng.below(6);
    for (uint32_t w = 0; w < n; ++w) out << (w ? " " : "") << words[rng.below(static_cast<uint32_t>(words.size()))];
    out << "\n";
  }
}

// --set overrides that point recipes/tiny.yaml at a corpus and run folder under `dir`.
inline std::vector<std::string> tiny_overrides(const std::string& dir, int64_t max_steps) {
  return {"data.train=" + dir + "/train.txt",
          "data.valid=" + dir + "/valid.txt",
          "data.tokenizer.train.model_prefix=" + dir + "/spm",
          "checkpoints.dir=" + dir + "/run",
          "training.max_steps=" + std::to_string(max_steps),
          "training.threads=1",  // ctest runs tests side by side (tests/CMakeLists.txt)
          "logging.every_steps=5"};
}

// The checkpoint of step `step` as values: weights and optimizer moments, for bit-for-bit
// comparisons of two runs.
inline std::vector<float> final_state(const std::string& run_dir, int64_t step) {
  const Checkpoint c = open_checkpoint(checkpoint_dir(run_dir, step));
  std::vector<float> all;
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    for (const auto& [name, t] : load_safetensors(c.path(file)).tensors) {
      const auto v = t.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
  return all;
}

// The "loss" of every "kind":"train" line of a metrics.jsonl, in step order.
inline std::vector<double> train_losses(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {
    const json::Json v = json::parse(line, "metrics.jsonl");
    if (json::as_string(v.at("kind"), "kind") == "train") losses.push_back(json::as_double(v.at("loss"), "loss"));
  }
  return losses;
}

inline std::string tiny_recipe() { return std::string(TARN_SOURCE_DIR) + "/recipes/tiny.yaml"; }

inline std::string make_tiny_corpus(const std::string& name) {
  const std::string dir = fresh_dir(name);
  write_corpus(dir + "/train.txt", 300, 1);
  write_corpus(dir + "/valid.txt", 40, 2);
  return dir;
}

}  // namespace tarn::testing
