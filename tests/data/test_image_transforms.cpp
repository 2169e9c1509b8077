// ImageClassificationSet: scaling, normalisation, and augmentation that is a
// pure function of (seed, epoch, sample index).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "lockstep/common/error.h"
#include "lockstep/data/image_transforms.h"

namespace lockstep {
namespace {

/// 4x4 images whose pixel (c, y, x) = 10*index + 4*y + x + 100*c, label = index % 3.
class Ramp : public ImageDataset {
 public:
  explicit Ramp(int64_t channels) : channels_(channels) {}
  int64_t size() const override { return 20; }
  int64_t numClasses() const override { return 3; }
  std::vector<std::string> classNames() const override { return {"a", "b", "c"}; }
  ImageShape shape() const override { return {channels_, 4, 4}; }
  std::pair<at::Tensor, int64_t> get(int64_t index) const override {
    at::Tensor t = at::empty({channels_, 4, 4}, at::kByte);
    for (int64_t c = 0; c < channels_; ++c)
      for (int64_t y = 0; y < 4; ++y)
        for (int64_t x = 0; x < 4; ++x) t[c][y][x] = static_cast<uint8_t>(10 * index + 4 * y + x + 100 * c);
    return {t, index % 3};
  }
  std::string description() const override { return "ramp"; }

 private:
  int64_t channels_;
};

TEST(ImageTransforms, ScalesAndNormalisesPerChannel) {
  ImageTransformOptions o;
  o.mean = {0.5, 0.25};
  o.std = {0.5, 0.25};
  ImageClassificationSet set(std::make_shared<Ramp>(2), o);
  Batch b = set.batch({3, 7}, 0);
  ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{2, 2, 4, 4}));
  EXPECT_EQ(b.targets[0].item<int64_t>(), 0);
  EXPECT_EQ(b.targets[1].item<int64_t>(), 1);
  double pixel = (10 * 7 + 4 * 2 + 1 + 100) / 255.0;  // sample 7, channel 1, y 2, x 1
  EXPECT_NEAR(b.inputs[1][1][2][1].item<float>(), (pixel - 0.25) / 0.25, 1e-5);
  EXPECT_THROW(
      ImageClassificationSet(std::make_shared<Ramp>(2), ImageTransformOptions{{0.1, 0.2, 0.3}, {}, false, 0, 0}),
      ConfigError);
}

TEST(ImageTransforms, AugmentationDependsOnSeedEpochAndIndexOnly) {
  ImageTransformOptions o;
  o.randomFlip = true;
  o.cropPadding = 1;
  o.seed = 9;
  ImageClassificationSet set(std::make_shared<Ramp>(1), o);
  // The same sample looks the same in any batch and any call...
  Batch alone = set.batch({5}, 3);
  Batch mixed = set.batch({2, 5, 11}, 3);
  EXPECT_TRUE(at::equal(alone.inputs[0], mixed.inputs[1]));
  EXPECT_TRUE(at::equal(set.batch({5}, 3).inputs, alone.inputs));
  // ...and differs across epochs for at least some samples.
  std::vector<int64_t> all(20);
  for (int64_t i = 0; i < 20; ++i) all[static_cast<size_t>(i)] = i;
  EXPECT_FALSE(at::equal(set.batch(all, 0).inputs, set.batch(all, 1).inputs));
  // A flipped, shifted image still holds the original pixels (or zero padding).
  ImageClassificationSet plain(std::make_shared<Ramp>(1), ImageTransformOptions{});
  auto original = plain.batch(all, 0).inputs;
  auto augmented = set.batch(all, 0).inputs;
  int changed = 0;
  for (int64_t i = 0; i < 20; ++i) {
    if (!at::equal(original[i], augmented[i])) ++changed;
    at::Tensor values = std::get<0>(at::_unique(augmented[i].flatten()));
    for (int64_t k = 0; k < values.numel(); ++k) {
      float v = values[k].item<float>();
      EXPECT_TRUE(v == 0.0f || (original[i] == v).any().item<bool>()) << "pixel value " << v << " came from nowhere";
    }
  }
  EXPECT_GT(changed, 5);
}

}  // namespace
}  // namespace lockstep
