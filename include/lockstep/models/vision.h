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
// The families, one header and one source each as in torchvision: convnet.h, image_mlp.h,
// alexnet.h, resnet.h (their classes, reached through ImageClassifierImpl, image_classifier.h).
// This header includes them all, so it brings LibTorch's module headers: include it only where
// a model is built.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/models/alexnet.h"
#include "lockstep/models/convnet.h"
#include "lockstep/models/image_classifier.h"
#include "lockstep/models/image_mlp.h"
#include "lockstep/models/resnet.h"

namespace lockstep {

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
