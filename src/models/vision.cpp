// The image classifiers behind makeImageModel(). Layouts follow torchvision
// (alexnet, resnet18, resnet50), down to submodule names, so that a state dict
// keys the same way ("layer1.0.conv1.weight", "features.0.weight", ...).
#include "lockstep/models/vision.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include <algorithm>
#include <unordered_set>

#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/nn/activation_checkpoint.h"
#include "lockstep/nn/pooling.h"

namespace lockstep {
namespace {

namespace nn = torch::nn;

/// Images of the rank and channels a model was built for; `side` > 0 also fixes H and W.
void checkImages(const at::Tensor& images, const char* type, int64_t channels, int64_t side) {
  LOCKSTEP_CHECK(images.dim() == 4, "model '", type, "' takes images [B, C, H, W], got a tensor of ", images.dim(),
                 " dimensions");
  LOCKSTEP_CHECK_EQ(images.size(1), channels, "model '", type, "' was built for ", channels, " input channels");
  if (side > 0) {
    LOCKSTEP_CHECK(images.size(2) == side && images.size(3) == side, "model '", type, "' was built for ", side, "x",
                   side, " images, got ", images.size(2), "x", images.size(3), "; build it with the data's image size");
  }
}

/// Output side of a conv or pool window; < 1 when the input is too small for it.
int64_t windowOut(int64_t side, int64_t kernel, int64_t stride, int64_t padding) {
  int64_t span = side + 2 * padding - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

/// Runs `stages` plainly, or checkpointed in `segments` (> 0).
at::Tensor runStages(const std::vector<CheckpointStage>& stages, int64_t segments, const at::Tensor& x) {
  if (segments > 0) return checkpointSequence(stages, segments, x);
  at::Tensor y = x;
  for (const auto& s : stages) y = s.fn(y);
  return y;
}

/// A model's layers() as checkpoint stages (convnet, alexnet: their forward is
/// that chain). A layer with several modules gets one holder module over them,
/// so the checkpoint saves and restores the buffers of all of them.
std::vector<CheckpointStage> stagesOf(const std::vector<Layer>& layers) {
  std::vector<CheckpointStage> stages;
  for (const auto& layer : layers) {
    std::shared_ptr<nn::Module> holder;
    if (layer.modules.size() == 1) {
      holder = layer.modules[0];
    } else if (!layer.modules.empty()) {
      holder = std::make_shared<nn::Module>();
      for (size_t i = 0; i < layer.modules.size(); ++i) holder->register_module(std::to_string(i), layer.modules[i]);
    }
    stages.push_back({layer.forward, std::move(holder)});
  }
  return stages;
}

// ---- convnet ----------------------------------------------------------------

/// LOCKSTEP_PLAIN_POOLING: 1 runs LibTorch's relu + max_pool2d, 0 or unset
/// lockstep's one-pass kernel (the same bits either way); read when a convnet
/// is built, anything else a ConfigError naming the variable.
bool plainPoolingFromEnvironment() {
  return Environment::fromProcess().getInt(env::kPlainPooling, 0, 1).value_or(0) == 1;
}

class ConvNetImpl : public ImageClassifierImpl {
 public:
  explicit ConvNetImpl(const ImageModelOptions& o) : options_(o), plainPooling_(plainPoolingFromEnvironment()) {
    int64_t pooled = o.imageSize / 4;
    conv1_ = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(o.inChannels, 32, 3).padding(1)));
    conv2_ = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)));
    fc1_ = register_module("fc1", nn::Linear(64 * pooled * pooled, 128));
    fc2_ = register_module("fc2", nn::Linear(128, o.numClasses));
    if (o.checkpointSegments > 0) stages_ = stagesOf(layers());
  }
  static constexpr int64_t kStages = 4;

  at::Tensor forward(const at::Tensor& images) override {
    if (options_.checkpointSegments > 0) return runStages(stages_, options_.checkpointSegments, images);
    checkImages(images, "convnet", options_.inChannels, options_.imageSize);
    at::Tensor x = reluPool(conv1_->forward(images));
    x = reluPool(conv2_->forward(x));
    x = at::relu(fc1_->forward(x.flatten(1)));
    return fc2_->forward(x);
  }

  std::vector<Layer> layers() override {
    ConvNetImpl* self = this;
    return {{"conv1",
             [self](const at::Tensor& images) {
               checkImages(images, "convnet", self->options_.inChannels, self->options_.imageSize);
               return self->reluPool(self->conv1_->forward(images));
             },
             {conv1_.ptr()}},
            {"conv2", [self](const at::Tensor& x) { return self->reluPool(self->conv2_->forward(x)); }, {conv2_.ptr()}},
            {"fc1", [self](const at::Tensor& x) { return at::relu(self->fc1_->forward(x.flatten(1))); }, {fc1_.ptr()}},
            {"fc2", [self](const at::Tensor& x) { return self->fc2_->forward(x); }, {fc2_.ptr()}}};
  }

 private:
  /// ReLU then 2 x 2 max pooling (lockstep/nn/pooling.h).
  at::Tensor reluPool(const at::Tensor& x) const {
    return plainPooling_ ? at::max_pool2d(at::relu(x), {2, 2}) : reluMaxPool2x2(x);
  }

  ImageModelOptions options_;
  bool plainPooling_;
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::Linear fc1_{nullptr}, fc2_{nullptr};
  std::vector<CheckpointStage> stages_;  ///< layers(), with model.checkpoint_segments
};

