// lockstep/data/image_dataset.h — image classification datasets: IDX (MNIST,
// Fashion-MNIST), CIFAR-10 binary batches, and folders of PNG/JPEG files.
//
// Contract:
// - A dataset is opened once (open* / ImageFolderDataset::open) and is then
//   immutable: every method is const and get() may be called from any number
//   of threads at once (data-loader threads) without locking. get() returns a
//   fresh uint8 tensor [C, H, W] (contiguous, CPU) that the caller owns; it
//   never aliases the dataset's memory, so writing into it is harmless.
// - Sample order is fixed by the files: IDX and CIFAR in file order (CIFAR's
//   train batches 1..5 one after the other), image folders class by class
//   (classes = subdirectory names in byte order), files in byte order within
//   a class. The same files always give the same indices on every rank.
// - Every problem with the data is a lockstep::Error whose message names the
//   file (or folder) and what was wrong: bad magic numbers, truncation, count
//   mismatches, labels out of range, undecodable images (stb_image's reason),
//   missing files (with the package or layout that provides them). A missing
//   Debian data file says which package and that scripts/setup.sh installs it.
// - Memory: IDX and CIFAR load every image at open (Fashion-MNIST train:
//   47 MB). An image folder keeps only its file list unless cacheDecoded.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lockstep {

struct ImageShape {
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
};

/// What an image folder does with a file that cannot be decoded.
enum class BadImagePolicy {
  kAbort,  ///< throw lockstep::Error naming the file and stb_image's reason
  kSkip,   ///< leave it out (found at open: every file is decoded once), count it
};

/// An image classification dataset. get() is thread-safe (called from loader threads).
class ImageDataset {
 public:
  virtual ~ImageDataset() = default;
  /// Number of samples.
  virtual int64_t size() const = 0;
  virtual int64_t numClasses() const = 0;
  /// numClasses() names: "0".."K-1" for a plain IDX file (the format has none), the
  /// real names for Fashion-MNIST and CIFAR-10, the subdirectory names for a folder.
  virtual std::vector<std::string> classNames() const = 0;
  /// Every image has this shape after decoding (and resize).
  virtual ImageShape shape() const = 0;
  /// Sample `index` as uint8 [C, H, W] (contiguous) and its label in [0, numClasses).
  /// An index outside [0, size()) throws lockstep::Error.
  virtual std::pair<at::Tensor, int64_t> get(int64_t index) const = 0;
  /// One line for logs, e.g. "Fashion-MNIST train (60000 images 1x28x28, 10 classes) from /usr/share/...".
  virtual std::string description() const = 0;
};

/// IDX files (MNIST and Fashion-MNIST share the format), gzip-compressed (".gz") or raw
/// (detected from the content, not the name). Loads everything into memory.
/// Images: magic 0x00000803 (unsigned bytes, 3 dimensions N x H x W), one channel.
/// Labels: magic 0x00000801 (unsigned bytes, 1 dimension N). numClasses() is the largest
/// label + 1 and classNames() are "0".."K-1".
std::shared_ptr<ImageDataset> openIdx(const std::string& imagesPath, const std::string& labelsPath,
                                      const std::string& name = "IDX");

/// Debian's copy of Fashion-MNIST (package dataset-fashion-mnist).
inline constexpr const char* kDefaultFashionMnistRoot = "/usr/share/datasets/fashion-mnist";
/// Fashion-MNIST from `root` (empty: kDefaultFashionMnistRoot): train (60k) or test (t10k, 10k).
/// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or the same names without .gz).
/// 10 classes named "T-shirt/top", "Trouser", ..., "Ankle boot"; a label >= 10 is an error.
std::shared_ptr<ImageDataset> openFashionMnist(const std::string& root, bool train);
/// MNIST laid out the same way (train-images-idx3-ubyte[.gz] ... in root); classes "0".."9".
std::shared_ptr<ImageDataset> openMnist(const std::string& root, bool train);

/// CIFAR-10 binary version: root/data_batch_1.bin .. data_batch_5.bin (train) or root/test_batch.bin (test);
/// each record = 1 label byte + 3072 bytes (1024 R, 1024 G, 1024 B, row-major 32x32). Class names from
/// root/batches.meta.txt if present (its non-empty lines, exactly 10), else CIFAR-10's standard names
/// (airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck).
/// Train reads data_batch_1.bin, data_batch_2.bin, ... up to the first missing one (at least the first
/// must exist; a later batch after a gap is an error), so a subset of the batches works too.
std::shared_ptr<ImageDataset> openCifar10(const std::string& root, bool train);

struct ImageFolderOptions {
  /// 0 with resizeWidth 0: no resize (then all images must share one size, else an error naming the odd file).
  int64_t resizeHeight = 0;
  int64_t resizeWidth = 0;
  int64_t channels = 3;  ///< 1 (grey) or 3 (RGB): images are converted
  BadImagePolicy onBadImage = BadImagePolicy::kAbort;
  /// Files decoded once at open? false = decode lazily in get() (big datasets). Default false.
  bool cacheDecoded = false;
};

/// root/<class>/<image>: classes = subdirectory names sorted (hidden ones, starting with '.', are
/// ignored); images = *.png, *.jpg, *.jpeg (case-insensitive) directly in a class folder, sorted per
/// class; other files are ignored. PNG and JPEG are decoded with stb_image (converted to `channels`:
/// grey = stb's luminance, alpha dropped) and resized with bilinear interpolation (half-pixel centres,
/// no antialiasing: PyTorch's interpolate(mode="bilinear", align_corners=False)), rounded to nearest.
///
/// At open every file's header is read (stbi_info) so that sizes are known: with kAbort a file whose
/// header is bad is an error there, and one whose pixel data is bad is an error in get() (or at open
/// with cacheDecoded). With kSkip every file is decoded once at open; undecodable ones are left out
/// and listed in skippedFiles(). A class folder with no (usable) image, a missing root, or a root
/// without class folders is an error naming the folder.
class ImageFolderDataset : public ImageDataset {
 public:
  static std::shared_ptr<ImageFolderDataset> open(const std::string& root, const ImageFolderOptions& options);

  int64_t size() const override;
  int64_t numClasses() const override;
  std::vector<std::string> classNames() const override;
  ImageShape shape() const override;
  std::pair<at::Tensor, int64_t> get(int64_t index) const override;
  std::string description() const override;

  /// Files left out under BadImagePolicy::kSkip (0 with kAbort).
  int64_t skippedCount() const { return static_cast<int64_t>(skippedFiles_.size()); }
  /// Their paths, in the order found (class by class, sorted).
  const std::vector<std::string>& skippedFiles() const { return skippedFiles_; }
  /// The path of sample `index`.
  const std::string& filePath(int64_t index) const;
  const ImageFolderOptions& options() const { return options_; }

 private:
  ImageFolderDataset() = default;

  std::string root_;
  ImageFolderOptions options_;
  ImageShape shape_;
  std::vector<std::string> classNames_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
  std::vector<std::string> skippedFiles_;
  /// With cacheDecoded: sample i's C * H * W bytes, [C, H, W]; empty otherwise.
  std::vector<std::vector<uint8_t>> cache_;
};

}  // namespace lockstep
