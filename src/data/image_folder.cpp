// ImageFolderDataset: root/<class>/<image>.{png,jpg,jpeg}, decoded with stb_image.
// This is the one translation unit that compiles stb_image (static: its symbols
// stay out of liblockstep's exports, so users may link their own copy).
#include <ATen/ops/empty.h>  // the one op used: cheaper to compile than <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "common/worker_thread.h"
#include "lockstep/common/error.h"
#include "lockstep/data/image_dataset.h"

#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#include <stb_image.h>

namespace lockstep {
namespace {

namespace fs = std::filesystem;

/// Bilinear resize with half-pixel centres (PyTorch's align_corners=False, no antialias) of an
/// interleaved [h, w, c] image into a planar [c, outH, outW] one, rounding to nearest.
/// Same size: a plain interleaved-to-planar copy.
void resizeBilinearToPlanar(const uint8_t* src, int64_t h, int64_t w, int64_t c, int64_t outH, int64_t outW,
                            uint8_t* dst) {
  if (outH == h && outW == w) {
    for (int64_t ch = 0; ch < c; ++ch) {
      uint8_t* plane = dst + ch * h * w;
      for (int64_t p = 0; p < h * w; ++p) plane[p] = src[p * c + ch];
    }
    return;
  }
  struct Tap {
    int64_t i0, i1;
    float w0, w1;
  };
  auto taps = [](int64_t in, int64_t out) {
    std::vector<Tap> t(static_cast<size_t>(out));
    const float scale = static_cast<float>(in) / static_cast<float>(out);
    for (int64_t o = 0; o < out; ++o) {
      const float real = std::max(0.0f, scale * (static_cast<float>(o) + 0.5f) - 0.5f);
      const auto i0 = std::min(static_cast<int64_t>(real), in - 1);
      const float l1 = std::min(1.0f, real - static_cast<float>(i0));
      t[static_cast<size_t>(o)] = {i0, i0 < in - 1 ? i0 + 1 : i0, 1.0f - l1, l1};
    }
    return t;
  };
  const std::vector<Tap> ys = taps(h, outH), xs = taps(w, outW);
  for (int64_t ch = 0; ch < c; ++ch) {
    uint8_t* plane = dst + ch * outH * outW;
    for (int64_t oy = 0; oy < outH; ++oy) {
      const Tap& ty = ys[static_cast<size_t>(oy)];
      const uint8_t* row0 = src + ty.i0 * w * c + ch;
      const uint8_t* row1 = src + ty.i1 * w * c + ch;
      for (int64_t ox = 0; ox < outW; ++ox) {
        const Tap& tx = xs[static_cast<size_t>(ox)];
        const float top = tx.w0 * row0[tx.i0 * c] + tx.w1 * row0[tx.i1 * c];
        const float bottom = tx.w0 * row1[tx.i0 * c] + tx.w1 * row1[tx.i1 * c];
        const float v = ty.w0 * top + ty.w1 * bottom;
        plane[oy * outW + ox] = static_cast<uint8_t>(std::min(255.0f, v + 0.5f));
      }
    }
  }
}

struct StbFree {
  void operator()(stbi_uc* p) const { stbi_image_free(p); }
};
using StbPixels = std::unique_ptr<stbi_uc, StbFree>;

std::string stbReason() {
  const char* reason = stbi_failure_reason();  // thread-local in stb_image >= 2.26
  return reason ? reason : "unknown error";
}

/// Decodes `path` into interleaved pixels with `channels` channels; null with `error` set on failure.
StbPixels decode(const std::string& path, int64_t channels, int& width, int& height, std::string& error) {
  int fileChannels = 0;
  StbPixels pixels(stbi_load(path.c_str(), &width, &height, &fileChannels, static_cast<int>(channels)));
  if (!pixels) error = stbReason();
  return pixels;
}

std::string lowerExtension(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext;
}

bool isImageFile(const fs::directory_entry& entry) {
  std::error_code ec;
  if (!entry.is_regular_file(ec)) return false;
  const std::string ext = lowerExtension(entry.path());
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

bool hidden(const fs::path& p) { return p.filename().string().rfind('.', 0) == 0; }

/// Runs fn(i) for i in [0, n) on up to 8 threads; fn must not throw.
template <typename Fn>
void parallelFor(size_t n, Fn fn) {
  const size_t threads = std::min<size_t>({n, std::max(1u, std::thread::hardware_concurrency()), 8});
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.push_back(detail::startThread([&] {
      for (size_t i = next++; i < n; i = next++) fn(i);
    }));
  }
  for (auto& thread : pool) thread.join();
}

std::string badImageError(const std::string& path, const std::string& reason) {
  return fmt::format(
      "{}: cannot decode the image: {} (stb_image); fix or remove the file, or open the folder "
      "with ImageFolderOptions::onBadImage = BadImagePolicy::kSkip to leave such files out",
      path, reason);
}

/// The checks on `root` itself: it must exist and be a directory.
void checkRootFolder(const std::string& root) {
  std::error_code ec;
  const auto rootStatus = fs::status(root, ec);
  if (!fs::exists(rootStatus)) throw Error(fmt::format("image folder {} does not exist", root));
  if (!fs::is_directory(rootStatus)) {
    throw Error(fmt::format("image folder {} is not a directory (expected {}/<class>/<image>.png)", root, root));
  }
}

/// The class subdirectories of `root`, sorted by name: their index is the label.
std::vector<fs::path> listClassDirs(const std::string& root) {
  std::error_code ec;
  std::vector<fs::path> classDirs;
  int64_t loose = 0;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (hidden(it->path())) continue;
    std::error_code dirEc;
    if (it->is_directory(dirEc)) {
      classDirs.push_back(it->path());
    } else if (isImageFile(*it)) {
      ++loose;
    }
  }
  if (ec) throw Error(fmt::format("image folder {}: cannot list it: {}", root, ec.message()));
  if (classDirs.empty()) {
    throw Error(fmt::format(
        "image folder {} has no class subdirectories (expected {}/<class>/<image>.png|jpg|jpeg){}", root, root,
        loose > 0 ? fmt::format("; it holds {} images directly: put them in one folder per class", loose) : ""));
  }
  std::sort(classDirs.begin(), classDirs.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  return classDirs;
}

/// Appends every image of every class to `files` (sorted within a class) with its label to `labels`,
/// and each class's name to `classNames`. A class without images throws.
void listImages(const std::string& root, const std::vector<fs::path>& classDirs, std::vector<std::string>& files,
                std::vector<int64_t>& labels, std::vector<std::string>& classNames) {
  std::error_code ec;
  for (size_t label = 0; label < classDirs.size(); ++label) {
    std::vector<std::string> classFiles;
    for (fs::directory_iterator it(classDirs[label], ec), end; !ec && it != end; it.increment(ec)) {
      if (!hidden(it->path()) && isImageFile(*it)) classFiles.push_back(it->path().string());
    }
    if (ec) throw Error(fmt::format("image folder: cannot list {}: {}", classDirs[label].string(), ec.message()));
    if (classFiles.empty()) {
      throw Error(
          fmt::format("class folder {} has no images (*.png, *.jpg, *.jpeg, any case); every subdirectory of "
                      "{} is a class: remove it or add images",
                      classDirs[label].string(), root));
    }
    std::sort(classFiles.begin(), classFiles.end());
    for (auto& f : classFiles) {
      files.push_back(std::move(f));
      labels.push_back(static_cast<int64_t>(label));
    }
    classNames.push_back(classDirs[label].filename().string());
  }
}

/// What open() learns of one file: its size, stb_image's reason when it cannot be read, its pixels when caching.
struct Probe {
  int width = 0;
  int height = 0;
  std::string error;
  std::vector<uint8_t> planar;  // only when caching
};

/// Every file's size (and with kSkip or the cache, its pixels) at once, in parallel.
std::vector<Probe> probeImages(const std::vector<std::string>& files, const ImageFolderOptions& options) {
  const bool resize = options.resizeHeight > 0;
  const bool fullDecode = options.onBadImage == BadImagePolicy::kSkip || options.cacheDecoded;
  std::vector<Probe> probes(files.size());
  parallelFor(files.size(), [&](size_t i) {
    Probe& probe = probes[i];
    if (!fullDecode) {
      int fileChannels = 0;
      if (!stbi_info(files[i].c_str(), &probe.width, &probe.height, &fileChannels)) probe.error = stbReason();
      return;
    }
    StbPixels pixels = decode(files[i], options.channels, probe.width, probe.height, probe.error);
    if (!pixels || !options.cacheDecoded) return;
    const int64_t outH = resize ? options.resizeHeight : probe.height;
    const int64_t outW = resize ? options.resizeWidth : probe.width;
    probe.planar.resize(static_cast<size_t>(options.channels * outH * outW));
    resizeBilinearToPlanar(pixels.get(), probe.height, probe.width, options.channels, outH, outW, probe.planar.data());
  });
  return probes;
}

/// The indices of the files that could be read. An unreadable file throws under kAbort and is
/// appended to `skipped` under kSkip; a class left without images throws.
std::vector<size_t> keepDecodable(const std::vector<std::string>& files, const std::vector<int64_t>& labels,
                                  const std::vector<Probe>& probes, const std::vector<fs::path>& classDirs,
                                  const ImageFolderOptions& options, std::vector<std::string>& skipped) {
  std::vector<size_t> kept;
  std::vector<int64_t> perClass(classDirs.size(), 0);
  for (size_t i = 0; i < files.size(); ++i) {
    if (probes[i].error.empty()) {
      kept.push_back(i);
      ++perClass[static_cast<size_t>(labels[i])];
    } else if (options.onBadImage == BadImagePolicy::kAbort) {
      throw Error(badImageError(files[i], probes[i].error));
    } else {
      skipped.push_back(files[i]);
    }
  }
  for (size_t label = 0; label < classDirs.size(); ++label) {
    if (perClass[label] == 0) {
      throw Error(
          fmt::format("class folder {} has no decodable image: all its images were skipped as unreadable "
                      "(BadImagePolicy::kSkip)",
                      classDirs[label].string()));
    }
  }
  return kept;
}

/// The shape of every sample: the resize target, or else the one size all `kept` files must share.
ImageShape sampleShape(const std::vector<std::string>& files, const std::vector<Probe>& probes,
                       const std::vector<size_t>& kept, const ImageFolderOptions& options) {
  ImageShape shape;
  shape.channels = options.channels;
  if (options.resizeHeight > 0) {
    shape.height = options.resizeHeight;
    shape.width = options.resizeWidth;
    return shape;
  }
  // The most common size is the reference (the first one seen on a tie); the first file off it is named.
  std::map<std::pair<int, int>, size_t> counts;
  for (size_t i : kept) ++counts[{probes[i].height, probes[i].width}];
  size_t ref = kept.front();
  for (size_t i : kept) {
    if (counts[{probes[i].height, probes[i].width}] > counts[{probes[ref].height, probes[ref].width}]) ref = i;
  }
  const int refH = probes[ref].height, refW = probes[ref].width;
  for (size_t i : kept) {
    if (probes[i].height != refH || probes[i].width != refW) {
      throw Error(fmt::format(
          "{}: image is {}x{} (height x width) but {} of the {} images are {}x{} (e.g. {}); "
          "without resizing all images must have one size: set ImageFolderOptions "
          "resizeHeight and resizeWidth",
          files[i], probes[i].height, probes[i].width, counts[{refH, refW}], kept.size(), refH, refW, files[ref]));
    }
  }
  shape.height = refH;
  shape.width = refW;
  return shape;
}

}  // namespace

std::shared_ptr<ImageFolderDataset> ImageFolderDataset::open(const std::string& root,
                                                             const ImageFolderOptions& options) {
  LOCKSTEP_CHECK(options.channels == 1 || options.channels == 3, "ImageFolderOptions.channels = ", options.channels,
                 ", expected 1 (grey) or 3 (RGB)");
  LOCKSTEP_CHECK(options.resizeHeight >= 0 && options.resizeWidth >= 0 &&
                     (options.resizeHeight == 0) == (options.resizeWidth == 0),
                 "ImageFolderOptions.resizeHeight = ", options.resizeHeight, ", resizeWidth = ", options.resizeWidth,
                 ", expected both 0 (no resize) or both > 0");
  checkRootFolder(root);

  std::shared_ptr<ImageFolderDataset> ds(new ImageFolderDataset());
  ds->root_ = root;
  ds->options_ = options;

  const std::vector<fs::path> classDirs = listClassDirs(root);
  std::vector<std::string> files;
  std::vector<int64_t> labels;
  listImages(root, classDirs, files, labels, ds->classNames_);
  std::vector<Probe> probes = probeImages(files, options);
  const std::vector<size_t> kept = keepDecodable(files, labels, probes, classDirs, options, ds->skippedFiles_);
  ds->shape_ = sampleShape(files, probes, kept, options);

  for (size_t i : kept) {
    ds->files_.push_back(std::move(files[i]));
    ds->labels_.push_back(labels[i]);
    if (options.cacheDecoded) ds->cache_.push_back(std::move(probes[i].planar));
  }
  return ds;
}

int64_t ImageFolderDataset::size() const { return static_cast<int64_t>(files_.size()); }
int64_t ImageFolderDataset::numClasses() const { return static_cast<int64_t>(classNames_.size()); }
std::vector<std::string> ImageFolderDataset::classNames() const { return classNames_; }
ImageShape ImageFolderDataset::shape() const { return shape_; }

const std::string& ImageFolderDataset::filePath(int64_t index) const {
  if (index < 0 || index >= size()) {
    throw Error(fmt::format("image folder {}: sample index {} out of range [0, {})", root_, index, size()));
  }
  return files_[static_cast<size_t>(index)];
}

std::pair<at::Tensor, int64_t> ImageFolderDataset::get(int64_t index) const {
  const std::string& path = filePath(index);
  const auto i = static_cast<size_t>(index);
  at::Tensor image = at::empty({shape_.channels, shape_.height, shape_.width}, at::kByte);
  auto* out = image.data_ptr<uint8_t>();
  if (options_.cacheDecoded) {
    std::memcpy(out, cache_[i].data(), cache_[i].size());
    return {std::move(image), labels_[i]};
  }
  int width = 0, height = 0;
  std::string error;
  StbPixels pixels = decode(path, shape_.channels, width, height, error);
  if (!pixels) throw Error(badImageError(path, error));
  if (options_.resizeHeight == 0 && (height != shape_.height || width != shape_.width)) {
    throw Error(fmt::format("{}: image is now {}x{} (height x width), it was {}x{} when the folder was opened", path,
                            height, width, shape_.height, shape_.width));
  }
  resizeBilinearToPlanar(pixels.get(), height, width, shape_.channels, shape_.height, shape_.width, out);
  return {std::move(image), labels_[i]};
}

std::string ImageFolderDataset::description() const {
  std::string notes;
  if (options_.resizeHeight > 0) notes += fmt::format(", resized to {}x{}", shape_.height, shape_.width);
  if (!skippedFiles_.empty()) notes += fmt::format(", {} unreadable files skipped", skippedFiles_.size());
  if (options_.cacheDecoded) notes += ", decoded in memory";
  return fmt::format("image folder ({} images {}x{}x{}, {} classes{}) from {}", size(), shape_.channels, shape_.height,
                     shape_.width, numClasses(), notes, root_);
}

}  // namespace lockstep
