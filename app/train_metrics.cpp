#include "app/train_metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "framework/config/config_error.h"
#include "framework/io/json.h"
#include "framework/log/log.h"
#include "app/session.h"

namespace tarn::app {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Metrics are JSON numbers when finite; an infinite perplexity (or any other overflow) is null.
json::Json metric(double v) { return std::isfinite(v) ? json::Json(v) : json::Json(); }

}  // namespace

std::string tensorboard_folder(const Recipe& recipe) {
  return recipe.logging.tensorboard == "off" ? "" : recipe.logging.tensorboard;
}

void TrainMetrics::open(const Recipe& recipe, int64_t step) {
  const std::string& path = recipe.logging.metrics_file;
  if (const auto parent = std::filesystem::path(path).parent_path(); !parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
  }
  file_ = std::make_unique<std::ofstream>(path, std::ios::app);
  if (!file_->good())
    throw ConfigError(recipe.where("logging.metrics_file"), "logging.metrics_file",
                      str_cat("cannot open ", short_path(path), " for appending (", std::strerror(errno), ")"));
  if (const std::string dir = tensorboard_folder(recipe); !dir.empty()) {
    try {
      tensorboard_ = std::make_unique<TensorBoardWriter>(dir, step);
    } catch (const Error& e) {
      throw ConfigError(recipe.where("logging.tensorboard"), "logging.tensorboard", e.what());
    }
    for (const EventFileRewind& r : tensorboard_->rewound())
      log::info("train", "TensorBoard: ", short_path(r.path), " rewound to step ", step, " (", r.dropped,
                " events after it dropped", r.damaged_tail ? ", a damaged last record cut" : "",
                "), as the run resumes from there");
  }
}

void TrainMetrics::log_start(int64_t step, long long examples, const Recipe& recipe) const {
  log::info("train", "training from step ", log::thousands(step), " on ", log::thousands(examples), " examples, ",
            log::thousands(recipe.training.tokens_per_batch), " tokens per batch; metrics in ",
            recipe.logging.metrics_file,
            tensorboard_ ? str_cat(", TensorBoard: tensorboard --logdir ", recipe.logging.tensorboard) : std::string());
}

void TrainMetrics::start() {
  interval_ = Interval();
  tokens_this_run_ = 0;
}

void TrainMetrics::add(const StepResult& r, int64_t counted) {
  tokens_this_run_ += r.tokens;
  interval_.loss_sum += r.loss_sum / static_cast<double>(counted);
  interval_.nll_sum += r.nll_sum;
  interval_.nll_tokens += counted;
  interval_.grad_norm_sum += r.grad_norm;
  interval_.tokens += r.tokens;
  ++interval_.steps;
}

void TrainMetrics::log_skipped(int64_t number, StepOutcome outcome, int64_t in_row, int64_t max_bad) const {
  log::warn("train", str_cat("step ", number, ": ",
                             outcome == StepOutcome::nonfinite_loss
                                 ? "non-finite or diverged loss (over " + log::number("%.0f", kDivergedLoss) +
                                       " nats per token)"
                                 : std::string("non-finite gradient norm"),
                             ", update skipped (", in_row, " in a row, ", max_bad, " stop the run)"));
}

