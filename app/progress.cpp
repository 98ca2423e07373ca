#include "app/progress.h"

#include <cstdint>

#include "kernels/check.h"

namespace tarn::app {

json::Value progress_json(const Progress& p) {
  using json::Value;
  Value o = Value::object();
  o.set("step", Value::number(p.step));
  o.set("data_epoch", Value::number(p.data.epoch));
  o.set("data_batch", Value::number(p.data.batch));
  o.set("dropout_seed", Value::number(p.dropout.seed));
  o.set("dropout_counter", Value::number(p.dropout.counter));
  if (!p.rank_dropout.empty()) {
    std::vector<Value> ranks;
    for (const DropoutState& d : p.rank_dropout) {
      Value e = Value::object();
      e.set("seed", Value::number(d.seed));
      e.set("counter", Value::number(d.counter));
      ranks.push_back(e);
    }
    o.set("rank_dropout", Value::array(std::move(ranks)));
  }
  o.set("tokens_seen", Value::number(p.tokens_seen));
  o.set("elapsed_s", Value::number(p.elapsed_s));
  o.set("best_val_nll", p.has_best ? Value::number(p.best_val_nll) : Value());
  o.set("best_step", Value::number(p.best_step));
  o.set("evals_without_improvement", Value::number(p.evals_without_improvement));
  o.set("bad_steps_in_row", Value::number(p.bad_steps_in_row));
  o.set("skipped_steps", Value::number(p.skipped_steps));
  Value favor = Value::object();
  for (const auto& [name, f] : p.favor) {
    Value e = Value::object();
    e.set("seed", Value::number(f.rng.seed));
    e.set("stream", Value::number(f.rng.stream));
    e.set("offset", Value::number(f.rng.offset));
    e.set("steps", Value::number(f.steps));
    favor.set(name, e);
  }
  o.set("favor", favor);
  return o;
}

namespace {

const json::Value& field(const json::Value& o, const char* key, const std::string& source) {
  const json::Value* v = o.find(key);
  TARN_CHECK(v, source, ": missing \"", key, "\"");
  return *v;
}

uint64_t u64(const json::Value& o, const char* key, const std::string& source, const char* what) {
  return field(o, key, source).as_u64(str_cat(source, ": ", what));
}

// The signed counters: a number above INT64_MAX would wrap to a negative step or count, which
// progress_json then writes as a negative number that no reader takes back.
int64_t i64(const json::Value& o, const char* key, const std::string& source, const char* what) {
  const uint64_t v = u64(o, key, source, what);
  TARN_CHECK(v <= static_cast<uint64_t>(INT64_MAX), source, ": ", what, ": ", v, " is out of range (at most ",
             INT64_MAX, ")");
  return static_cast<int64_t>(v);
}

}  // namespace

Progress parse_progress(std::string_view text, const std::string& source) {
  const json::Value o = json::parse(text, source);
  Progress p;
  p.step = i64(o, "step", source, "step");
  p.data.epoch = u64(o, "data_epoch", source, "data_epoch");
  p.data.batch = u64(o, "data_batch", source, "data_batch");
  p.dropout.seed = u64(o, "dropout_seed", source, "dropout_seed");
  p.dropout.counter = u64(o, "dropout_counter", source, "dropout_counter");
  if (const json::Value* ranks = o.find("rank_dropout"))
    for (const json::Value& e : ranks->items(source + ": rank_dropout"))
      p.rank_dropout.push_back(
          {u64(e, "seed", source, "rank_dropout.seed"), u64(e, "counter", source, "rank_dropout.counter")});
  p.tokens_seen = i64(o, "tokens_seen", source, "tokens_seen");
  p.elapsed_s = field(o, "elapsed_s", source).as_double(source + ": elapsed_s");
  const json::Value& best = field(o, "best_val_nll", source);
  p.has_best = !best.is_null();
  if (p.has_best) p.best_val_nll = best.as_double(source + ": best_val_nll");
  p.best_step = i64(o, "best_step", source, "best_step");
  p.evals_without_improvement = i64(o, "evals_without_improvement", source, "evals_without_improvement");
  p.bad_steps_in_row = i64(o, "bad_steps_in_row", source, "bad_steps_in_row");
  p.skipped_steps = i64(o, "skipped_steps", source, "skipped_steps");
  for (const auto& [name, e] : field(o, "favor", source).members(source + ": favor")) {
    Progress::Favor& f = p.favor[name];
    f.rng.seed = u64(e, "seed", source, "favor.seed");
    f.rng.stream = u64(e, "stream", source, "favor.stream");
    f.rng.offset = u64(e, "offset", source, "favor.offset");
    f.steps = i64(e, "steps", source, "favor.steps");
  }
  return p;
}

}  // namespace tarn::app
