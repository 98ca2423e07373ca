#include "tools/tarn/progress.h"

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

}  // namespace

Progress parse_progress(std::string_view text, const std::string& source) {
  const json::Value o = json::parse(text, source);
  Progress p;
  p.step = static_cast<int64_t>(field(o, "step", source).as_u64("step"));
  p.data.epoch = field(o, "data_epoch", source).as_u64("data_epoch");
  p.data.batch = field(o, "data_batch", source).as_u64("data_batch");
  p.dropout.seed = field(o, "dropout_seed", source).as_u64("dropout_seed");
  p.dropout.counter = field(o, "dropout_counter", source).as_u64("dropout_counter");
  if (const json::Value* ranks = o.find("rank_dropout"))
    for (const json::Value& e : ranks->items("rank_dropout"))
      p.rank_dropout.push_back({field(e, "seed", source).as_u64("rank_dropout.seed"),
                                field(e, "counter", source).as_u64("rank_dropout.counter")});
  p.tokens_seen = static_cast<int64_t>(field(o, "tokens_seen", source).as_u64("tokens_seen"));
  p.elapsed_s = field(o, "elapsed_s", source).as_double("elapsed_s");
  const json::Value& best = field(o, "best_val_nll", source);
  p.has_best = !best.is_null();
  if (p.has_best) p.best_val_nll = best.as_double("best_val_nll");
  p.best_step = static_cast<int64_t>(field(o, "best_step", source).as_u64("best_step"));
  p.evals_without_improvement =
      static_cast<int64_t>(field(o, "evals_without_improvement", source).as_u64("evals_without_improvement"));
  p.bad_steps_in_row = static_cast<int64_t>(field(o, "bad_steps_in_row", source).as_u64("bad_steps_in_row"));
  p.skipped_steps = static_cast<int64_t>(field(o, "skipped_steps", source).as_u64("skipped_steps"));
  for (const auto& [name, e] : field(o, "favor", source).members("favor")) {
    Progress::Favor& f = p.favor[name];
    f.rng.seed = field(e, "seed", source).as_u64("favor.seed");
    f.rng.stream = field(e, "stream", source).as_u64("favor.stream");
    f.rng.offset = field(e, "offset", source).as_u64("favor.offset");
    f.steps = static_cast<int64_t>(field(e, "steps", source).as_u64("favor.steps"));
  }
  return p;
}

}  // namespace tarn::app
