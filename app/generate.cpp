#include "app/generate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "framework/autograd.h"
#include "app/session.h"
#include "layers/attention/registry.h"

namespace tarn::app {
namespace {

struct Encoded {
  Tensor out;
  PaddingMask padding;
};

// Right-padded batch of sources through the encoder.
Encoded encode(const BartForConditionalGeneration& model, const std::vector<std::vector<int32_t>>& sources) {
  const int32_t pad = model.config().pad_token_id;
  size_t len = 1;
  for (const auto& s : sources) len = std::max(len, s.size());
  std::vector<int32_t> ids(sources.size() * len, pad);
  PaddingMask padding(ids.size(), 1);
  for (size_t i = 0; i < sources.size(); ++i)
    for (size_t j = 0; j < sources[i].size(); ++j) {
      ids[i * len + j] = sources[i][j];
      padding[i * len + j] = 0;
    }
  const Shape shape{static_cast<int64_t>(sources.size()), static_cast<int64_t>(len)};
  return {model.encode(ids, shape, padding), padding};
}

// log-softmax of one row of logits, in double.
std::vector<double> log_probs(const float* logits, int64_t v) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < v; ++j) mx = std::max(mx, static_cast<double>(logits[j]));
  double z = 0;
  for (int64_t j = 0; j < v; ++j) z += std::exp(logits[j] - mx);
  const double lz = mx + std::log(z);
  std::vector<double> out(static_cast<size_t>(v));
  for (int64_t j = 0; j < v; ++j) out[j] = logits[j] - lz;
  return out;
}

// Sets the log-probability of every token that would repeat an n-gram of `tokens` to -inf.
// </s> is never in `tokens`, so it is never banned: a hypothesis can always end.
template <typename T>
void ban_repeated_ngrams(T* scores, const std::vector<int32_t>& tokens, int n) {
  for (int32_t tok : repeated_ngram_completions(tokens, n)) scores[tok] = -std::numeric_limits<T>::infinity();
}

// The token HuggingFace's ForcedBOS / ForcedEOS logits processors leave as the only choice at
// step t, or -1.
int32_t forced_token(const GenerateOptions& o, const BartConfig& c, int64_t t) {
  if (o.forced_bos && t == 0) return c.bos_token_id;
  if (o.forced_eos && t + 1 == o.max_length) return c.eos_token_id;
  return -1;
}

std::vector<std::vector<int32_t>> greedy(const BartForConditionalGeneration& model,
                                         const std::vector<std::vector<int32_t>>& sources, const GenerateOptions& o) {
  const BartConfig& c = model.config();
  const Encoded enc = encode(model, sources);
  DecodingState state = model.start_decoding(enc.out, enc.padding);
  const size_t b = sources.size();
  std::vector<std::vector<int32_t>> out(b);
  std::vector<bool> done(b, false);
  std::vector<int32_t> next(b, c.decoder_start_token_id);
  std::vector<float> allowed;  // a row with the banned tokens at -inf (--no-repeat-ngram)
  for (int64_t t = 0; t < o.max_length; ++t) {
    const Tensor logits = model.decode_step(state, next).to(Device::cpu());  // (B, V), read on the host
    const int64_t v = logits.size(-1);
    const float* p = logits.f32();
    bool all = true;
    for (size_t i = 0; i < b; ++i) {
      const float* row = p + i * v;
      if (o.no_repeat_ngram > 0 && !done[i]) {
        allowed.assign(row, row + v);
        ban_repeated_ngrams(allowed.data(), out[i], o.no_repeat_ngram);
        row = allowed.data();
      }
      const int32_t forced = forced_token(o, c, t);
      const int32_t tok = forced >= 0 ? forced : static_cast<int32_t>(std::max_element(row, row + v) - row);
      next[i] = done[i] ? c.pad_token_id : tok;
      if (!done[i]) {
        if (tok == c.eos_token_id) done[i] = true;
        else out[i].push_back(tok);
      }
      all = all && done[i];
    }
    if (all) break;
  }
  return out;
}

