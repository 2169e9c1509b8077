// Image classification as a Task: an image dataset with its transforms, one
// of the vision models, cross-entropy loss and accuracy.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/models/vision.h"
#include "lockstep/workloads/tasks.h"
#include "workloads/builtin_tasks.h"

namespace lockstep {

namespace {

class ImageTask final : public Task {
 public:
  TaskParts build(const TrainConfig& config, int rank) override {
    if (config.model.type == "charlstm") {
      throw ConfigError(fmt::format("model.type charlstm needs data.dataset names, not '{}'", config.data.dataset));
    }
    auto [trainImages, testImages] = openImageSets(config.data);
    ImageShape shape = trainImages->shape();
    if (shape.height != shape.width) {
      throw ConfigError(fmt::format("images are {}x{}; the built-in models take square images (set data.image_size)",
                                    shape.height, shape.width));
    }
    TaskParts parts;
    parts.train = std::make_shared<ImageClassificationSet>(trainImages, transformsFor(config, true));
    if (testImages)
      parts.validation = std::make_shared<ImageClassificationSet>(testImages, transformsFor(config, false));
    if (rank == 0) {
      log::info(fmt::format("data: {}; validation: {}", trainImages->description(),
                            testImages ? testImages->description() : std::string("none")));
    }
    parts.model =
        makeImageModel(config.model.type, ImageModelOptions{shape.channels, shape.height, trainImages->numClasses(),
                                                            config.model.hiddenSizes, config.model.checkpointSegments});
    if (rank == 0) {
      log::info(fmt::format("model: {} with {} parameters", config.model.type, countParameters(*parts.model)));
    }
    parts.loss = [](torch::nn::Module& m, const Batch& batch) {
      return at::cross_entropy_loss(static_cast<ImageClassifierImpl&>(m).forward(batch.inputs), batch.targets);
    };
    parts.correct = [](torch::nn::Module& m, const Batch& batch) {
      auto predicted = static_cast<ImageClassifierImpl&>(m).forward(batch.inputs).argmax(1);
      return predicted.eq(batch.targets).sum().item<int64_t>();
    };
    // The model as a chain (pipeline stages split it, ZeRO-3 gathers a layer at a time); with
    // checkpoint segments it runs its own forward, whole.
    if (config.model.checkpointSegments > 0) {
      if (config.trainer.pipeline.stages > 1) {
        throw ConfigError(
            "model.checkpoint_segments cannot be combined with parallel.pipeline (the stages run the "
            "model's layers themselves)");
      }
    } else {
      parts.layers = static_cast<ImageClassifierImpl&>(*parts.model).layers();
      parts.outputLoss = [](const at::Tensor& out, const Batch& batch) {
        return at::cross_entropy_loss(out, batch.targets);
      };
      parts.outputCorrect = [](const at::Tensor& out, const Batch& batch) {
        return out.argmax(1).eq(batch.targets).sum().item<int64_t>();
      };
    }
    parts.checkpointExtras = {{"task", "images"},
                              {"model.type", config.model.type},
                              {"data.dataset", config.data.dataset},
                              {"num_classes", std::to_string(trainImages->numClasses())},
                              {"config", toYaml(config)}};
    return parts;
  }

  void afterFit(const TrainConfig& config, const FitResult& result, int rank) override {
    if (rank != 0 || result.lastValidationAccuracy < 0) return;
    std::cout << fmt::format("{} on {}: validation accuracy {:.2f}% after {} steps ({:.0f} s, {:.0f} samples/s)\n",
                             config.model.type, config.data.dataset, 100 * result.lastValidationAccuracy, result.steps,
                             result.seconds, result.samplesPerSecond)
              << std::flush;
  }
};

}  // namespace

std::pair<std::shared_ptr<ImageDataset>, std::shared_ptr<ImageDataset>> openImageSets(const TrainConfig::Data& d) {
  auto needRoot = [&](const char* what) {
    if (d.root.empty()) throw ConfigError(fmt::format("data.dataset {} needs data.root ({})", d.dataset, what));
    return d.root;
  };
  if (d.dataset == "fashion-mnist") {
    std::string root = d.root.empty() ? kDefaultFashionMnistRoot : d.root;
    return {openFashionMnist(root, true), openFashionMnist(root, false)};
  }
  if (d.dataset == "mnist") {
    std::string root = needRoot("the folder with train-images-idx3-ubyte[.gz] ...");
    return {openMnist(root, true), openMnist(root, false)};
  }
  if (d.dataset == "cifar10") {
    std::string root = needRoot("the folder with data_batch_1.bin ... test_batch.bin");
    return {openCifar10(root, true), openCifar10(root, false)};
  }
  LOCKSTEP_CHECK(d.dataset == "imagefolder", "data.dataset '", d.dataset, "' is not an image dataset");
  std::string root = needRoot("a folder with train/<class>/<image> and optionally val/<class>/<image>");
  ImageFolderOptions o;
  o.resizeHeight = o.resizeWidth = d.imageSize;
  o.channels = d.channels;
  o.onBadImage = d.badImages == "skip" ? BadImagePolicy::kSkip : BadImagePolicy::kAbort;
  auto train = ImageFolderDataset::open(root + "/train", o);
  std::shared_ptr<ImageDataset> val;
  if (std::filesystem::is_directory(root + "/val")) val = ImageFolderDataset::open(root + "/val", o);
  return {train, val};
}

ImageTransformOptions transformsFor(const TrainConfig& config, bool train) {
  ImageTransformOptions t;
  auto [mean, std] = standardNormalisation(config.data.dataset);
  t.mean = config.data.mean.empty() ? mean : config.data.mean;
  t.std = config.data.std.empty() ? std : config.data.std;
  t.seed = config.trainer.seed;
  if (train) {
    t.randomFlip = config.data.randomFlip;
    t.cropPadding = config.data.cropPadding;
  }
  return t;
}

namespace detail {
void addImageTasks(TaskRegistry& tasks) {
  for (const char* dataset : {"fashion-mnist", "mnist", "cifar10", "imagefolder"}) {
    tasks.add(dataset, [] { return std::make_unique<ImageTask>(); });
  }
}
}  // namespace detail

void addBuiltinTasks(TaskRegistry& tasks) {
  detail::addNamesTask(tasks);
  detail::addImageTasks(tasks);
}

}  // namespace lockstep