// ---- mlp --------------------------------------------------------------------

class ImageMlpImpl : public ImageClassifierImpl {
 public:
  /// Layers fc1..fc{n+1} (the default 512, 256 gives fc1, fc2, fc3, as before hidden sizes were configurable).
  explicit ImageMlpImpl(const ImageModelOptions& o) : options_(o) {
    int64_t in = o.inChannels * o.imageSize * o.imageSize;
    std::vector<int64_t> outs = o.hiddenSizes;
    outs.push_back(o.numClasses);
    for (size_t i = 0; i < outs.size(); ++i) {
      layers_.push_back(register_module("fc" + std::to_string(i + 1), nn::Linear(in, outs[i])));
      in = outs[i];
    }
    for (size_t i = 0; i < layers_.size(); ++i) {
      std::shared_ptr<nn::LinearImpl> layer = layers_[i].ptr();
      const bool last = i + 1 == layers_.size();
      stages_.push_back({[layer, last](const at::Tensor& x) {
                           at::Tensor y = layer->forward(x);
                           return last ? y : at::relu(y);
                         },
                         layer});
    }
  }
  static int64_t stageCount(const ImageModelOptions& o) { return static_cast<int64_t>(o.hiddenSizes.size()) + 1; }

  at::Tensor forward(const at::Tensor& images) override {
    checkImages(images, "mlp", options_.inChannels, options_.imageSize);
    return runStages(stages_, options_.checkpointSegments, images.flatten(1));
  }

  std::vector<Layer> layers() override {
    std::vector<Layer> out;
    for (size_t i = 0; i < stages_.size(); ++i) {
      TensorFn fn = stages_[i].fn;
      if (i == 0) {
        ImageModelOptions o = options_;
        fn = [fn, o](const at::Tensor& images) {
          checkImages(images, "mlp", o.inChannels, o.imageSize);
          return fn(images.flatten(1));
        };
      }
      out.push_back({"fc" + std::to_string(i + 1), fn, {stages_[i].module}});
    }
    return out;
  }

 private:
  ImageModelOptions options_;
  std::vector<nn::Linear> layers_;
  std::vector<CheckpointStage> stages_;  ///< Linear-ReLU each, the last Linear alone
};

// ---- alexnet, alexnet-cifar -------------------------------------------------

/// The smallest square side torchvision's AlexNet features accept (63).
int64_t alexNetFeatureSide(int64_t side) {
  side = windowOut(side, 11, 4, 2);  // conv1
  side = windowOut(side, 3, 2, 0);   // pool1
  side = windowOut(side, 3, 2, 0);   // pool2 (conv2..5 keep the size)
  return windowOut(side, 3, 2, 0);   // pool3
}

struct AlexNetLayout {
  const char* type;
  // features: conv1 kernel/stride/padding, conv2 kernel/padding, pooling window/stride
  int64_t k1, s1, p1, k2, p2, poolKernel, poolStride;
  int64_t pooledSide;  ///< adaptive average pool output
  int64_t hidden;      ///< classifier width
};

