#include "tools/bench/tarn/bench_commands.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/init.h"
#include "framework/log/log.h"
#include "framework/ops/attention.h"
#include "framework/ops/delta_rule.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"
#include "framework/rng.h"
#include "kernels/check.h"
#include "kernels/parallel.h"
#include "tools/bench/tarn/bench_common.h"
#include "tools/bench/tarn/bench_routed.h"
#include "app/session.h"

namespace tarn::app {
namespace {

constexpr const char* kDescription = R"(Forward and forward+backward time and peak memory of softmax and linear
attention (bidirectional, causal, cross; per feature map) against N; where linear wins.

Forward and forward+backward time (median) and peak memory (tarn's allocator, inputs and
gradients included) of one attention op, for B x H heads of dimension D:
  softmax          tarn's blocked softmax kernel (memory linear in N)
  softmax_causal   the same with the causal mask
  softmax_dense    scores as an N x N matrix, softmax, product (PyTorch eager's way)
  linear           bidirectional linear attention, per feature map
  linear_causal    the causal chunked scan, per feature map
  linear_cross     queries attending a source of N keys through a padding mask, per map
  delta_causal     the gated delta rule's causal scan (kind delta: unit q and k rows, beta
                   0.5, alpha 0.99; chunks of 32 tokens), the kernels' own choice of
                   algorithm (on the CPU the chunked WY form up to 48 tokens, the
                   recurrence beyond; on CUDA the chunked form); feature_map "-"
  delta_causal_recurrent, delta_causal_chunked
                   the same scan with the token-by-token recurrence, or the chunked form,
                   forced (kernels/delta_rule.h)
  gated_causal     the same scan without the erase (kind gated)
  window           softmax over a sliding window of each --windows size (|i - j| <= w/2),
                   the blocked kernel skipping the blocks outside it; feature_map "wW"
  window_causal    the same over the last w keys (kind hybrid runs this and linear_causal on
                   the same q, k, v, then mixes them elementwise)
  routed_cross     kind routed's reads of a source of N keys (layers/attention/routed.h) at the
                   recipes' chunks of 16 and 4 chunks read exactly: the landmarks, softmax
                   over them, the choice and the selected read, summed (the gate's mix aside);
                   the landmark scores are N x N/16 per head
  routed_tree      the same with small-recall's route_root 64 and route_beam 8: a tree of
                   landmarks as deep as N needs for at most 64 at its top, then 8 x 16 children
                   scored at each level above the keys' chunks and 4 x 16 keys
A configuration that would not fit in --max-gib is refused up front (status "skipped: ..."),
and so is one whose predicted time per run exceeds --max-seconds; both stay in the CSV.)";

const std::vector<std::string> kAlgos = {"softmax",      "softmax_causal", "softmax_dense", "linear",
                                         "linear_causal", "linear_cross",  "delta_causal",  "gated_causal",
                                         "window",        "window_causal", "routed_cross",
                                         "routed_tree",   "delta_causal_recurrent", "delta_causal_chunked"};
// What --algos defaults to: every kind, without the forced algorithms (delta_causal runs one of
// them).
const std::vector<std::string> kDefaultAlgos(kAlgos.begin(), kAlgos.end() - 2);

struct Shape4 {
  int64_t batch, heads, n, dim;
  double values() const { return static_cast<double>(batch * heads) * static_cast<double>(n * dim); }
};

bool is_softmax(const std::string& algo) { return algo.rfind("softmax", 0) == 0; }
bool is_recurrent(const std::string& algo) { return algo.rfind("delta_causal", 0) == 0 || algo == "gated_causal"; }
// Algorithms over a sliding window: their feature_map field names the window ("w64").
bool is_windowed(const std::string& algo) { return algo.rfind("window", 0) == 0; }
bool is_routed(const std::string& algo) { return algo.rfind("routed", 0) == 0; }
// Algorithms that take no feature map ("-" in the CSV).
bool takes_no_map(const std::string& algo) {
  return is_softmax(algo) || is_recurrent(algo) || is_routed(algo);
}
// Algorithms whose work grows as N^2 (routed's landmark scores: N x N / 16).
bool is_quadratic(const std::string& algo) { return is_softmax(algo) || algo == "routed_cross"; }

constexpr int64_t kRouteChunk = 16, kRouteTop = 4;  // recipes/small-routed.yaml
constexpr int64_t kRouteRoot = 64, kRouteBeam = 8;    // recipes/small-recall.yaml's tree

// Bytes one configuration holds at its peak: q, k, v, out, dout and three gradients, twice
// over for favor's features and their gradients, plus the score, probability and gradient
// matrices of the dense product. A bound from above: what must fit before anything runs.
double bytes_needed(const std::string& algo, const std::string& map, const Shape4& s) {
  double values = 8 * s.values();
  if (map == "favor") values += 4 * s.values();
  if (is_recurrent(algo))  // checkpoints every 32 tokens, the backward's 34 states a thread
    values += static_cast<double>(s.batch * s.heads) * (s.n / 32.0 + 1 + 34 * kernels::num_threads()) * s.dim * s.dim;
  if (algo == "softmax_dense") values += 3 * static_cast<double>(s.batch * s.heads) * static_cast<double>(s.n) * s.n;
  if (algo == "routed_cross")  // landmark scores, their softmax and both gradients
    values += 4 * static_cast<double>(s.batch * s.heads) * static_cast<double>(s.n) * (s.n / kRouteChunk + 1);
  if (algo == "routed_tree")  // the same over the root's landmarks, and the chosen rows of each level
    values += 4 * static_cast<double>(s.batch * s.heads) * static_cast<double>(s.n) * (kRouteRoot + 4 * kRouteBeam);
  return 4 * values * 1.25;
}

// N(0, 1) values, or with `unit_rows` each last-axis row scaled to length 1.
Tensor random_input(const Shape& shape, Device device, uint64_t seed, bool grad, bool unit_rows = false) {
  Tensor t = Tensor::empty(shape);
  Philox rng(seed);
  init::normal_(t, 0.0f, 1.0f, rng);
  if (unit_rows) {
    const int64_t d = shape.back();
    float* p = t.f32();
    for (int64_t r = 0; r < t.numel() / d; ++r) {
      double norm = 0;
      for (int64_t i = 0; i < d; ++i) norm += double(p[r * d + i]) * p[r * d + i];
      for (int64_t i = 0; i < d; ++i) p[r * d + i] = static_cast<float>(p[r * d + i] / std::sqrt(norm));
    }
  }
  t = t.to(device);
  if (grad) t.set_requires_grad(true);
  return t;
}

struct Measured {
  double fwd_s = 0, fwdbwd_s = 0, fwd_peak = 0, fwdbwd_peak = 0;
};

std::vector<int64_t> default_lengths() {
  std::vector<int64_t> n;
  for (int64_t x = 128; x <= 65536; x *= 2) n.push_back(x);
  return n;
}

// The command line of `tarn bench attention`.
struct AttentionFlags {
  BenchCommon common;
  std::string device = "cpu";
  std::vector<int64_t> lengths = default_lengths();
  int64_t batch = 1, heads = 4, dim = 64;
  std::vector<std::string> algos = kDefaultAlgos, maps = {"elu1", "favor"};
  std::vector<int64_t> windows = {64, 256, 512};
  int reps = 3;
  double min_time = 0.2, max_seconds = 30;
};

class AttentionBench {
 public:
  AttentionBench(const AttentionFlags& f, Device device)
      : device_(device),
        batch_(f.batch),
        heads_(f.heads),
        dim_(f.dim),
        reps_(f.reps),
        min_time_(f.min_time),
        max_seconds_(f.max_seconds),
        max_bytes_(bench_memory_budget(f.common, device)) {
    Philox rng(11);
    projection_ = draw_favor_projection(rng, dim_, dim_).to(device_);
  }