// Beam search for one source: `beam` hypotheses advance together as rows of one decoding state.
std::vector<int32_t> beam_search(const BartForConditionalGeneration& model, const std::vector<int32_t>& source,
                                 const GenerateOptions& o) {
  const BartConfig& c = model.config();
  const Encoded enc = encode(model, {source});
  DecodingState state = model.start_decoding(enc.out, enc.padding);
  reorder(state, std::vector<int64_t>(1, 0));
  struct Hyp {
    std::vector<int32_t> tokens;
    double logp = 0;
  };
  std::vector<Hyp> live{{{}, 0.0}};
  // Finished hypotheses: how many, and the best one (the first of equal scores). Only it is
  // returned, so the others' tokens are not kept: a model that keeps ending worse hypotheses
  // would otherwise hold up to `beam` more token lists every step (O(length^2) in all).
  int64_t finished = 0;
  double best_score = -std::numeric_limits<double>::infinity();
  std::vector<int32_t> best_tokens;
  auto normalised = [&](double logp, size_t len) { return logp / std::pow(static_cast<double>(len), o.length_penalty); };
  for (int64_t t = 0; t < o.max_length && !live.empty(); ++t) {
    std::vector<int32_t> last;
    for (const Hyp& h : live) last.push_back(h.tokens.empty() ? c.decoder_start_token_id : h.tokens.back());
    const Tensor logits = model.decode_step(state, last).to(Device::cpu());  // read on the host
    const int64_t v = logits.size(-1);
    struct Cand {
      double logp;
      size_t from;
      int32_t tok;
    };
    std::vector<Cand> cands;
    for (size_t i = 0; i < live.size(); ++i) {
      std::vector<double> lp = log_probs(logits.f32() + i * v, v);
      ban_repeated_ngrams(lp.data(), live[i].tokens, o.no_repeat_ngram);
      if (const int32_t forced = forced_token(o, c, t); forced >= 0) {
        for (double& x : lp) x = -std::numeric_limits<double>::infinity();
        lp[static_cast<size_t>(forced)] = 0.0;
      }
      // Only the top 2*beam of each row can survive: keep those.
      std::vector<int32_t> idx(static_cast<size_t>(v));
      std::iota(idx.begin(), idx.end(), 0);
      const size_t k = std::min<size_t>(idx.size(), 2 * static_cast<size_t>(o.beam));
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) { return lp[a] > lp[b]; });
      for (size_t j = 0; j < k && lp[idx[j]] > -std::numeric_limits<double>::infinity(); ++j)
        cands.push_back({live[i].logp + lp[idx[j]], i, idx[j]});
    }
    std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.logp > b.logp; });
    std::vector<Hyp> next;
    std::vector<int64_t> rows;
    for (const Cand& cd : cands) {
      if (static_cast<int>(next.size()) == o.beam) break;
      const std::vector<int32_t>& from = live[cd.from].tokens;
      if (cd.tok == c.eos_token_id || t + 1 == o.max_length) {
        const size_t len = from.size() + (cd.tok != c.eos_token_id ? 1 : 0);
        const double score = normalised(cd.logp, len + 1);
        ++finished;
        if (finished == 1 || score > best_score) {
          best_score = score;
          best_tokens.assign(from.begin(), from.end());
          if (cd.tok != c.eos_token_id) best_tokens.push_back(cd.tok);
        }
        continue;
      }
      Hyp h{{}, cd.logp};  // one copy of the history, sized for the new token
      h.tokens.reserve(from.size() + 1);
      h.tokens.assign(from.begin(), from.end());
      h.tokens.push_back(cd.tok);
      next.push_back(std::move(h));
      rows.push_back(static_cast<int64_t>(cd.from));
    }
    // Stop once the best finished hypothesis beats anything the live ones can still reach
    // (log-probabilities only fall as hypotheses grow).
    if (finished >= o.beam) {
      double best_live = -std::numeric_limits<double>::infinity();
      for (const Hyp& h : next) best_live = std::max(best_live, normalised(h.logp, static_cast<size_t>(o.max_length)));
      if (best_score >= best_live) break;
    }
    live = std::move(next);
    if (!live.empty()) reorder(state, rows);
  }
  if (finished == 0) return live.empty() ? std::vector<int32_t>{} : live.front().tokens;
  return best_tokens;
}

}  // namespace

