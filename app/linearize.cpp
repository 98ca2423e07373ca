#include "app/linearize.h"

#include "framework/ops/elementwise.h"
#include "framework/optim/adamw.h"
#include "app/model_io.h"

namespace tarn::app {

std::vector<std::pair<std::string, Tensor*>> transfer_parameters(BartForConditionalGeneration& model) {
  std::vector<std::pair<std::string, Tensor*>> out;
  std::vector<std::string> modules;
  for (auto& [name, a] : model.attention_modules())
    if (!a->config().is_softmax() || !a->named_parameters().empty()) modules.push_back(name + ".");
  for (auto& [name, p] : model.named_parameters()) {
    for (const std::string& m : modules) {
      if (name.compare(0, m.size(), m) != 0) continue;
      const std::string rest = name.substr(m.size());
      bool projection = false;
      for (const char* proj : {"k_proj.", "v_proj.", "q_proj.", "out_proj."})
        projection = projection || rest.rfind(proj, 0) == 0;
      if (!projection) out.emplace_back(name, p);
    }
  }
  return out;
}

LinearizeProgress linearize(BartForConditionalGeneration& model, Batcher& batches, const LinearizeOptions& o,
                            const std::function<void(const LinearizeProgress&)>& on_log) {
  const auto params = transfer_parameters(model);
  TARN_CHECK(!params.empty(),
             "linearize: no attention parameters to transfer: every attention module is softmax, or linear with "
             "a fixed feature map (elu1, relu, exp, favor); choose a kind that learns its map (hedgehog, taylor) "
             "or delta, gated, hybrid");
  AdamWOptions ao;
  ao.lr = static_cast<float>(o.lr);
  ao.weight_decay = 0.0f;
  AdamW optimizer(params, ao);
  AttentionTransfer transfer;
  const bool was_training = model.training();
  model.eval();  // the teacher and the student without dropout
  model.set_attention_transfer(&transfer);
  LinearizeProgress p;
  try {
    for (int64_t step = 1; step <= o.steps; ++step) {
      transfer.terms.clear();
      (void)forward_batch(model, batches.next());  // the logits are not needed: the terms are
      TARN_ASSERT(!transfer.terms.empty(), "linearize: a forward recorded no transfer term");
      Tensor loss = transfer.terms.front().loss;
      for (size_t i = 1; i < transfer.terms.size(); ++i) loss = add(loss, transfer.terms[i].loss);
      model.zero_grad();
      loss.backward();
      optimizer.step();
      p.step = step;
      p.loss = static_cast<double>(loss.to(Device::cpu()).item());
      p.terms.clear();
      for (const auto& t : transfer.terms) p.terms.emplace_back(t.name, static_cast<double>(t.loss.to(Device::cpu()).item()));
      if (on_log && (step % std::max<int64_t>(o.log_every, 1) == 0 || step == o.steps)) on_log(p);
    }
  } catch (...) {
    model.set_attention_transfer(nullptr);
    model.train(was_training);
    throw;
  }
  model.set_attention_transfer(nullptr);
  model.zero_grad();
  model.train(was_training);
  return p;
}

}  // namespace tarn::app
