// lockstep/data/image_transforms.h — an ImageDataset as training batches.
//
// ImageClassificationSet turns uint8 [C,H,W] images into float batches
// [B,C,H,W] scaled to [0,1], optionally augmented (random crop after zero
// padding, random horizontal flip), then normalised per channel; targets are
// int64 labels. Augmentation draws from a generator seeded by (seed, epoch,
// sample index) only, so it is deterministic for a given seed and epoch and
// independent of rank, thread and batch composition.
#pragma once

#include <memory>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/data/image_dataset.h"

namespace lockstep {

struct ImageTransformOptions {
  std::vector<double> mean;  ///< per channel (or one value for all), on the [0,1] scale; empty: 0
  std::vector<double> std;   ///< likewise; empty: 1
  bool randomFlip = false;
  int64_t cropPadding = 0;  ///< > 0: pad by this many zero pixels and crop back at a random offset
  uint64_t seed = 0;
};

class ImageClassificationSet : public Dataset {
 public:
  ImageClassificationSet(std::shared_ptr<ImageDataset> images, ImageTransformOptions options);
  int64_t size() const override;
  Batch batch(const std::vector<int64_t>& indices, int64_t epoch) const override;
  const ImageDataset& images() const { return *images_; }

 private:
  std::shared_ptr<ImageDataset> images_;
  ImageTransformOptions options_;
  std::vector<float> mean_;
  std::vector<float> invStd_;
};

/// Per-channel mean and std commonly used for a dataset ("fashion-mnist", "mnist",
/// "cifar10"; ImageNet's for "imagenet" and "imagefolder"); empty vectors for anything else.
std::pair<std::vector<double>, std::vector<double>> standardNormalisation(const std::string& dataset);

}  // namespace lockstep
