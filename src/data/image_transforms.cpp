#include "lockstep/data/image_transforms.h"

#include <ATen/ATen.h>

#include <random>

#include <fmt/format.h>

#include "lockstep/common/error.h"

namespace lockstep {

namespace {
uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

std::pair<std::vector<double>, std::vector<double>> standardNormalisation(const std::string& dataset) {
  if (dataset == "fashion-mnist") return {{0.2860}, {0.3530}};
  if (dataset == "mnist") return {{0.1307}, {0.3081}};
  if (dataset == "cifar10") return {{0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}};
  if (dataset == "imagenet" || dataset == "imagefolder") return {{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}};
  return {{}, {}};
}

ImageClassificationSet::ImageClassificationSet(std::shared_ptr<ImageDataset> images, ImageTransformOptions options)
    : images_(std::move(images)), options_(std::move(options)) {
  LOCKSTEP_CHECK(images_ != nullptr, "ImageClassificationSet needs a dataset");
  int64_t c = images_->shape().channels;
  auto expand = [&](const std::vector<double>& v, double fallback, const char* what) {
    if (v.empty()) return std::vector<float>(static_cast<size_t>(c), static_cast<float>(fallback));
    if (v.size() == 1) return std::vector<float>(static_cast<size_t>(c), static_cast<float>(v[0]));
    if (static_cast<int64_t>(v.size()) != c) {
      throw ConfigError(fmt::format("data.{} has {} values but the images have {} channels", what, v.size(), c));
    }
    return std::vector<float>(v.begin(), v.end());
  };
  mean_ = expand(options_.mean, 0.0, "mean");
  auto std = expand(options_.std, 1.0, "std");
  for (float s : std) {
    if (!(s > 0)) throw ConfigError("data.std values must be positive");
    invStd_.push_back(1.0f / s);
  }
  LOCKSTEP_CHECK(options_.cropPadding >= 0, "data.crop_padding must not be negative");
}

int64_t ImageClassificationSet::size() const { return images_->size(); }

Batch ImageClassificationSet::batch(const std::vector<int64_t>& indices, int64_t epoch) const {
  ImageShape shape = images_->shape();
  const int64_t c = shape.channels, h = shape.height, w = shape.width;
  const int64_t b = static_cast<int64_t>(indices.size());
  at::Tensor inputs = at::empty({b, c, h, w}, at::kFloat);
  at::Tensor targets = at::empty({b}, at::kLong);
  float* out = inputs.data_ptr<float>();
  int64_t* labels = targets.data_ptr<int64_t>();
  const int64_t pad = options_.cropPadding;
  for (int64_t i = 0; i < b; ++i) {
    auto [image, label] = images_->get(indices[static_cast<size_t>(i)]);
    labels[i] = label;
    const uint8_t* src = image.data_ptr<uint8_t>();
    std::mt19937_64 rng(splitmix(options_.seed ^ splitmix(static_cast<uint64_t>(epoch) * 0x100000001B3ull ^
                                                          static_cast<uint64_t>(indices[static_cast<size_t>(i)]))));
    bool flip = options_.randomFlip && (rng() & 1);
    int64_t dy = 0, dx = 0;
    if (pad > 0) {
      dy = static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * pad + 1)) - pad;
      dx = static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * pad + 1)) - pad;
    }
    float* dst = out + i * c * h * w;
    for (int64_t ch = 0; ch < c; ++ch) {
      const float m = mean_[static_cast<size_t>(ch)];
      const float inv = invStd_[static_cast<size_t>(ch)];
      const float zero = (0.0f - m) * inv;  // padding is black before normalisation
      for (int64_t y = 0; y < h; ++y) {
        int64_t sy = y + dy;
        for (int64_t x = 0; x < w; ++x) {
          int64_t sx = (flip ? w - 1 - x : x) + dx;
          float v = zero;
          if (sy >= 0 && sy < h && sx >= 0 && sx < w) {
            v = (static_cast<float>(src[(ch * h + sy) * w + sx]) * (1.0f / 255.0f) - m) * inv;
          }
          dst[(ch * h + y) * w + x] = v;
        }
      }
    }
  }
  return {inputs, targets};
}

}  // namespace lockstep
