// lockstep/models/convnet.h — "convnet", the project's small CNN.
//
// conv 3x3 (32) - ReLU - 2x2 max pool - conv 3x3 (64) - ReLU - 2x2 max pool -
// Linear (128) - ReLU - Linear (numClasses), for images of exactly the side it
// was built for (at least 4). Built through makeImageModel() (vision.h), which
// checks the options; forward() on other images throws lockstep::Error.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <vector>

#include "lockstep/models/image_classifier.h"
#include "lockstep/nn/activation_checkpoint.h"

namespace lockstep {

class ConvNetImpl : public ImageClassifierImpl {
 public:
  /// Reads LOCKSTEP_PLAIN_POOLING (lockstep/common/env.h): 1 runs LibTorch's relu + max_pool2d,
  /// 0 or unset lockstep's one-pass kernel (the same bits either way); anything else a ConfigError.
  explicit ConvNetImpl(const ImageModelOptions& o);
  static constexpr int64_t kStages = 4;

  at::Tensor forward(const at::Tensor& images) override;
  std::vector<Layer> layers() override;

 private:
  /// ReLU then 2 x 2 max pooling (lockstep/nn/pooling.h).
  at::Tensor reluPool(const at::Tensor& x) const;

  ImageModelOptions options_;
  bool plainPooling_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
  std::vector<CheckpointStage> stages_;  ///< layers(), with model.checkpoint_segments
};

}  // namespace lockstep