std::optional<double> TrainMetrics::log_interval(const Progress& progress, const TrainingRecipe& t, double elapsed) {
  if (interval_.steps == 0) return std::nullopt;
  const double secs = seconds_since(interval_.start);
  const double loss = interval_.loss_sum / static_cast<double>(interval_.steps);
  const double nll = interval_.nll_sum / static_cast<double>(std::max<int64_t>(1, interval_.nll_tokens));
  const double tps = interval_.tokens / std::max(secs, 1e-9);
  const double grad_norm = interval_.grad_norm_sum / interval_.steps;
  double eta = NAN;
  const double per_step = secs / static_cast<double>(interval_.steps);
  if (t.max_steps > 0) eta = per_step * static_cast<double>(t.max_steps - progress.step);
  if (t.max_time_minutes > 0) {
    const double left = t.max_time_minutes * 60 - elapsed;
    eta = std::isnan(eta) ? left : std::min(eta, left);
  }
  std::string line = "step " + log::thousands(progress.step);
  if (t.max_steps > 0) line += "/" + log::thousands(t.max_steps);
  line += " | ep " + std::to_string(progress.data.epoch) + " | loss " + log::number("%.3f", loss) + " | ppl " +
          log::number("%.1f", std::exp(nll)) + " | lr " + log::number("%.2e", lr_) + " | gnorm " +
          log::number("%.2f", grad_norm) + " | " + log::thousands(static_cast<long long>(tps)) + " tok/s | " +
          log::duration(elapsed);
  if (!std::isnan(eta)) line += ", ETA " + log::duration(std::max(0.0, eta));
  log::progress("train", line);

  json::Json m = json::Json::object();
  m["kind"] = "train";
  m["step"] = progress.step;
  m["epoch"] = progress.data.epoch;
  m["loss"] = metric(loss);
  m["nll"] = metric(nll);
  m["ppl"] = metric(std::exp(nll));
  m["lr"] = static_cast<double>(lr_);
  m["grad_norm"] = metric(grad_norm);
  m["tokens_per_s"] = metric(tps);
  m["tokens_seen"] = progress.tokens_seen;
  m["elapsed_s"] = elapsed;
  write(m);
  scalars(progress.step, {{"train/loss", loss},
                          {"train/nll", nll},
                          {"train/ppl", std::exp(nll)},
                          {"train/lr", lr_},
                          {"train/grad_norm", grad_norm},
                          {"train/tokens_per_s", tps},
                          {"memory/rss_mib", resident_memory().current_bytes / double(1 << 20)}});
  interval_ = Interval();
  return loss;
}

void TrainMetrics::log_validation(const Progress& progress, const ValidationReport& v, double elapsed, Device device) {
  const EvalResult& r = v.result;
  const MemoryStats& mem = v.memory;
  log::info("valid", "step ", log::thousands(progress.step), " | nll ", log::number("%.4f", r.mean_nll()),
            " | ppl ", log::number("%.2f", r.perplexity()), " over ", log::thousands(r.tokens), " tokens (", r.batches,
            " batches, ", log::duration(v.seconds), ") | ", log::duration(elapsed), " | mem live peak ",
            log::mebibytes(mem.high_water_bytes), device.is_cpu() ? "" : " on " + device.str(), ", RSS peak ",
            log::mebibytes(v.resident.peak_bytes), v.best ? " | best so far" : "");
  json::Json m = json::Json::object();
  m["kind"] = "valid";
  m["step"] = progress.step;
  m["nll"] = metric(r.mean_nll());
  m["ppl"] = metric(r.perplexity());
  m["tokens"] = r.tokens;
  m["best"] = v.best;
  m["tokens_seen"] = progress.tokens_seen;
  m["elapsed_s"] = elapsed;
  m["memory_live_peak_bytes"] = static_cast<double>(mem.high_water_bytes);
  m["memory_cached_bytes"] = static_cast<double>(mem.cached_bytes);
  m["rss_peak_bytes"] = static_cast<double>(v.resident.peak_bytes);
  write(m);
  scalars(progress.step, {{"valid/nll", r.mean_nll()},
                          {"valid/ppl", r.perplexity()},
                          {"memory/rss_peak_mib", v.resident.peak_bytes / double(1 << 20)},
                          {"memory/live_peak_mib", mem.high_water_bytes / double(1 << 20)}});
}

void TrainMetrics::log_test(int64_t step, const EvalResult& r, const std::string& data) {
  scalars(step, {{"test/nll", r.mean_nll()}, {"test/ppl", r.perplexity()}});
  log::info("test", "nll ", log::number("%.4f", r.mean_nll()), " | ppl ", log::number("%.2f", r.perplexity()),
            " over ", log::thousands(r.tokens), " target tokens (", data, ")");
}

void TrainMetrics::write(const json::Json& line) {
  if (!file_) return;
  *file_ << json::dump(line) << "\n";
  file_->flush();
}

void TrainMetrics::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  if (!tensorboard_) return;
  try {
    tensorboard_->scalars(step, values);
  } catch (const Error& e) {
    log::warn("train", str_cat("TensorBoard: ", e.what(), "; no more events are written this run"));
    tensorboard_.reset();
  }
}

}  // namespace tarn::app
