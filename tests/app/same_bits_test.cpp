// Refactors keep the bits (issue 52): every small recipe, one per attention kind and feature map,
// trains a few steps on the toy corpus and decodes two sentences greedily; the parameters and
// the tokens must be what the build before the refactor gave, saved in tests/fixtures/same_bits.
//
// Bits depend on the machine (the BLAS kernel set, the vector units the kernels use) and on the
// build (optimisation flags, sanitizers: tests/CMakeLists.txt passes TARN_BUILD_FLAGS), so each
// fixture names the machine and build that wrote it. With both the same, every parameter's bytes
// and the decoded tokens must match exactly. Elsewhere only what rounding cannot move much is compared:
// each parameter's sum, sum of squares and four sampled values, to 1e-4 relative. A sum is relative to
// the parameter's L2 norm when that is larger: three Adam steps move every element by rounding noise
// of random sign, so a sum that cancels to near zero (an fc2 weight of 262,144 elements summing to
// -0.89, norm 25.7) moves on the scale of the norm, not of itself (1.2e-4 between Haswell and
// Cooperlake kernels, 5e-6 of the norm).
//
// To write the fixtures with a build of the code to keep: TARN_SAME_BITS_WRITE=1 ctest -R SameBits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app/generate.h"
#include "app/trained_model.h"
#include "app/trainer.h"
#include "framework/io/safetensors.h"
#include "kernels/blas_info.h"
#include "tests/app/app_test_util.h"

namespace tarn::app {
namespace {

struct Case {
  const char* name;    // the fixture's file name
  const char* recipe;  // under recipes/
  std::vector<std::string> extra;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Every kind and feature map the small recipes use, and the maps only tiny's overrides reach.
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"small-softmax", "small-softmax.yaml", {}},
      {"small-linear", "small-linear.yaml", {}},
      {"small-linear-encoder", "small-linear-encoder.yaml", {}},
      {"small-delta", "small-delta.yaml", {}},
      {"small-delta-taylor", "small-delta-taylor.yaml", {}},
      {"small-delta-everywhere", "small-delta-everywhere.yaml", {}},
      {"small-gated", "small-gated.yaml", {}},
      {"small-gated-everywhere", "small-gated-everywhere.yaml", {}},
      {"small-hybrid", "small-hybrid.yaml", {}},
      {"small-align-gate", "small-align-gate.yaml", {}},
      {"small-recall", "small-recall.yaml", {}},
      {"small-routed", "small-routed.yaml", {}},
      {"tiny-favor",
       "tiny.yaml",
       {"model.attention.encoder_self.feature_map=favor", "model.attention.decoder_self.feature_map=favor",
        "model.attention.cross.feature_map=favor", "model.attention.encoder_self.favor_redraw_every=2"}},
      {"tiny-hedgehog",
       "tiny.yaml",
       {"model.attention.encoder_self.feature_map=hedgehog", "model.attention.decoder_self.feature_map=hedgehog",
        "model.attention.cross.feature_map=hedgehog"}},
      {"tiny-dropout",
       "tiny.yaml",
       {"model.dropout=0.1", "model.attention_dropout=0.1", "model.attention.cross.kind=softmax",
        "model.attention.decoder_self.kind=hybrid", "model.attention.decoder_self.window=8"}},
  };
  return all;
}

std::string machine() {
  const kernels::BlasInfo blas = kernels::blas_info();
  const kernels::CpuVectorSupport cpu = kernels::CpuVectorSupport::of_this_cpu();
  std::ostringstream s;
  s << "blas=" << blas.core << " avx2=" << cpu.avx2_fma << " avx512=" << cpu.avx512 << " bf16=" << cpu.avx512_bf16
    << " build=" << TARN_BUILD_FLAGS;
  return s.str();
}

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << std::hex << std::setw(16) << std::setfill('0') << v;
  return s.str();
}

// One line per parameter ("param NAME HASH SUM SUMSQ V0 V1 V2 V3") and one for the decode.
struct Record {
  std::string machine;
  std::map<std::string, std::vector<std::string>> params;  // name -> hash, then the numbers
  std::string decode;
};

