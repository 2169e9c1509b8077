// image_task.h — building the image-classification task of a training config
// (shared by `lockstep train` and `lockstep bench loader`).
#pragma once

#include <memory>
#include <utility>

#include "lockstep/data/image_dataset.h"
#include "lockstep/data/image_transforms.h"
#include "lockstep/train/config.h"

namespace lockstep::cli {

/// The train and test (or val) image sets a config's data section names; test may be null.
std::pair<std::shared_ptr<ImageDataset>, std::shared_ptr<ImageDataset>> openImageSets(const TrainConfig::Data& data);
/// Normalisation (the dataset's usual values unless configured) and, for training, augmentation.
ImageTransformOptions transformsFor(const TrainConfig& config, bool train);

}  // namespace lockstep::cli