  // One row of the CSV for (algo, map, n): measured, or skipped with the reason.
  std::vector<std::string> run(const std::string& algo, const std::string& map, int64_t n) {
    const Shape4 s{batch_, heads_, n, dim_};
    const std::string map_field = takes_no_map(algo) ? "-" : map;
    std::vector<std::string> row = {device_.str(), algo, map_field, std::to_string(n), std::to_string(batch_),
                                    std::to_string(heads_), std::to_string(dim_)};
    const std::string why = refusal(algo, map, s);
    if (!why.empty()) {
      log::info("bench", algo, " ", map_field, " N=", n, ": skipped: ", why);
      for (int i = 0; i < 4; ++i) row.push_back("");
      row.push_back("skipped: " + why);
      return row;
    }
    const Measured m = measure(algo, map, s);
    last_[algo + "/" + map] = {n, m.fwdbwd_s};
    log::info("bench", algo, " ", map_field, " N=", n, ": forward ", csv_number(m.fwd_s * 1e3, 2), " ms, forward+backward ",
              csv_number(m.fwdbwd_s * 1e3, 2), " ms, peak ", csv_number(m.fwdbwd_peak / 1048576.0, 1), " MiB");
    for (double v : {m.fwd_s * 1e3, m.fwdbwd_s * 1e3}) row.push_back(csv_number(v, 3));
    for (double v : {m.fwd_peak, m.fwdbwd_peak}) row.push_back(csv_number(v / 1048576.0, 2));
    row.push_back("ok");
    return row;
  }