constexpr AlexNetLayout kAlexNet{"alexnet", 11, 4, 2, 5, 2, 3, 2, 6, 4096};
constexpr AlexNetLayout kAlexNetCifar{"alexnet-cifar", 3, 1, 1, 3, 1, 2, 2, 4, 1024};

class AlexNetImpl : public ImageClassifierImpl {
 public:
  AlexNetImpl(const ImageModelOptions& o, const AlexNetLayout& l) : options_(o), type_(l.type) {
    auto pool = [&] { return nn::MaxPool2d(nn::MaxPool2dOptions(l.poolKernel).stride(l.poolStride)); };
    auto relu = [] { return nn::ReLU(nn::ReLUOptions(true)); };
    features_ = register_module(
        "features", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(o.inChannels, 64, l.k1).stride(l.s1).padding(l.p1)),
                                   relu(), pool(), nn::Conv2d(nn::Conv2dOptions(64, 192, l.k2).padding(l.p2)), relu(),
                                   pool(), nn::Conv2d(nn::Conv2dOptions(192, 384, 3).padding(1)), relu(),
                                   nn::Conv2d(nn::Conv2dOptions(384, 256, 3).padding(1)), relu(),
                                   nn::Conv2d(nn::Conv2dOptions(256, 256, 3).padding(1)), relu(), pool()));
    avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(l.pooledSide)));
    classifier_ = register_module(
        "classifier",
        nn::Sequential(nn::Dropout(0.5), nn::Linear(256 * l.pooledSide * l.pooledSide, l.hidden), relu(),
                       nn::Dropout(0.5), nn::Linear(l.hidden, l.hidden), relu(), nn::Linear(l.hidden, o.numClasses)));
    if (o.checkpointSegments > 0) stages_ = stagesOf(layers());
  }
  static constexpr int64_t kStages = 8;

  at::Tensor forward(const at::Tensor& images) override {
    if (options_.checkpointSegments > 0) return runStages(stages_, options_.checkpointSegments, images);
    checkImages(images, type_, options_.inChannels, /*side=*/0);
    at::Tensor x = avgpool_->forward(features_->forward(images));
    return classifier_->forward(x.flatten(1));
  }

  /// Children [first, end) of `seq`, after `before` (when given).
  static Layer run(std::string name, nn::Sequential seq, size_t first, size_t end, TensorFn before = {}) {
    std::vector<std::shared_ptr<torch::nn::Module>> modules;
    for (size_t i = first; i < end; ++i) modules.push_back(seq->ptr(i));
    std::shared_ptr<nn::SequentialImpl> impl = seq.ptr();
    return {std::move(name),
            [impl, first, end, before](const at::Tensor& input) {
              at::Tensor x = before ? before(input) : input;
              for (size_t i = first; i < end; ++i) x = (impl->begin() + static_cast<std::ptrdiff_t>(i))->forward(x);
              return x;
            },
            std::move(modules)};
  }

  std::vector<Layer> layers() override {
    AlexNetImpl* self = this;
    auto checked = [self](const at::Tensor& images) {
      checkImages(images, self->type_, self->options_.inChannels, /*side=*/0);
      return images;
    };
    auto pooled = [self](const at::Tensor& x) { return self->avgpool_->forward(x).flatten(1); };
    // features: conv relu pool | conv relu pool | conv relu | conv relu | conv relu pool;
    // classifier: dropout linear relu | dropout linear relu | linear.
    return {run("features.0", features_, 0, 3, checked), run("features.3", features_, 3, 6),
            run("features.6", features_, 6, 8),          run("features.8", features_, 8, 10),
            run("features.10", features_, 10, 13),       run("classifier.1", classifier_, 0, 3, pooled),
            run("classifier.4", classifier_, 3, 6),      run("classifier.6", classifier_, 6, 7)};
  }

 private:
  ImageModelOptions options_;
  const char* type_;
  nn::Sequential features_{nullptr}, classifier_{nullptr};
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  std::vector<CheckpointStage> stages_;  ///< layers(), with model.checkpoint_segments
};

// ---- resnet18, resnet50 -----------------------------------------------------

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

