// Long decoding keeps nothing per token beyond what the user gets (issue 56, item 4: 65,536
// greedy tokens grew resident memory by ~250 bytes a token with every attention kind). The
// decoder's state (linear S and z, delta S and the convolutions' tails, hybrid's window) and
// the allocator's live and peak bytes stay flat with position; what remains per token is the
// generated ids (4 bytes, in a std::vector) and their text. The growth was SentencePiece's
// Decode building one SentencePieceText entry per id (~200 bytes) before returning the text:
// Tokenizer::decode now decodes by bounded chunks, and its heap peak per id is checked here
// with a counting operator new (this thread's allocations only, while a scope asks for them).
#include <gtest/gtest.h>

#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "app/generate.h"
#include "data/tokenizer.h"
#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/rng.h"
#include "layers/bart.h"
#include "tests/app/app_test_util.h"

namespace {

// Heap bytes this thread holds through operator new while a HeapPeak is alive, and their peak.
thread_local bool t_counting = false;
thread_local int64_t t_live = 0, t_peak = 0;

void* counted_new(size_t bytes) {
  void* p = std::malloc(bytes ? bytes : 1);
  if (!p) throw std::bad_alloc();
  if (t_counting) {
    t_live += static_cast<int64_t>(malloc_usable_size(p));
    t_peak = std::max(t_peak, t_live);
  }
  return p;
}

void counted_delete(void* p) noexcept {
  if (!p) return;
  if (t_counting) t_live -= static_cast<int64_t>(malloc_usable_size(p));
  std::free(p);
}

}  // namespace

