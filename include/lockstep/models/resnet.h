// lockstep/models/resnet.h — "resnet18" and "resnet50", torchvision's layouts.
//
// A stem (conv, BatchNorm, ReLU, max pool), four stages of residual blocks
// (BasicBlockImpl for ResNet-18, BottleneckImpl for ResNet-50 v1.5), a global
// average pool and a Linear; submodule names follow torchvision
// ("layer1.0.conv1.weight", "layer2.0.downsample.0.weight"). Any image side;
// up to kCifarStemMaxSide the stem is CIFAR-style (3x3 conv stride 1, no max
// pool). Built through makeImageModel() (vision.h), which checks the options.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/models/image_classifier.h"
#include "lockstep/nn/activation_checkpoint.h"

namespace lockstep {

class ResidualBlockImpl : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x) = 0;

 protected:
  /// torchvision's downsample = Sequential(conv1x1, BN): registered as a list "downsample" with children 0 and 1.
  void makeDownsample(int64_t in, int64_t out, int64_t stride);
  at::Tensor shortcut(const at::Tensor& x) { return downConv_ ? downBn_->forward(downConv_->forward(x)) : x; }

 private:
  torch::nn::Conv2d downConv_{nullptr};
  torch::nn::BatchNorm2d downBn_{nullptr};
};

class BasicBlockImpl : public ResidualBlockImpl {
 public:
  static constexpr int64_t kExpansion = 1;

  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride);
  at::Tensor forward(const at::Tensor& x) override;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
};

/// ResNet v1.5: the stride sits on the 3x3 conv.
class BottleneckImpl : public ResidualBlockImpl {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t in, int64_t planes, int64_t stride);
  at::Tensor forward(const at::Tensor& x) override;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
};

/// Images up to this side get the CIFAR stem (3x3 stride-1 conv, no max pool).
inline constexpr int64_t kCifarStemMaxSide = 64;

class ResNetImpl : public ImageClassifierImpl {
 public:
  /// `blocks`: the number of Blocks in each of the four stages ({2, 2, 2, 2} for ResNet-18,
  /// {3, 4, 6, 3} for ResNet-50); `type` names the model in messages.
  template <typename Block>
  static std::shared_ptr<ResNetImpl> make(const char* type, const ImageModelOptions& o,
                                          const std::vector<int64_t>& blocks) {
    auto net = std::shared_ptr<ResNetImpl>(new ResNetImpl(type, o));
    int64_t in = 64;
    const int64_t planes[] = {64, 128, 256, 512};
    for (size_t stage = 0; stage < 4; ++stage) {
      auto layer = net->register_module("layer" + std::to_string(stage + 1), torch::nn::ModuleList());
      for (int64_t b = 0; b < blocks[stage]; ++b) {
        int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
        auto block = std::make_shared<Block>(in, planes[stage], stride);
        layer->push_back(block);
        net->blocks_.push_back(block);
        in = planes[stage] * Block::kExpansion;
      }
    }
    net->fc_ = net->register_module("fc", torch::nn::Linear(in, o.numClasses));
    net->initWeights();
    net->buildStages();
    return net;
  }

  at::Tensor forward(const at::Tensor& images) override;
  std::vector<Layer> layers() override;
  /// The stem, each block, the head.
  static int64_t stageCount(const std::vector<int64_t>& blocks) {
    int64_t n = 2;
    for (int64_t b : blocks) n += b;
    return n;
  }

 private:
  ResNetImpl(const char* type, const ImageModelOptions& o);
  void buildStages();
  void initWeights();

  ImageModelOptions options_;
  const char* type_;
  bool cifarStem_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<std::shared_ptr<ResidualBlockImpl>> blocks_;  ///< layer1..layer4 in order
  torch::nn::Linear fc_{nullptr};
  std::vector<CheckpointStage> stages_;
};

}  // namespace lockstep
