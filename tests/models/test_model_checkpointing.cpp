// model.checkpoint_segments on the built-in models: gradients, BatchNorm
// statistics and outputs bit-identical to the plain model; bad segment counts
// are ConfigErrors naming the key.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "lockstep/common/error.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/models/vision.h"

namespace lockstep {
namespace {

struct Pass {
  at::Tensor output;
  std::vector<at::Tensor> grads, buffers;
};

template <typename Build, typename Input>
Pass trainPass(Build build, Input input) {
  torch::manual_seed(5);
  auto model = build();
  model->train();
  torch::manual_seed(6);
  Pass p;
  for (int step = 0; step < 2; ++step) {
    p.output = model->forward(input());
    p.output.pow(2).mean().backward();
  }
  for (auto& t : model->parameters()) p.grads.push_back(t.grad());
  p.buffers = model->buffers();
  return p;
}

/// Equal bit for bit, or (`exact` false) to float32 rounding.
void expectSame(const Pass& a, const Pass& b, bool exact = true) {
  auto same = [&](const at::Tensor& x, const at::Tensor& y) {
    return exact ? at::equal(x, y) : at::allclose(x, y, /*rtol=*/1e-5, /*atol=*/1e-8);
  };
  EXPECT_TRUE(same(a.output, b.output)) << "outputs differ by " << (a.output - b.output).abs().max().item<double>();
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_TRUE(a.grads[i].defined() && b.grads[i].defined()) << "parameter " << i << " got no gradient";
    EXPECT_TRUE(same(a.grads[i], b.grads[i]))
        << "parameter " << i << " differs by " << (a.grads[i] - b.grads[i]).abs().max().item<double>();
  }
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) EXPECT_TRUE(at::equal(a.buffers[i], b.buffers[i])) << "buffer " << i;
}

TEST(ModelCheckpointing, EveryImageModelMatchesThePlainModelBitForBit) {
  struct Case {
    std::string type;
    int64_t side;
    std::vector<int64_t> segments;
  };
  // alexnet-cifar has dropout (the recomputation must draw the same masks), resnet18 BatchNorm.
  for (const Case& c : {Case{"mlp", 8, {1, 2, 4}}, Case{"convnet", 8, {1, 2, 4}}, Case{"alexnet-cifar", 8, {1, 3, 8}},
                        Case{"resnet18", 16, {1, 3, 10}}}) {
    auto input = [&] { return at::randn({4, 3, c.side, c.side}); };
    auto build = [&](int64_t segments) {
      return [&, segments] {
        ImageModelOptions o{3, c.side, 10, {32, 16, 8}};
        o.checkpointSegments = segments;
        return makeImageModel(c.type, o);
      };
    };
    Pass plain = trainPass(build(0), input);
    for (int64_t s : c.segments) {
      SCOPED_TRACE(c.type + " with " + std::to_string(s) + " segments");
      expectSame(trainPass(build(s), input), plain);
    }
  }
}

TEST(ModelCheckpointing, CharLstmMatchesThePlainModel) {
  auto input = [] { return at::randint(0, 10, {3, 7}, at::kLong); };
  auto build = [](int64_t segments) { return [segments] { return CharLstm(CharLstmOptions{10, 12, 3, segments}); }; };
  Pass plain = trainPass(build(0), input);
  // To rounding, not bit for bit: LibTorch's multi-layer LSTM (the plain model) and the same
  // layers run a segment at a time round differently.
  for (int64_t s : {1, 2, 4}) {
    SCOPED_TRACE(std::to_string(s) + " segments");
    expectSame(trainPass(build(s), input), plain, /*exact=*/false);
  }
}

TEST(ModelCheckpointing, BadSegmentCountsNameTheKey) {
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const ConfigError& e) { return std::string(e.what()); }
    return std::string("no error");
  };
  ImageModelOptions o{1, 28, 10, {16}};
  o.checkpointSegments = 3;
  EXPECT_NE(message([&] { makeImageModel("mlp", o); }).find("model.checkpoint_segments=3 but the model has 2 stages"),
            std::string::npos);
  o.checkpointSegments = 5;
  EXPECT_NE(
      message([&] { makeImageModel("convnet", o); }).find("model.checkpoint_segments=5 but the model has 4 stages"),
      std::string::npos);
  o.checkpointSegments = 9;
  o.imageSize = 32;
  EXPECT_NE(message([&] {
              makeImageModel("alexnet-cifar", o);
            }).find("model.checkpoint_segments=9 but the model has 8 stages"),
            std::string::npos);
  o.checkpointSegments = -1;
  EXPECT_NE(message([&] { makeImageModel("resnet18", o); }).find("model.checkpoint_segments=-1"), std::string::npos);
  EXPECT_NE(message([] {
              CharLstm(CharLstmOptions{10, 8, 2, 4});
            }).find("model.checkpoint_segments=4: charlstm with 2 layers has 3 stages"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep
