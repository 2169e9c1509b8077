// "resnet18", "resnet50" (lockstep/models/resnet.h). The layouts follow
// torchvision's, down to submodule names, so that a state dict keys the same way.
#include "lockstep/models/resnet.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/init.h>

#include <utility>

#include "models/vision_parts.h"

namespace lockstep {
namespace {

namespace nn = torch::nn;

/// A bias-free conv whose padding keeps the side (at stride 1), as every conv of a ResNet.
nn::Conv2d resNetConv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

}  // namespace

void ResidualBlockImpl::makeDownsample(int64_t in, int64_t out, int64_t stride) {
  downConv_ = resNetConv(in, out, 1, stride);
  downBn_ = nn::BatchNorm2d(out);
  auto list = register_module("downsample", nn::ModuleList());
  list->push_back(downConv_);
  list->push_back(downBn_);
}

BasicBlockImpl::BasicBlockImpl(int64_t in, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", resNetConv(in, planes, 3, stride));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", resNetConv(planes, planes, 3, 1));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  if (stride != 1 || in != planes) makeDownsample(in, planes, stride);
}

at::Tensor BasicBlockImpl::forward(const at::Tensor& x) {
  at::Tensor out = at::relu(bn1_->forward(conv1_->forward(x)));
  out = bn2_->forward(conv2_->forward(out));
  return at::relu(out + shortcut(x));
}

BottleneckImpl::BottleneckImpl(int64_t in, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", resNetConv(in, planes, 1, 1));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", resNetConv(planes, planes, 3, stride));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  conv3_ = register_module("conv3", resNetConv(planes, planes * kExpansion, 1, 1));
  bn3_ = register_module("bn3", nn::BatchNorm2d(planes * kExpansion));
  if (stride != 1 || in != planes * kExpansion) makeDownsample(in, planes * kExpansion, stride);
}

at::Tensor BottleneckImpl::forward(const at::Tensor& x) {
  at::Tensor out = at::relu(bn1_->forward(conv1_->forward(x)));
  out = at::relu(bn2_->forward(conv2_->forward(out)));
  out = bn3_->forward(conv3_->forward(out));
  return at::relu(out + shortcut(x));
}

at::Tensor ResNetImpl::forward(const at::Tensor& images) {
  detail::checkImages(images, type_, options_.inChannels, /*side=*/0);
  return detail::runStages(stages_, options_.checkpointSegments, images);
}

std::vector<Layer> ResNetImpl::layers() {
  std::vector<Layer> out;
  for (size_t i = 0; i < stages_.size(); ++i) {
    Layer layer{"", stages_[i].fn, {}};
    if (i == 0) {
      ResNetImpl* self = this;
      TensorFn stem = stages_[0].fn;
      layer = {"stem",
               [self, stem](const at::Tensor& images) {
                 detail::checkImages(images, self->type_, self->options_.inChannels, /*side=*/0);
                 return stem(images);
               },
               {conv1_.ptr(), bn1_.ptr()}};
    } else if (i + 1 == stages_.size()) {
      layer.name = "fc";
      layer.modules = {fc_.ptr()};
    } else {
      layer.name = "block" + std::to_string(i);
      layer.modules = {stages_[i].module};
    }
    out.push_back(std::move(layer));
  }
  return out;
}

ResNetImpl::ResNetImpl(const char* type, const ImageModelOptions& o)
    : options_(o), type_(type), cifarStem_(o.imageSize <= kCifarStemMaxSide) {
  conv1_ =
      register_module("conv1", cifarStem_ ? resNetConv(o.inChannels, 64, 3, 1) : resNetConv(o.inChannels, 64, 7, 2));
  bn1_ = register_module("bn1", nn::BatchNorm2d(64));
}

// Raw pointers: the stages live in this module and run while it does.
void ResNetImpl::buildStages() {
  ResNetImpl* self = this;
  stages_.push_back({[self](const at::Tensor& images) {
                       at::Tensor x = at::relu(self->bn1_->forward(self->conv1_->forward(images)));
                       return self->cifarStem_ ? x : at::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
                     },
                     bn1_.ptr()});
  for (auto& block : blocks_) {
    ResidualBlockImpl* b = block.get();
    stages_.push_back({[b](const at::Tensor& x) { return b->forward(x); }, block});
  }
  stages_.push_back({[self](const at::Tensor& x) {
                       return self->fc_->forward(at::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
                     },
                     nullptr});
}

// torchvision: kaiming normal (fan_out, ReLU) for convs, BatchNorm weight 1 and bias 0; Linear keeps its default.
void ResNetImpl::initWeights() {
  c10::NoGradGuard noGrad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
}

}  // namespace lockstep
