#include "lockstep/models/char_lstm.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <torch/nn/functional/loss.h>

#include "lockstep/common/error.h"
#include "lockstep/nn/activation_checkpoint.h"
#include "lockstep/nn/precision.h"

namespace lockstep {

CharLstmImpl::CharLstmImpl(const CharLstmOptions& o) : options_(o) {
  LOCKSTEP_CHECK(o.vocabSize >= 2, "CharLstm vocab size must be at least 2, got ", o.vocabSize);
  LOCKSTEP_CHECK(o.hidden >= 1 && o.layers >= 1, "CharLstm needs hidden >= 1 and layers >= 1");
  lstm_ = register_module(
      "lstm", torch::nn::LSTM(torch::nn::LSTMOptions(o.vocabSize, o.hidden).num_layers(o.layers).batch_first(true)));
  head_ = register_module("head", torch::nn::Linear(o.hidden, o.vocabSize));
  if (o.checkpointSegments < 0 || o.checkpointSegments > o.layers + 1) {
    throw ConfigError(
        fmt::format("model.checkpoint_segments={}: charlstm with {} layers has {} stages (each layer, "
                    "the head); expected 0 (off) to {}",
                    o.checkpointSegments, o.layers, o.layers + 1, o.layers + 1));
  }
  // `this` outlives the stages: they belong to the module and run while it does.
  for (int64_t k = 0; k < o.layers; ++k) {
    stages_.push_back({[this, k](const at::Tensor& in) { return layerForward(k, in); }, nullptr});
  }
  stages_.push_back({[this](const at::Tensor& in) { return head_->forward(in); }, nullptr});
}

at::Tensor CharLstmImpl::forward(const at::Tensor& indices) {
  at::Tensor x = at::one_hot(indices, options_.vocabSize).to(at::kFloat);
  if (options_.checkpointSegments > 0) return checkpointSequence(stages_, options_.checkpointSegments, x);
  at::Tensor out =
      runRecurrentLayer("lstm", x, [this](const at::Tensor& in) { return std::get<0>(lstm_->forward(in)); });
  return head_->forward(out);
}

at::Tensor CharLstmImpl::layerForward(int64_t k, const at::Tensor& x) {
  // One layer of lstm_ with its own weights: the same kernel LSTM's forward
  // runs for each layer of the stack.
  const std::vector<at::Tensor> all = lstm_->all_weights();  // w_ih, w_hh, b_ih, b_hh per layer
  const auto first = all.begin() + 4 * k;
  std::vector<at::Tensor> weights(first, first + 4);
  return runRecurrentLayer(fmt::format("lstm layer {}", k), x, [&](const at::Tensor& in) {
    at::Tensor zeros = at::zeros({1, in.size(0), options_.hidden}, in.options());
    return std::get<0>(at::lstm(in, {zeros, zeros}, weights, /*has_biases=*/true, /*num_layers=*/1, /*dropout=*/0.0,
                                is_training(), /*bidirectional=*/false, /*batch_first=*/true));
  });
}

at::Tensor charLstmLoss(const at::Tensor& logits, const at::Tensor& targets) {
  auto flat = logits.reshape({-1, logits.size(-1)});
  auto summed = at::cross_entropy_loss(flat, targets.reshape({-1}), /*weight=*/{}, at::Reduction::Sum,
                                       /*ignore_index=*/-100);
  return summed / static_cast<double>(targets.numel());
}

std::vector<int64_t> sampleSequence(CharLstmImpl& model, int64_t window, int64_t padIndex, int64_t stopIndex,
                                    double temperature, int64_t maxLength, at::Generator& generator) {
  LOCKSTEP_CHECK(temperature > 0, "temperature must be positive, got ", temperature);
  std::vector<int64_t> context(static_cast<size_t>(window), padIndex);
  std::vector<int64_t> out;
  c10::NoGradGuard noGrad;
  const c10::Device device = model.parameters().front().device();
  while (static_cast<int64_t>(out.size()) < maxLength) {
    at::Tensor input = at::tensor(context, at::kLong).view({1, window}).to(device);
    // Drawn on the CPU with the CPU generator: the same names on every device.
    at::Tensor logits = model.forward(input).select(1, window - 1).squeeze(0).to(at::kCPU, at::kFloat);
    logits[padIndex] = -std::numeric_limits<float>::infinity();  // padding is never a prediction
    at::Tensor probs = at::softmax(logits / temperature, 0);
    int64_t next = at::multinomial(probs, 1, false, generator).item<int64_t>();
    if (next == stopIndex) break;
    out.push_back(next);
    context.erase(context.begin());
    context.push_back(next);
  }
  return out;
}

MlpImpl::MlpImpl(const MlpOptions& o) {
  int64_t in = o.inputs;
  std::vector<int64_t> sizes = o.hidden;
  sizes.push_back(o.outputs);
  for (size_t i = 0; i < sizes.size(); ++i) {
    layers_.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(in, sizes[i])));
    in = sizes[i];
  }
}

at::Tensor MlpImpl::forward(const at::Tensor& input) {
  at::Tensor x = input;
  for (size_t i = 0; i < layers_.size(); ++i) {
    x = layers_[i]->forward(x);
    if (i + 1 < layers_.size()) x = at::relu(x);
  }
  return x;
}

}  // namespace lockstep
