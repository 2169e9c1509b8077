// lockstep/models/image_mlp.h — "mlp", a perceptron over the flattened image.
//
// Linear-ReLU for each of ImageModelOptions::hiddenSizes, then a Linear to
// numClasses, over images of exactly the side it was built for. Built through
// makeImageModel() (vision.h), which checks the options; forward() on other
// images throws lockstep::Error. (MlpImpl, char_lstm.h, is the plain one for
// tests and benchmarks.)
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <vector>

#include "lockstep/models/image_classifier.h"
#include "lockstep/nn/activation_checkpoint.h"

namespace lockstep {

class ImageMlpImpl : public ImageClassifierImpl {
 public:
  /// Layers fc1..fc{n+1} for n hidden sizes (the default 512, 256 gives fc1, fc2, fc3).
  explicit ImageMlpImpl(const ImageModelOptions& o);
  static int64_t stageCount(const ImageModelOptions& o) { return static_cast<int64_t>(o.hiddenSizes.size()) + 1; }

  at::Tensor forward(const at::Tensor& images) override;
  std::vector<Layer> layers() override;

 private:
  ImageModelOptions options_;
  std::vector<torch::nn::Linear> layers_;
  std::vector<CheckpointStage> stages_;  ///< Linear-ReLU each, the last Linear alone
};

}  // namespace lockstep
