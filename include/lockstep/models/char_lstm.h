// lockstep/models/char_lstm.h — the pet-name generator's model.
//
// Input: character indices [batch, window] (int64); they are one-hot encoded
// inside forward() to [batch, window, vocab]. Then `layers` stacked LSTM
// layers of `hidden` units and a dense layer to the vocabulary: logits
// [batch, window, vocab], one prediction per position (the next character).
// This header includes LibTorch's module headers: include it only where a
// model is built.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>

#include "lockstep/nn/activation_checkpoint.h"

namespace lockstep {

struct CharLstmOptions {
  int64_t vocabSize = 32;
  int64_t hidden = 128;
  int64_t layers = 4;
  /// > 0: activation checkpointing over layers + 1 stages (each LSTM layer, the
  /// head) in this many segments (nn/activation_checkpoint.h); 0: off.
  /// Outside [0, layers + 1] -> lockstep::ConfigError.
  int64_t checkpointSegments = 0;
};

class CharLstmImpl : public torch::nn::Module {
 public:
  explicit CharLstmImpl(const CharLstmOptions& options);
  /// indices [B, W] int64 -> logits [B, W, vocab].
  at::Tensor forward(const at::Tensor& indices);
  const CharLstmOptions& options() const { return options_; }

 private:
  at::Tensor layerForward(int64_t layer, const at::Tensor& x);

  CharLstmOptions options_;
  std::vector<CheckpointStage> stages_;  ///< each LSTM layer, the head (model.checkpoint_segments)
  torch::nn::LSTM lstm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(CharLstm);

/// Mean cross-entropy over the positions of a batch, targets of -100 ignored.
/// Normalised by batch*window (a constant), not by the count of valid targets,
/// so that averaging per-worker losses over equal batches equals the loss of the
/// whole batch: the property data-parallel equivalence rests on.
at::Tensor charLstmLoss(const at::Tensor& logits, const at::Tensor& targets);

/// Samples one name: starts from `window` padding indices, draws the next
/// character from softmax(logits / temperature) until the stop index or maxLength.
std::vector<int64_t> sampleSequence(CharLstmImpl& model, int64_t window, int64_t padIndex, int64_t stopIndex,
                                    double temperature, int64_t maxLength, at::Generator& generator);

struct MlpOptions {
  int64_t inputs = 16;
  std::vector<int64_t> hidden = {32};
  int64_t outputs = 4;
};

/// A plain multilayer perceptron (Linear-ReLU ... Linear), for tests and benchmarks.
class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const MlpOptions& options);
  at::Tensor forward(const at::Tensor& x);

 private:
  std::vector<torch::nn::Linear> layers_;
};
TORCH_MODULE(Mlp);

}  // namespace lockstep