std::vector<int32_t> repeated_ngram_completions(const std::vector<int32_t>& tokens, int n) {
  std::vector<int32_t> out;
  const int64_t prefix = n - 1, size = static_cast<int64_t>(tokens.size());
  // Every earlier n-gram tokens[i, i + n) whose first n-1 tokens equal the last n-1.
  for (int64_t i = 0; n > 0 && i + prefix < size; ++i) {
    if (std::equal(tokens.begin() + i, tokens.begin() + i + prefix, tokens.end() - prefix))
      out.push_back(tokens[static_cast<size_t>(i + prefix)]);
  }
  return out;
}

double decoding_memory_bytes(const BartConfig& c, int64_t rows, int64_t source_len, int64_t max_length) {
  const double r = static_cast<double>(rows), d = static_cast<double>(c.d_model);
  const int64_t steps = std::min(max_length, c.max_position_embeddings);
  const int64_t heads = c.heads;
  const double encoder = 4.0 * r * static_cast<double>(source_len) * d;
  double states = 0;  // per hypothesis, each decoder layer with its own attention
  const AttentionSizes self{d, static_cast<double>(heads), false}, cross{d, static_cast<double>(heads), true};
  for (int64_t l = 0; l < c.decoder_layers; ++l)  // as each layer's kind counts its state
    states += attention_decode_state_bytes(c.decoder_self_attention_of(l), self, static_cast<double>(steps)) +
              attention_decode_state_bytes(c.cross_attention_of(l), cross, static_cast<double>(source_len));
  const double logits = r * static_cast<double>(c.vocab_size) * (4.0 + 4.0 + 8.0);  // device, host, log-probs
  return encoder + r * states + logits;
}

void check_decoding_memory(const BartConfig& c, int64_t rows, int64_t source_len, const GenerateOptions& options,
                           double budget_bytes) {
  const double need = decoding_memory_bytes(c, rows, source_len, options.max_length);
  if (std::isfinite(need) && need <= budget_bytes) return;  // a sum that is not finite is too big
  bool softmax = false;
  for (int64_t l = 0; l < c.decoder_layers; ++l) softmax = softmax || c.decoder_self_attention_of(l).is_softmax();
  throw Error(str_cat("decoding ", rows, " hypotheses (--beam ", options.beam, ") of up to ",
                      std::min(options.max_length, c.max_position_embeddings), " tokens (--max-length ",
                      options.max_length, ") needs at least ", gigabytes(need), " but this machine has ",
                      gigabytes(budget_bytes),
                      softmax ? " (softmax attention keeps every token's keys and values)" : "",
                      ": lower --beam or --max-length"));
}

std::vector<std::vector<int32_t>> generate(const BartForConditionalGeneration& model,
                                           const std::vector<std::vector<int32_t>>& sources,
                                           const GenerateOptions& options) {
  TARN_CHECK(options.beam >= 1, "generate: --beam must be at least 1, got ", options.beam);
  TARN_CHECK(options.max_length >= 1, "generate: --max-length must be at least 1, got ", options.max_length);
  TARN_CHECK(options.no_repeat_ngram >= 0, "generate: --no-repeat-ngram must be 0 (off) or more, got ",
             options.no_repeat_ngram);
  NoGradGuard no_grad;
  if (sources.empty()) return {};
  // The decoder has max_position_embeddings positions: no token is generated past the last.
  GenerateOptions o = options;
  o.max_length = std::min(o.max_length, model.config().max_position_embeddings);
  size_t longest = 1;
  for (const auto& src : sources) longest = std::max(longest, src.size());
  const int64_t rows = options.beam == 1 ? static_cast<int64_t>(sources.size()) : options.beam;
  check_decoding_memory(model.config(), rows, static_cast<int64_t>(longest), options, usable_memory_bytes());
  if (o.beam == 1) return greedy(model, sources, o);
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : sources) out.push_back(beam_search(model, s, o));
  return out;
}

}  // namespace tarn::app