 private:
  // Why (algo, map, s) is not run, or "" to run it. Time is predicted from this algo's last
  // measured length: N^2 work for softmax, N for linear attention.
  std::string refusal(const std::string& algo, const std::string& map, const Shape4& s) const {
    const double need = bytes_needed(algo, map, s);
    if (need > max_bytes_) return str_cat("needs ", gibibytes(need), ", limit ", gibibytes(max_bytes_), " (--max-gib)");
    auto it = last_.find(algo + "/" + map);
    if (it == last_.end()) return "";
    const double ratio = static_cast<double>(s.n) / static_cast<double>(it->second.first);
    const double predicted = it->second.second * (is_quadratic(algo) ? ratio * ratio : ratio);
    if (predicted > max_seconds_)
      return str_cat("predicted ", csv_number(predicted, 1), " s per forward+backward, limit ", max_seconds_,
                     " s (--max-seconds)");
    return "";
  }

  Tensor op(const std::string& algo, const std::string& map, const Tensor& q, const Tensor& k, const Tensor& v) const {
    if (is_windowed(algo)) {
      SoftmaxAttentionOptions o;
      o.causal = algo != "window";
      o.window = std::stoll(map.substr(1));  // "w64"
      return softmax_attention(q, k, v, o);
    }
    if (is_recurrent(algo)) {
      set_delta_rule_algorithm(device_, algo == "delta_causal_recurrent" ? kernels::DeltaRuleAlgorithm::recurrent
                                        : algo == "delta_causal_chunked" ? kernels::DeltaRuleAlgorithm::chunked
                                                                         : kernels::DeltaRuleAlgorithm::automatic);
      return delta_rule(q, k, v, beta_, alpha_, {false, 32, algo != "gated_causal"});
    }
    if (is_routed(algo))
      return routed_reads_summed(q, k, v, kRouteChunk, kRouteTop, algo == "routed_tree" ? kRouteRoot : 0, kRouteBeam);
    if (algo == "softmax" || algo == "softmax_causal") {
      SoftmaxAttentionOptions o;
      o.causal = algo == "softmax_causal";
      return softmax_attention(q, k, v, o);
    }
    // Without the 1/sqrt(D) scaling, which costs N x D and changes no timing: the inputs are random.
    if (algo == "softmax_dense") return matmul(softmax(matmul(q, k, false, true)), v);
    LinearAttentionOptions o;
    o.causal = algo == "linear_causal";
    if (algo == "linear_cross") o.key_padding_mask = Tensor::zeros({batch_, k.size(2)}, device_);
    const FeatureMap kind = parse_feature_map(map);
    if (kind != FeatureMap::favor) {
      o.fused_feature_map = kind;  // as the model runs row-local maps: inside the kernel
      return linear_attention(q, k, v, o);
    }
    return linear_attention(feature_map(q, kind, FeatureRole::query, projection_),
                            feature_map(k, kind, FeatureRole::key, projection_), v, o);
  }

