// lockstep/models/image_classifier.h — what every image classifier is and is built from.
//
// The interface the families (convnet.h, image_mlp.h, alexnet.h, resnet.h) implement and the
// options makeImageModel() (vision.h) builds them with. Apart from vision.h so that a family's
// header can derive from it while vision.h includes every family. Only <torch/nn/module.h> is
// included here.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep {

/// Every image classifier: [B, C, H, W] float -> logits [B, numClasses].
class ImageClassifierImpl : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& images) = 0;
  /// The model as a chain of layers whose composition is forward() (what pipeline stages split,
  /// pipeline/pipeline.h): convnet 4 (each conv with its ReLU and pooling, fc1, fc2), mlp one per
  /// Linear, alexnet 8 (5 conv blocks, 3 classifier Linears), resnet the stem, each residual block
  /// and the head. No layer modifies its input in place.
  virtual std::vector<Layer> layers() = 0;
};

struct ImageModelOptions {
  int64_t inChannels = 3;
  int64_t imageSize = 32;  ///< square input side
  int64_t numClasses = 10;
  /// "mlp" only: the widths of its hidden layers (Linear-ReLU each), then a Linear to numClasses.
  /// Empty or a non-positive width -> lockstep::ConfigError. Other models ignore it.
  std::vector<int64_t> hiddenSizes = {512, 256};
  /// > 0: activation checkpointing in this many segments (nn/activation_checkpoint.h)
  /// over the model's stages, which are its layers(): "convnet" 4, "mlp" each
  /// Linear(-ReLU), "alexnet"/"alexnet-cifar" 8, "resnet18"/"resnet50" the stem,
  /// each residual block, the head. 0: off. More segments than stages ->
  /// lockstep::ConfigError.
  int64_t checkpointSegments = 0;
};

}  // namespace lockstep
