// The loss scaler against the trajectory PyTorch's dynamic algorithm
// prescribes, on scripted patterns of inf/NaN gradients; skipped steps leave
// parameters and optimizer state bit-unchanged; ranks skip together.
#include "lockstep/optim/loss_scaler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <limits>

#include "lockstep/common/error.h"
#include "lockstep/optim/optimizer.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

/// The algorithm as documented, written independently of the class: returns the scale after each step.
std::vector<double> expectedScales(const std::string& pattern, const LossScalerOptions& o) {
  std::vector<double> out;
  double scale = o.initScale;
  int64_t clean = 0;
  for (char c : pattern) {
    if (c != '.') {
      scale *= o.backoffFactor;
      clean = 0;
    } else if (++clean == o.growthInterval) {
      scale *= o.growthFactor;
      clean = 0;
    }
    out.push_back(scale);
  }
  return out;
}

/// Gradients for one step: '.' finite, 'i' +inf in one element, 'n' NaN, 'm' -inf.
void setGrads(std::vector<at::Tensor>& params, char kind, double scale, int step) {
  for (size_t k = 0; k < params.size(); ++k) {
    params[k].mutable_grad() = at::full_like(params[k], 0.01 * (step + 1) * scale);
  }
  const float bad = kind == 'i'   ? std::numeric_limits<float>::infinity()
                    : kind == 'm' ? -std::numeric_limits<float>::infinity()
                                  : std::numeric_limits<float>::quiet_NaN();
  if (kind != '.') params.back().mutable_grad()[0][1] = bad;
}

std::vector<at::Tensor> snapshot(torch::optim::Optimizer& opt) {
  std::vector<at::Tensor> out;
  for (auto& p : opt.param_groups()[0].params()) {
    out.push_back(p.detach().clone());
    auto it = opt.state().find(optimizerStateKey(p));
    if (it == opt.state().end()) continue;
    auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
    out.push_back(s.exp_avg().clone());
    out.push_back(s.exp_avg_sq().clone());
    out.push_back(at::full({1}, static_cast<double>(s.step()), at::kDouble));
  }
  return out;
}

bool allEqual(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i], b[i])) return false;
  }
  return true;
}

TEST(LossScaler, FollowsTheDocumentedTrajectoryAndSkipsExactlyTheBadSteps) {
  LossScalerOptions o;
  o.initScale = 1024;
  o.growthInterval = 3;
  const std::string pattern = "....i...n.......mi......i.";
  const auto expected = expectedScales(pattern, o);
  std::vector<at::Tensor> params{at::ones({3}).requires_grad_(true), at::ones({2, 2}).requires_grad_(true)};
  torch::optim::Adam adam(params, torch::optim::AdamOptions(0.1));
  LossScaler scaler(nullptr, o);
  int64_t skipped = 0;
  for (size_t step = 0; step < pattern.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step) + " '" + pattern[step] + "'");
    setGrads(params, pattern[step], scaler.scale(), static_cast<int>(step));
    auto before = snapshot(adam);
    const bool stepped = scaler.step(adam);
    EXPECT_EQ(stepped, pattern[step] == '.');
    if (!stepped) {
      ++skipped;
      EXPECT_TRUE(allEqual(snapshot(adam), before)) << "a skipped step changed parameters or optimizer state";
    } else {
      EXPECT_FALSE(allEqual(snapshot(adam), before));
      // Unscaled before the step: the gradient Adam saw is the true one.
      EXPECT_FLOAT_EQ(params[0].grad()[0].item<float>(), 0.01f * static_cast<float>(step + 1));
    }
    scaler.update();
    EXPECT_DOUBLE_EQ(scaler.scale(), expected[step]);
  }
  EXPECT_EQ(scaler.skippedSteps(), skipped);
}

TEST(LossScaler, DefaultsArePyTorchs) {
  LossScaler scaler;
  EXPECT_DOUBLE_EQ(scaler.scale(), 65536.0);
  std::vector<at::Tensor> params{at::zeros({1}).requires_grad_(true)};
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  for (int i = 0; i < 2000; ++i) {
    params[0].mutable_grad() = at::ones({1});
    ASSERT_TRUE(scaler.step(sgd));
    scaler.update();
    if (i < 1999) ASSERT_DOUBLE_EQ(scaler.scale(), 65536.0) << "grew early, at step " << i;
  }
  EXPECT_DOUBLE_EQ(scaler.scale(), 131072.0);
  EXPECT_EQ(scaler.growthTracker(), 0);
}

TEST(LossScaler, EveryRankSkipsWhenOneRankOverflows) {
  LossScalerOptions o;
  o.initScale = 8;
  o.growthInterval = 2;
  const std::string patterns[2] = {"..........", "..i....n.."};  // only rank 1 overflows
  const std::string merged = "..i....n..";
  const auto expected = expectedScales(merged, o);
  test::runRanks(2, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    std::vector<at::Tensor> params{at::ones({4}).requires_grad_(true), at::ones({2, 3}).requires_grad_(true)};
    torch::optim::Adam adam(params, torch::optim::AdamOptions(0.1));
    LossScaler scaler(shared, o);
    for (size_t step = 0; step < merged.size(); ++step) {
      setGrads(params, patterns[rank][step], scaler.scale(), static_cast<int>(step));
      auto before = snapshot(adam);
      EXPECT_EQ(scaler.step(adam), merged[step] == '.') << "rank " << rank << " step " << step;
      if (merged[step] != '.') EXPECT_TRUE(allEqual(snapshot(adam), before)) << "rank " << rank;
      scaler.update();
      EXPECT_DOUBLE_EQ(scaler.scale(), expected[step]) << "rank " << rank << " step " << step;
    }
  });
}

TEST(LossScaler, MisuseIsAnError) {
  EXPECT_THROW(LossScaler(nullptr, LossScalerOptions{0, 2, 0.5, 10}), Error);
  EXPECT_THROW(LossScaler(nullptr, LossScalerOptions{1, 1, 0.5, 10}), Error);
  EXPECT_THROW(LossScaler(nullptr, LossScalerOptions{1, 2, 1.5, 10}), Error);
  EXPECT_THROW(LossScaler(nullptr, LossScalerOptions{1, 2, 0.5, 0}), Error);
  LossScaler scaler;
  EXPECT_THROW(scaler.update(), Error);
  std::vector<at::Tensor> params{at::zeros({1}).requires_grad_(true)};
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  params[0].mutable_grad() = at::ones({1});
  scaler.unscale(sgd);
  EXPECT_THROW(scaler.unscale(sgd), Error);
}

}  // namespace
}  // namespace lockstep