Record run_case(const Case& c) {
  const std::string dir = testing::make_tiny_corpus(std::string("same_bits_") + c.name);
  TrainOptions o;
  o.recipe_path = std::string(TARN_SOURCE_DIR) + "/recipes/" + c.recipe;
  o.overrides = testing::tiny_overrides(dir, 3);
  for (const char* s : {"data.test=\"\"", "data.tokenizer.train.vocab_size=128", "data.tokenizer.train.hard_vocab_limit=false",
                        "data.max_source_len=48", "data.max_target_len=48", "training.tokens_per_batch=384",
                        "training.max_time_minutes=0", "validation.every_steps=0", "validation.max_batches=1",
                        "checkpoints.every_steps=0", "logging.tensorboard=off", "optimizer.warmup_steps=2"})
    o.overrides.push_back(s);
  o.overrides.insert(o.overrides.end(), c.extra.begin(), c.extra.end());
  const TrainSummary summary = train(o);
  EXPECT_EQ(summary.steps, 3) << c.name;
  EXPECT_FALSE(summary.failed) << c.name;

  Record r;
  r.machine = machine();
  const Checkpoint ckpt = open_checkpoint(checkpoint_dir(dir + "/run", 3));
  for (const auto& [name, t] : load_safetensors(ckpt.path("model.safetensors")).tensors) {
    const std::vector<float> v = t.to_vector();
    double sum = 0, sumsq = 0;
    for (float x : v) {
      sum += x;
      sumsq += static_cast<double>(x) * x;
    }
    std::vector<std::string> fields = {hex(fnv1a(v.data(), v.size() * sizeof(float)))};
    std::ostringstream n;
    n << std::setprecision(9) << sum << " " << sumsq;
    for (size_t k = 0; k < 4; ++k) n << " " << (v.empty() ? 0.0f : v[(k * 7919) % v.size()]);
    std::istringstream split(n.str());
    for (std::string f; split >> f;) fields.push_back(f);
    r.params[name] = fields;
  }
  // Greedy decoding of two training sources: the decoding caches and steps of every kind.
  const TrainedModel m = load_trained_model(dir + "/run");
  std::vector<std::vector<int32_t>> sources = {m.tok->encode("the small cat sees a red bird ."),
                                               m.tok->encode("every old house holds some tree near the river .")};
  for (auto& s : sources) s.push_back(m.tok->eos_id());
  GenerateOptions g;
  g.max_length = 12;
  uint64_t h = fnv1a(nullptr, 0);
  for (const auto& out : generate(*m.model, sources, g)) h = fnv1a(out.data(), out.size() * sizeof(int32_t), h);
  r.decode = hex(h);
  return r;
}

std::string fixture_path(const Case& c) {
  return std::string(TARN_SOURCE_DIR) + "/tests/fixtures/same_bits/" + c.name + ".txt";
}

void write_fixture(const Case& c, const Record& r) {
  std::filesystem::create_directories(std::filesystem::path(fixture_path(c)).parent_path());
  std::ofstream out(fixture_path(c));
  out << "# tests/app/same_bits_test.cpp: " << c.name << " after 3 steps\n";
  out << "machine " << r.machine << "\n";
  out << "decode " << r.decode << "\n";
  for (const auto& [name, f] : r.params) {
    out << "param " << name;
    for (const auto& x : f) out << " " << x;
    out << "\n";
  }
}

Record read_fixture(const Case& c) {
  std::ifstream in(fixture_path(c));
  EXPECT_TRUE(in.good()) << "no fixture " << fixture_path(c) << " (TARN_SAME_BITS_WRITE=1 writes it)";
  Record r;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("machine ", 0) == 0) r.machine = line.substr(8);
    std::istringstream s(line);
    std::string tag, name;
    s >> tag;
    if (tag == "decode") s >> r.decode;
    if (tag != "param") continue;
    s >> name;
    for (std::string f; s >> f;) r.params[name].push_back(f);
  }
  return r;
}

class SameBits : public ::testing::TestWithParam<Case> {};

TEST_P(SameBits, ParametersAndDecodingMatchTheFixture) {
  const Case& c = GetParam();
  const Record now = run_case(c);
  if (std::getenv("TARN_SAME_BITS_WRITE")) {
    write_fixture(c, now);
    GTEST_SKIP() << "wrote " << fixture_path(c);
  }
  const Record saved = read_fixture(c);
  ASSERT_EQ(now.params.size(), saved.params.size()) << "parameter count";
  const bool same_machine = now.machine == saved.machine;
  std::cout << "[          ] " << c.name << ": "
            << (same_machine ? "exact bits (same machine and build)"
                             : "sums and samples to 1e-4 (fixture from " + saved.machine + ", this is " + now.machine + ")")
            << "\n";
  if (same_machine) {
    EXPECT_EQ(now.decode, saved.decode) << "greedy decoding changed";
  }
  for (const auto& [name, f] : saved.params) {
    const auto it = now.params.find(name);
    ASSERT_NE(it, now.params.end()) << "parameter " << name << " is gone";
    ASSERT_EQ(it->second.size(), f.size()) << name;
    if (same_machine) {
      EXPECT_EQ(it->second[0], f[0]) << name << ": the bits changed";
      continue;
    }
    // Fields: 1 the sum, 2 the sum of squares, 3-6 the samples.
    const double norm = std::sqrt(std::stod(f[2]));
    for (size_t k = 1; k < f.size(); ++k) {
      const double want = std::stod(f[k]), got = std::stod(it->second[k]);
      const double scale = std::max({1.0, std::abs(want), k == 1 ? norm : 0.0});
      EXPECT_LE(std::abs(got - want), 1e-4 * scale) << name << " field " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, SameBits, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = i.param.name;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace tarn::app