class ResidualBlockImpl : public nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x) = 0;

 protected:
  /// torchvision's downsample = Sequential(conv1x1, BN): registered as a list "downsample" with children 0 and 1.
  void makeDownsample(int64_t in, int64_t out, int64_t stride) {
    downConv_ = conv(in, out, 1, stride);
    downBn_ = nn::BatchNorm2d(out);
    auto list = register_module("downsample", nn::ModuleList());
    list->push_back(downConv_);
    list->push_back(downBn_);
  }
  at::Tensor shortcut(const at::Tensor& x) { return downConv_ ? downBn_->forward(downConv_->forward(x)) : x; }

 private:
  nn::Conv2d downConv_{nullptr};
  nn::BatchNorm2d downBn_{nullptr};
};

class BasicBlockImpl : public ResidualBlockImpl {
 public:
  static constexpr int64_t kExpansion = 1;

  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride) {
    conv1_ = register_module("conv1", conv(in, planes, 3, stride));
    bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, 1));
    bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
    if (stride != 1 || in != planes) makeDownsample(in, planes, stride);
  }

  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor out = at::relu(bn1_->forward(conv1_->forward(x)));
    out = bn2_->forward(conv2_->forward(out));
    return at::relu(out + shortcut(x));
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
};

/// ResNet v1.5: the stride sits on the 3x3 conv.
class BottleneckImpl : public ResidualBlockImpl {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t in, int64_t planes, int64_t stride) {
    conv1_ = register_module("conv1", conv(in, planes, 1, 1));
    bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, stride));
    bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
    conv3_ = register_module("conv3", conv(planes, planes * kExpansion, 1, 1));
    bn3_ = register_module("bn3", nn::BatchNorm2d(planes * kExpansion));
    if (stride != 1 || in != planes * kExpansion) makeDownsample(in, planes * kExpansion, stride);
  }

  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor out = at::relu(bn1_->forward(conv1_->forward(x)));
    out = at::relu(bn2_->forward(conv2_->forward(out)));
    out = bn3_->forward(conv3_->forward(out));
    return at::relu(out + shortcut(x));
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
};

/// Images up to this side get the CIFAR stem (3x3 stride-1 conv, no max pool).
constexpr int64_t kCifarStemMaxSide = 64;

class ResNetImpl : public ImageClassifierImpl {
 public:
  template <typename Block>
  static std::shared_ptr<ResNetImpl> make(const char* type, const ImageModelOptions& o,
                                          const std::vector<int64_t>& blocks) {
    auto net = std::shared_ptr<ResNetImpl>(new ResNetImpl(type, o));
    int64_t in = 64;
    const int64_t planes[] = {64, 128, 256, 512};
    for (size_t stage = 0; stage < 4; ++stage) {
      auto layer = net->register_module("layer" + std::to_string(stage + 1), nn::ModuleList());
      for (int64_t b = 0; b < blocks[stage]; ++b) {
        int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
        auto block = std::make_shared<Block>(in, planes[stage], stride);
        layer->push_back(block);
        net->blocks_.push_back(block);
        in = planes[stage] * Block::kExpansion;
      }
    }
    net->fc_ = net->register_module("fc", nn::Linear(in, o.numClasses));
    net->initWeights();
    net->buildStages();
    return net;
  }

  at::Tensor forward(const at::Tensor& images) override {
    checkImages(images, type_, options_.inChannels, /*side=*/0);
    return runStages(stages_, options_.checkpointSegments, images);
  }

