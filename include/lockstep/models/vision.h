// lockstep/models/vision.h — image classifiers for the image workloads.
//
// Every model takes float images [B, C, H, W] (C = inChannels, H = W =
// imageSize as configured) and returns logits [B, numClasses]; the loss
// (softmax cross-entropy) is the caller's. Models are built by name through
// makeImageModel(), which is what `model.type` in a config selects; the
// layouts, parameter counts and accepted sizes are in docs/models.md.
//
// Construction draws the initial weights from LibTorch's global generator:
// seed it (torch::manual_seed) before building for reproducible weights, and
// let rank 0's weights reach the other ranks through DDP's broadcast anyway.
// ResNets hold BatchNorm running statistics as buffers; training/eval mode
// (Module::train/eval) switches BatchNorm and Dropout as in PyTorch.
//
// Errors: an unknown type, a size the model cannot take, or a non-positive
// option throw lockstep::ConfigError naming the type and what is expected;
// forward() on an input of the wrong rank, channel count or (for the
// fixed-size models convnet and mlp) the wrong spatial size throws
// lockstep::Error.
//
// Only <torch/nn/module.h> is included here; the concrete model classes live in
// src/models/ and are reached through the ImageClassifierImpl interface.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
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

/// type: "convnet", "mlp", "alexnet" (the paper's/torchvision's 224x224 layout), "alexnet-cifar" (a 32x32 variant),
/// "resnet18", "resnet50" (torchvision layouts; with imageSize <= 64 the stem is CIFAR-style: 3x3 conv stride 1, no
/// maxpool). Unknown type or an image size the model cannot take -> lockstep::ConfigError naming the type and what is
/// expected.
std::shared_ptr<ImageClassifierImpl> makeImageModel(const std::string& type, const ImageModelOptions& options);

/// The names makeImageModel() accepts, in the order docs/models.md lists them.
std::vector<std::string> imageModelTypes();

/// Trainable parameters (requires_grad) of `module` and its submodules, counted once each.
int64_t countParameters(const torch::nn::Module& module);

}  // namespace lockstep
