#include "app/progress.h"

#include <cstdint>

#include "kernels/check.h"

namespace tarn::app {

json::Json progress_json(const Progress& p) {
  json::Json o = json::Json::object();
  o["step"] = p.step;
  o["data_epoch"] = p.data.epoch;
  o["data_batch"] = p.data.batch;
  o["dropout_seed"] = p.dropout.seed;
  o["dropout_counter"] = p.dropout.counter;
  if (!p.rank_dropout.empty()) {
    std::vector<json::Json> ranks;
    for (const DropoutState& d : p.rank_dropout) {
      json::Json e = json::Json::object();
      e["seed"] = d.seed;
      e["counter"] = d.counter;
      ranks.push_back(e);
    }
    o["rank_dropout"] = std::move(ranks);
  }
  o["tokens_seen"] = p.tokens_seen;
  o["elapsed_s"] = p.elapsed_s;
  o["best_val_nll"] = p.has_best ? json::Json(p.best_val_nll) : json::Json();
  o["best_step"] = p.best_step;
  o["evals_without_improvement"] = p.evals_without_improvement;
  o["bad_steps_in_row"] = p.bad_steps_in_row;
  o["skipped_steps"] = p.skipped_steps;
  json::Json favor = json::Json::object();
  for (const auto& [name, f] : p.favor) {
    json::Json e = json::Json::object();
    e["seed"] = f.rng.seed;
    e["stream"] = f.rng.stream;
    e["offset"] = f.rng.offset;
    e["steps"] = f.steps;
    favor[name] = e;
  }
  o["favor"] = favor;
  return o;
}

namespace {

const json::Json& field(const json::Json& o, const char* key, const std::string& source) {
  const json::Json* v = json::find(o, key);
  TARN_CHECK(v, source, ": missing \"", key, "\"");
  return *v;
}

uint64_t u64(const json::Json& o, const char* key, const std::string& source, const char* what) {
  return json::as_u64(field(o, key, source), str_cat(source, ": ", what));
}

// The signed counters: a number above INT64_MAX would wrap to a negative step or count, which
// progress_json then writes as a negative number that no reader takes back.
int64_t i64(const json::Json& o, const char* key, const std::string& source, const char* what) {
  const uint64_t v = u64(o, key, source, what);
  TARN_CHECK(v <= static_cast<uint64_t>(INT64_MAX), source, ": ", what, ": ", v, " is out of range (at most ",
             INT64_MAX, ")");
  return static_cast<int64_t>(v);
}

}  // namespace

Progress parse_progress(std::string_view text, const std::string& source) {
  const json::Json o = json::parse(text, source);
  Progress p;
  p.step = i64(o, "step", source, "step");
  p.data.epoch = u64(o, "data_epoch", source, "data_epoch");
  p.data.batch = u64(o, "data_batch", source, "data_batch");
  p.dropout.seed = u64(o, "dropout_seed", source, "dropout_seed");
  p.dropout.counter = u64(o, "dropout_counter", source, "dropout_counter");
  if (const json::Json* ranks = json::find(o, "rank_dropout"))
    for (const json::Json& e : json::items(*ranks, source + ": rank_dropout"))
      p.rank_dropout.push_back(
          {u64(e, "seed", source, "rank_dropout.seed"), u64(e, "counter", source, "rank_dropout.counter")});
  p.tokens_seen = i64(o, "tokens_seen", source, "tokens_seen");
  p.elapsed_s = json::as_double(field(o, "elapsed_s", source), source + ": elapsed_s");
  const json::Json& best = field(o, "best_val_nll", source);
  p.has_best = !best.is_null();
  if (p.has_best) p.best_val_nll = json::as_double(best, source + ": best_val_nll");
  p.best_step = i64(o, "best_step", source, "best_step");
  p.evals_without_improvement = i64(o, "evals_without_improvement", source, "evals_without_improvement");
  p.bad_steps_in_row = i64(o, "bad_steps_in_row", source, "bad_steps_in_row");
  p.skipped_steps = i64(o, "skipped_steps", source, "skipped_steps");
  for (const auto& [name, e] : json::members(field(o, "favor", source), source + ": favor")) {
    Progress::Favor& f = p.favor[name];
    f.rng.seed = u64(e, "seed", source, "favor.seed");
    f.rng.stream = u64(e, "stream", source, "favor.stream");
    f.rng.offset = u64(e, "offset", source, "favor.offset");
    f.steps = i64(e, "steps", source, "favor.steps");
  }
  return p;
}

}  // namespace tarn::app