  std::vector<Layer> layers() override {
    std::vector<Layer> out;
    for (size_t i = 0; i < stages_.size(); ++i) {
      Layer layer{"", stages_[i].fn, {}};
      if (i == 0) {
        ResNetImpl* self = this;
        TensorFn stem = stages_[0].fn;
        layer = {"stem",
                 [self, stem](const at::Tensor& images) {
                   checkImages(images, self->type_, self->options_.inChannels, /*side=*/0);
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
  /// The stem, each block, the head.
  static int64_t stageCount(const std::vector<int64_t>& blocks) {
    int64_t n = 2;
    for (int64_t b : blocks) n += b;
    return n;
  }

 private:
  ResNetImpl(const char* type, const ImageModelOptions& o)
      : options_(o), type_(type), cifarStem_(o.imageSize <= kCifarStemMaxSide) {
    conv1_ = register_module("conv1", cifarStem_ ? conv(o.inChannels, 64, 3, 1) : conv(o.inChannels, 64, 7, 2));
    bn1_ = register_module("bn1", nn::BatchNorm2d(64));
  }

  // Raw pointers: the stages live in this module and run while it does.
  void buildStages() {
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
  void initWeights() {
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

  ImageModelOptions options_;
  const char* type_;
  bool cifarStem_;
  nn::Conv2d conv1_{nullptr};
  nn::BatchNorm2d bn1_{nullptr};
  std::vector<std::shared_ptr<ResidualBlockImpl>> blocks_;  ///< layer1..layer4 in order
  nn::Linear fc_{nullptr};
  std::vector<CheckpointStage> stages_;
};

const char* const kTypes[] = {"convnet", "mlp", "alexnet", "alexnet-cifar", "resnet18", "resnet50"};

std::string typeList() {
  std::string out;
  for (const char* t : kTypes) out += (out.empty() ? "" : ", ") + std::string(t);
  return out;
}

}  // namespace

std::vector<std::string> imageModelTypes() { return {std::begin(kTypes), std::end(kTypes)}; }

std::shared_ptr<ImageClassifierImpl> makeImageModel(const std::string& type, const ImageModelOptions& o) {
  auto known = imageModelTypes();
  if (std::find(known.begin(), known.end(), type) == known.end()) {
    throw ConfigError("model.type='" + type + "' is not an image model; expected one of " + typeList());
  }
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw ConfigError("model.type='" + type + "': " + what);
  };
  require(o.inChannels >= 1, "input channels must be at least 1, got " + std::to_string(o.inChannels));
  require(o.numClasses >= 1, "the number of classes must be at least 1, got " + std::to_string(o.numClasses));
  require(o.imageSize >= 1, "the image size must be at least 1, got " + std::to_string(o.imageSize));
  const std::string size = std::to_string(o.imageSize) + "x" + std::to_string(o.imageSize);
  auto checkSegments = [&](int64_t stages, const std::string& what) {
    require(o.checkpointSegments >= 0 && o.checkpointSegments <= stages,
            "model.checkpoint_segments=" + std::to_string(o.checkpointSegments) + " but the model has " +
                std::to_string(stages) + " stages (" + what + "); expected 0 (off) to " + std::to_string(stages));
  };

  if (type == "convnet") {
    require(o.imageSize >= 4, "needs images of at least 4x4 (two 2x2 max pools), got " + size);
    checkSegments(ConvNetImpl::kStages, "each conv with its ReLU and pooling, fc1, fc2");
    return std::make_shared<ConvNetImpl>(o);
  }
  if (type == "mlp") {
    require(!o.hiddenSizes.empty(), "needs at least one hidden layer size (model.hidden_sizes)");
    for (int64_t h : o.hiddenSizes) {
      require(h >= 1, "hidden layer sizes (model.hidden_sizes) must be at least 1, got " + std::to_string(h));
    }
    checkSegments(ImageMlpImpl::stageCount(o), "each Linear");
    return std::make_shared<ImageMlpImpl>(o);
  }
  if (type == "alexnet" || type == "alexnet-cifar") {
    checkSegments(AlexNetImpl::kStages, "5 conv blocks, 3 classifier Linears");
  }
  if (type == "alexnet") {
    require(alexNetFeatureSide(o.imageSize) >= 1, "needs images of at least 63x63 (it is laid out for 224x224), got " +
                                                      size + "; use 'alexnet-cifar' for 32x32 images");
    return std::make_shared<AlexNetImpl>(o, kAlexNet);
  }
  if (type == "alexnet-cifar") {
    require(o.imageSize >= 8, "needs images of at least 8x8 (three 2x2 max pools), got " + size);
    return std::make_shared<AlexNetImpl>(o, kAlexNetCifar);
  }
  const std::vector<int64_t> blocks =
      type == "resnet18" ? std::vector<int64_t>{2, 2, 2, 2} : std::vector<int64_t>{3, 4, 6, 3};
  checkSegments(ResNetImpl::stageCount(blocks), "the stem, each residual block, the head");
  if (type == "resnet18") return ResNetImpl::make<BasicBlockImpl>("resnet18", o, blocks);
  return ResNetImpl::make<BottleneckImpl>("resnet50", o, blocks);
}

int64_t countParameters(const torch::nn::Module& module) {
  std::unordered_set<const void*> seen;  // a tensor shared between submodules counts once
  int64_t total = 0;
  for (const at::Tensor& p : module.parameters(/*recurse=*/true)) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) total += p.numel();
  }
  return total;
}

}  // namespace lockstep
