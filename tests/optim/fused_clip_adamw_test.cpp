// Clipping folded into AdamW (clip_factor + AdamW::step(grad_scale), as TrainStep runs them)
// against the two passes it replaces (clip_grad_norm scaling the gradients, then AdamW::step):
// the same parameters and moments, bit for bit, clipped or not, on the CPU kernels' parallel
// path (tensors above kParallelGrain) and the serial one.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "framework/optim/adamw.h"
#include "framework/optim/clip_grad.h"
#include "tests/common/gradcheck.h"

namespace tarn {
namespace {

using testing::random_tensor;

struct Params {
  std::vector<Tensor> tensors;
  Params() {
    uint64_t seed = 1;
    for (int64_t n : {int64_t{70000}, int64_t{37}, int64_t{4096}, int64_t{5}})
      tensors.push_back(random_tensor(Shape{n}, seed++).set_requires_grad(true));
  }
  std::vector<std::pair<std::string, Tensor*>> named() {
    std::vector<std::pair<std::string, Tensor*>> out;
    for (size_t i = 0; i < tensors.size(); ++i) out.emplace_back("p" + std::to_string(i) + ".weight", &tensors[i]);
    return out;
  }
  void set_grads(uint64_t seed, float magnitude) {
    for (Tensor& t : tensors) {
      std::vector<float> v = random_tensor(t.shape(), seed++).to_vector();
      for (float& x : v) x *= magnitude;
      t.set_grad(Tensor::from_vector(v, t.shape()));
    }
  }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

TEST(FusedClipAdamW, OnePassGivesTheBitsOfClippingThenStepping) {
  for (const float max_norm : {0.5f, 1e6f}) {  // clipping, and a norm within the bound
    Params two_pass, one_pass;
    AdamW a(two_pass.named(), {}), b(one_pass.named(), {});
    for (int step = 0; step < 4; ++step) {
      two_pass.set_grads(100 + static_cast<uint64_t>(step) * 10, 3.0f);
      one_pass.set_grads(100 + static_cast<uint64_t>(step) * 10, 3.0f);
      std::vector<Tensor*> pa, pb;
      for (auto& t : two_pass.tensors) pa.push_back(&t);
      for (auto& t : one_pass.tensors) pb.push_back(&t);
      const float norm_a = clip_grad_norm(pa, max_norm);
      a.step();
      const double norm_b = global_grad_norm(pb);
      EXPECT_EQ(norm_a, static_cast<float>(norm_b));
      b.step(clip_factor(norm_b, max_norm));
      for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(same_bits(*pa[i], *pb[i])) << "parameter " << i;
      const AdamWState sa = a.state_view(), sb = b.state_view();
      for (const auto& [name, s] : sa.params) {
        EXPECT_TRUE(same_bits(s.exp_avg, sb.params.at(name).exp_avg)) << name;
        EXPECT_TRUE(same_bits(s.exp_avg_sq, sb.params.at(name).exp_avg_sq)) << name;
      }
    }
  }
}

TEST(FusedClipAdamW, TheFactorIsClipGradNormsAndOneWithinTheBound) {
  EXPECT_EQ(clip_factor(0.5, 1.0f), 1.0f);
  EXPECT_EQ(clip_factor(2.0, 0.0f), 1.0f) << "max_norm 0: no clipping";
  EXPECT_EQ(clip_factor(2.0, 1.0f), static_cast<float>(1.0 / (2.0 + 1e-6)));
}

}  // namespace
}  // namespace tarn
