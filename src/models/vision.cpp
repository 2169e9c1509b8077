// makeImageModel() and what the image model families share (models/vision_parts.h).
// The families are one file each, as in torchvision: convnet.cpp, image_mlp.cpp,
// alexnet.cpp, resnet.cpp.
#include "lockstep/models/vision.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <unordered_set>

#include "lockstep/common/error.h"
#include "lockstep/nn/activation_checkpoint.h"
#include "models/vision_parts.h"

namespace lockstep {

namespace detail {

void checkImages(const at::Tensor& images, const char* type, int64_t channels, int64_t side) {
  LOCKSTEP_CHECK(images.dim() == 4, "model '", type, "' takes images [B, C, H, W], got a tensor of ", images.dim(),
                 " dimensions");
  LOCKSTEP_CHECK_EQ(images.size(1), channels, "model '", type, "' was built for ", channels, " input channels");
  if (side > 0) {
    LOCKSTEP_CHECK(images.size(2) == side && images.size(3) == side, "model '", type, "' was built for ", side, "x",
                   side, " images, got ", images.size(2), "x", images.size(3), "; build it with the data's image size");
  }
}

at::Tensor runStages(const std::vector<CheckpointStage>& stages, int64_t segments, const at::Tensor& x) {
  if (segments > 0) return checkpointSequence(stages, segments, x);
  at::Tensor y = x;
  for (const auto& s : stages) y = s.fn(y);
  return y;
}

std::vector<CheckpointStage> stagesOf(const std::vector<Layer>& layers) {
  std::vector<CheckpointStage> stages;
  for (const auto& layer : layers) {
    std::shared_ptr<torch::nn::Module> holder;
    if (layer.modules.size() == 1) {
      holder = layer.modules[0];
    } else if (!layer.modules.empty()) {
      holder = std::make_shared<torch::nn::Module>();
      for (size_t i = 0; i < layer.modules.size(); ++i) holder->register_module(std::to_string(i), layer.modules[i]);
    }
    stages.push_back({layer.forward, std::move(holder)});
  }
  return stages;
}

}  // namespace detail

namespace {

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