  Measured measure(const std::string& algo, const std::string& map, const Shape4& s) {
    const Shape shape{s.batch, s.heads, s.n, s.dim};
    const bool unit = is_recurrent(algo);  // the scan takes unit rows (the layer normalises q and k)
    Tensor q = random_input(shape, device_, 1, true, unit), k = random_input(shape, device_, 2, true, unit),
           v = random_input(shape, device_, 3, true);
    if (is_recurrent(algo)) {
      beta_ = Tensor::full({s.batch, s.heads, s.n}, 0.5f, device_);
      alpha_ = Tensor::full({s.batch, s.heads, s.n}, 0.99f, device_);
      for (Tensor* t : {&beta_, &alpha_}) t->set_requires_grad(true);
    }
    const Tensor dout = random_input(shape, device_, 4, false);
    Tensor out_of_last_run;
    auto forward = [&] {
      NoGradGuard no_grad;
      out_of_last_run = op(algo, map, q, k, v);
    };
    auto forward_backward = [&] {
      out_of_last_run = op(algo, map, q, k, v);
      out_of_last_run.backward(dout);
      for (Tensor* t : {&q, &k, &v, &beta_, &alpha_})
        if (t->defined()) t->zero_grad();
    };
    // Device work is asynchronous: reading one value back waits for it.
    auto sync = [&] {
      if (!device_.is_cpu()) (void)out_of_last_run.view({-1}).narrow0(0, 1).to(Device::cpu());
    };
    Measured m;
    m.fwd_s = median_seconds(forward, reps_, min_time_, sync);
    m.fwdbwd_s = median_seconds(forward_backward, reps_, min_time_, sync);
    out_of_last_run = Tensor();
    for (Tensor* t : {&q, &k, &v}) t->zero_grad();
    const std::function<void()> runs[2] = {forward, forward_backward};
    double* peaks[2] = {&m.fwd_peak, &m.fwdbwd_peak};
    for (int i = 0; i < 2; ++i) {
      reset_peak_memory(device_);
      runs[i]();
      sync();
      *peaks[i] = static_cast<double>(memory_stats(device_).peak_bytes);
      out_of_last_run = Tensor();
    }
    return m;
  }

  Device device_;
  int64_t batch_, heads_, dim_;
  int reps_;
  double min_time_, max_seconds_, max_bytes_;
  Tensor projection_;
  Tensor beta_, alpha_;  // the recurrent algos' gates (B, H, N), made with their inputs
  std::map<std::string, std::pair<int64_t, double>> last_;  // algo/map -> (N, fwd+bwd seconds)
};

int run(AttentionFlags f) {
  const Device device = bench_device(f.device);
  std::sort(f.lengths.begin(), f.lengths.end());  // the time limit predicts each length from the last
  AttentionBench bench(f, device);
  log::info("bench", "attention on ", device.str(), " (", cpu_model_name(), ", ", kernels::num_threads(),
            " threads): ", f.lengths.size(), " lengths");
  BenchOutput out(f.common.out, "attention",
                  "device,algo,feature_map,N,batch,heads,head_dim,fwd_ms,fwdbwd_ms,fwd_peak_MiB,fwdbwd_peak_MiB,status");
  std::vector<std::string> windows;
  for (int64_t w : f.windows) windows.push_back("w" + std::to_string(w));
  for (const std::string& algo : f.algos)
    for (const std::string& map : takes_no_map(algo) ? std::vector<std::string>{"-"} : is_windowed(algo) ? windows : f.maps)
      for (int64_t n : f.lengths) out.row(bench.run(algo, map, n));
  out.finish(f.common.command_line, device);
  return 0;
}

void add_attention_flags(CLI::App& app, AttentionFlags& f) {
  app.add_option("--device", f.device, "cpu, or cuda[:i]")->type_name("DEVICE");
  cli::add_list(app, "--n", f.lengths, "sequence lengths", cli::integer(1, int64_t{1} << 24))
      ->default_str("128,256,...,65536");
  cli::add_integer(app, "--batch", f.batch, 1, 4096, "batch size B", "B");
  cli::add_integer(app, "--heads", f.heads, 1, 4096, "heads H", "H");
  cli::add_integer(app, "--head-dim", f.dim, 1, 1024, "head dimension D (the defaults: the small preset's attention)",
                   "D");
  cli::add_list(app, "--algos", f.algos, "the algorithms above", cli::one_of(kAlgos))
      ->default_str("all but delta_causal_recurrent and delta_causal_chunked");
  cli::add_list(app, "--maps", f.maps, "feature maps of the linear algos",
                cli::one_of({"elu1", "relu", "exp", "favor"}));
  cli::add_list(app, "--windows", f.windows, "window sizes of the window algos", cli::integer(1, int64_t{1} << 24))
      ->default_str("64,256,512");
  cli::add_integer(app, "--reps", f.reps, 1, 1000, "timed runs per figure at least");
  cli::add_real(app, "--min-time", f.min_time, 0, 3600, "seconds of timed runs per figure at least", "S");
  cli::add_real(app, "--max-seconds", f.max_seconds, 0.001, 1e6,
                "predicted seconds of one forward+backward above which a size is skipped", "S");
}

}  // namespace

cli::Command add_bench_attention(CLI::App& bench, const std::string& command_line) {
  return bench_command(bench, command_line, "attention", kDescription, "a configuration", add_attention_flags, run);
}

}  // namespace tarn::app