// Replaced for the whole suite; they only count inside a HeapPeak scope, on its thread. Every
// unaligned form is replaced, the nothrow ones too (std::stable_sort's buffer comes from
// nothrow new and goes back through sized delete): under AddressSanitizer, whose runtime
// defines each form, a form left out would pair its new with this file's free.
void* operator new(size_t bytes) { return counted_new(bytes); }
void* operator new[](size_t bytes) { return counted_new(bytes); }
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return counted_new(bytes);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t bytes, const std::nothrow_t& tag) noexcept { return operator new(bytes, tag); }
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, size_t) noexcept { counted_delete(p); }
void operator delete[](void* p, size_t) noexcept { counted_delete(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_delete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_delete(p); }

namespace tarn::app {
namespace {

// The most heap bytes this thread held at once, beyond what it held at the start, while alive.
class HeapPeak {
 public:
  HeapPeak() {
    t_live = t_peak = 0;
    t_counting = true;
  }
  ~HeapPeak() { t_counting = false; }
  int64_t peak() const { return t_peak; }
};

// A tiny model of `kind` in its decoder's self-attention (linear cross-attention and encoder),
// `positions` long, whose </s> never wins: greedy decoding runs to --max-length.
std::unique_ptr<BartForConditionalGeneration> endless_model(AttentionKind kind, int64_t positions) {
  BartConfig c = BartConfig::tiny();
  c.vocab_size = 64;
  c.max_position_embeddings = positions;
  c.dropout = 0.0f;
  c.with_attention(AttentionConfig::linear_attention());
  AttentionConfig self = AttentionConfig::linear_attention();
  self.kind = kind;
  if (kind == AttentionKind::hybrid) self.window = 16;
  c.attention.decoder_self = self;
  auto model = std::make_unique<BartForConditionalGeneration>(c, 7);
  model->eval();
  float* bias = model->final_logits_bias.f32();
  bias[c.eos_token_id] = -1e30f;
  return model;
}

// A tokenizer trained on the toy grammar's sentences (a few dozen pieces).
Tokenizer tiny_tokenizer(const std::string& dir) {
  testing::write_corpus(dir + "/train.txt", 300, 1);
  TokenizerTrainOptions options;
  options.hard_vocab_limit = false;
  return Tokenizer::load(Tokenizer::train({dir + "/train.txt"}, dir + "/spm", 60, options));
}

const std::vector<int32_t> kSource = {5, 9, 13, 17, 21, 25, 2};

struct Kind {
  const char* name;
  AttentionKind kind;
};
const std::vector<Kind> kKinds = {{"linear", AttentionKind::linear},
                                  {"delta", AttentionKind::delta},
                                  {"hybrid", AttentionKind::hybrid}};

TEST(DecodingMemory, DecoderStateAndAllocatorStayFlatWithPosition) {
  for (const Kind& k : kKinds) {
    SCOPED_TRACE(k.name);
    const auto model = endless_model(k.kind, 2048);
    NoGradGuard no_grad;
    const PaddingMask padding(kSource.size(), 0);
    const Tensor enc = model->encode(kSource, Shape{1, static_cast<int64_t>(kSource.size())}, padding);
    DecodingState state = model->start_decoding(enc, padding);
    std::vector<int32_t> token = {model->config().decoder_start_token_id};
    int64_t live_at_256 = 0, system_at_256 = 0;
    for (int64_t p = 1; p <= 2048; ++p) {
      const Tensor logits = model->decode_step(state, token);
      const float* row = logits.f32();
      token[0] = static_cast<int32_t>(std::max_element(row, row + model->config().vocab_size) - row);
      if (p == 256) {
        live_at_256 = memory_stats().current_bytes;
        system_at_256 = memory_stats().system_allocations;
      }
      if (p == 2048) {
        // Not a byte more held, and no new block asked of the system: each step re-uses the last one's.
        EXPECT_EQ(memory_stats().current_bytes, live_at_256);
        EXPECT_EQ(memory_stats().system_allocations, system_at_256);
      }
    }
    EXPECT_EQ(state.step, 2048);
  }
}

TEST(DecodingMemory, GenerateKeepsOnlyTheTokensPerPosition) {
  GenerateOptions o;
  for (const Kind& k : kKinds) {
    SCOPED_TRACE(k.name);
    const auto model = endless_model(k.kind, 2048);
    // The allocator's peak and the heap's through a whole generate(), short and 8x longer: the
    // longer one may hold only its 4-byte ids more (std::vector doubling: at most 8 per token).
    auto measure = [&](int64_t length, int64_t* allocator_peak) {
      o.max_length = length;
      reset_peak_memory();
      HeapPeak heap;
      const auto out = generate(*model, {kSource}, o);
      EXPECT_EQ(static_cast<int64_t>(out.at(0).size()), length);  // </s> never chosen
      *allocator_peak = memory_stats().peak_bytes;
      return heap.peak();
    };
    int64_t short_peak = 0, long_peak = 0;
    const int64_t short_heap = measure(256, &short_peak), long_heap = measure(2048, &long_peak);
    EXPECT_EQ(long_peak, short_peak);
    EXPECT_LE(long_heap - short_heap, 8 * (2048 - 256) + 4096)
        << "heap bytes per token: " << double(long_heap - short_heap) / (2048 - 256);
  }
}

TEST(DecodingMemory, DetokenisingHoldsLittleMoreThanTheText) {
  const std::string dir = testing::fresh_dir("decoding_memory");
  const Tokenizer tok = tiny_tokenizer(dir);
  // 40,000 ids of words (a looping model's output): SentencePiece alone held ~200 bytes per id.
  const std::vector<int32_t> words = tok.encode("the small cat sees a red bird near the river .");
  std::vector<int32_t> ids;
  while (ids.size() < 40000) ids.insert(ids.end(), words.begin(), words.end());
  std::string text;
  int64_t peak = 0;
  {
    HeapPeak heap;
    text = tok.decode(ids);
    peak = heap.peak();
  }
  int64_t one_decode_peak = 0;
  {
    HeapPeak heap;
    EXPECT_EQ(tok.decode(ids, ids.size()), text);  // one Decode of everything: the same text
    one_decode_peak = heap.peak();
  }
  // What this test guards against, seen by the same measure: ~200 bytes per id.
  EXPECT_GT(one_decode_peak, 100 * static_cast<int64_t>(ids.size()));
  // The text (and its string's doubling), and one chunk's worth of SentencePiece's entries.
  EXPECT_LE(peak, 2 * static_cast<int64_t>(text.size()) + 1024 * 1024)
      << "bytes per id: " << double(peak) / double(ids.size()) << ", text " << text.size() << " bytes";
}

TEST(DecodingMemory, ChunkedDetokenisingEqualsOneDecode) {
  const std::string dir = testing::fresh_dir("decoding_chunks");
  const Tokenizer tok = tiny_tokenizer(dir);
  Philox rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    // Any ids: controls (<s>, <pad>, </s>), <unk>, <mask>, pieces with and without a word start.
    std::vector<int32_t> ids(rng.below(200));
    for (int32_t& id : ids) id = static_cast<int32_t>(rng.below(static_cast<uint32_t>(tok.vocab_size())));
    if (trial % 3 == 0)
      for (size_t i = 0; i < ids.size() / 2; ++i) ids[i] = static_cast<int32_t>(rng.below(3));  // a long control prefix
    const std::string whole = tok.decode(ids, ids.size() + 1);
    for (size_t chunk : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}})
      ASSERT_EQ(tok.decode(ids, chunk), whole) << "trial " << trial << ", chunks of " << chunk;
  }
}

}  // namespace
}  // namespace tarn::app
