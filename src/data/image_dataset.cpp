// In-memory image datasets: IDX (MNIST, Fashion-MNIST) and CIFAR-10 binary
// batches. The image folder is in image_folder.cpp (it alone compiles stb_image).
#include "lockstep/data/image_dataset.h"

#include <ATen/ops/empty.h>  // the one op used: cheaper to compile than <ATen/ATen.h>
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "lockstep/common/error.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned bytes (0x08), 3 dimensions
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned bytes (0x08), 1 dimension
constexpr int64_t kIdxImagesHeader = 16;          // magic, count, rows, columns
constexpr int64_t kIdxLabelsHeader = 8;           // magic, count

constexpr int64_t kCifarSide = 32;
constexpr int64_t kCifarPixels = 3 * kCifarSide * kCifarSide;  // 3072: R plane, G plane, B plane
constexpr int64_t kCifarRecord = 1 + kCifarPixels;             // 3073: label byte first
constexpr int kCifarTrainBatches = 5;

const std::vector<std::string> kCifar10Names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                "dog",      "frog",       "horse", "ship", "truck"};
// The Fashion-MNIST README's label table.
const std::vector<std::string> kFashionMnistNames = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                     "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

std::vector<std::string> numberedNames(int64_t count) {
  std::vector<std::string> names;
  for (int64_t k = 0; k < count; ++k) names.push_back(std::to_string(k));
  return names;
}

/// Images held in one buffer, sample i at pixels_[offset_ + i * C*H*W], already [C, H, W].
class InMemoryImageDataset final : public ImageDataset {
 public:
  InMemoryImageDataset(std::vector<uint8_t> pixels, int64_t offset, std::vector<uint8_t> labels, ImageShape shape,
                       std::vector<std::string> classNames, std::string name, std::string source)
      : pixels_(std::move(pixels)), offset_(offset), labels_(std::move(labels)), shape_(shape),
        classNames_(std::move(classNames)), name_(std::move(name)), source_(std::move(source)) {}

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  int64_t numClasses() const override { return static_cast<int64_t>(classNames_.size()); }
  std::vector<std::string> classNames() const override { return classNames_; }
  ImageShape shape() const override { return shape_; }

  std::pair<at::Tensor, int64_t> get(int64_t index) const override {
    if (index < 0 || index >= size()) {
      throw Error(fmt::format("{}: sample index {} out of range [0, {})", name_, index, size()));
    }
    const int64_t bytes = shape_.channels * shape_.height * shape_.width;
    at::Tensor image = at::empty({shape_.channels, shape_.height, shape_.width}, at::kByte);
    std::memcpy(image.data_ptr<uint8_t>(), pixels_.data() + offset_ + index * bytes, static_cast<size_t>(bytes));
    return {std::move(image), static_cast<int64_t>(labels_[static_cast<size_t>(index)])};
  }

  std::string description() const override {
    return fmt::format("{} ({} images {}x{}x{}, {} classes) from {}", name_, size(), shape_.channels, shape_.height,
                       shape_.width, numClasses(), source_);
  }

 private:
  std::vector<uint8_t> pixels_;
  int64_t offset_;
  std::vector<uint8_t> labels_;
  ImageShape shape_;
  std::vector<std::string> classNames_;
  std::string name_;
  std::string source_;
};

void requireFile(const std::string& path, const std::string& what, const std::string& hint) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) throw Error(fmt::format("{}: {} not found{}", what, path, hint));
  if (fs::is_directory(status)) throw Error(fmt::format("{}: {} is a directory, expected a file", what, path));
}

// ---- IDX --------------------------------------------------------------------

/// The decompressed bytes of a gzip or raw file (zlib reads both), and zlib's
/// complaint if the gzip stream broke off or is corrupt (the bytes read before it are kept).
struct RawFile {
  std::vector<uint8_t> bytes;
  std::string zlibError;
};

/// zlib's message without the "path: " it starts with.
std::string zlibMessage(gzFile file, const std::string& path) {
  int code = 0;
  std::string message = gzerror(file, &code);
  if (message.rfind(path + ": ", 0) == 0) message.erase(0, path.size() + 2);
  return message.empty() ? fmt::format("zlib error {}", code) : message;
}

/// The size of the file's content: for gzip the trailer's ISIZE (the uncompressed size modulo 2^32, of
/// the last member) when it is larger than the file, else the file size. A hint: reading grows as needed.
size_t expectedSize(const std::string& path) {
  std::error_code ec;
  const uintmax_t diskSize = fs::file_size(path, ec);
  if (ec) return size_t{1} << 20;
  std::ifstream in(path, std::ios::binary);
  unsigned char head[2] = {0, 0};
  unsigned char tail[4] = {0, 0, 0, 0};
  if (diskSize >= 18 && in.read(reinterpret_cast<char*>(head), 2) && head[0] == 0x1f && head[1] == 0x8b &&
      in.seekg(-4, std::ios::end) && in.read(reinterpret_cast<char*>(tail), 4)) {
    const uintmax_t isize =
        uintmax_t{tail[0]} | (uintmax_t{tail[1]} << 8) | (uintmax_t{tail[2]} << 16) | (uintmax_t{tail[3]} << 24);
    // Deflate cannot compress more than ~1032:1, so a larger ISIZE is garbage: ignore it.
    return static_cast<size_t>(isize <= diskSize * 1032 ? std::max(diskSize, isize) : diskSize);
  }
  return static_cast<size_t>(diskSize);
}

RawFile readMaybeGzip(const std::string& path, const std::string& what) {
  requireFile(path, what, "");
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw Error(fmt::format("{}: cannot open {}: {}", what, path, std::strerror(errno)));
  std::unique_ptr<gzFile_s, int (*)(gzFile)> closer(file, gzclose);
  gzbuffer(file, 1 << 17);
  RawFile out;
  // One spare byte past the expected size, so that reading the end needs no reallocation.
  out.bytes.resize(expectedSize(path) + 1);
  size_t used = 0;
  for (;;) {
    if (used == out.bytes.size()) out.bytes.resize(out.bytes.size() * 2);
    const size_t want = std::min<size_t>(out.bytes.size() - used, 1u << 30);
    const int got = gzread(file, out.bytes.data() + used, static_cast<unsigned>(want));
    if (got < 0) {
      out.zlibError = zlibMessage(file, path);
      break;
    }
    if (got == 0) {
      int code = 0;
      gzerror(file, &code);
      if (code != Z_OK && code != Z_STREAM_END) out.zlibError = zlibMessage(file, path);
      break;
    }
    used += static_cast<size_t>(got);
  }
  out.bytes.resize(used);
  if (out.bytes.capacity() > used + used / 4) out.bytes.shrink_to_fit();
  return out;
}

uint32_t bigEndian32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) | uint32_t{b[at + 3]};
}

std::string zlibNote(const RawFile& raw) {
  return raw.zlibError.empty() ? std::string() : fmt::format(" (gzip: {})", raw.zlibError);
}

/// Checks the header of an IDX file and that it holds exactly header + count * itemBytes bytes.
/// Returns the dimensions after the magic number (count first).
std::vector<uint32_t> checkIdx(const RawFile& raw, const std::string& path, uint32_t magic, int64_t headerBytes,
                               const char* kind) {
  const auto& b = raw.bytes;
  const int dims = static_cast<int>(magic & 0xFF);
  auto truncatedHeader = [&] {
    return Error(fmt::format("{}: truncated at byte {} of the {}-byte IDX {} header{}", path, b.size(), headerBytes,
                             kind, zlibNote(raw)));
  };
  // The magic number before the header's length: a short file of the other kind (labels for images) should say so.
  if (b.size() < 4) throw truncatedHeader();
  const uint32_t found = bigEndian32(b, 0);
  if (found != magic) {
    std::string hint;
    if (found == kIdxImagesMagic || found == kIdxLabelsMagic) {
      hint = "; this is an IDX " + std::string(found == kIdxImagesMagic ? "images" : "labels") +
             " file: are the images and labels files swapped?";
    } else if ((found >> 16) != 0) {
      hint = "; not an IDX file (an IDX file starts with two zero bytes)";
    }
    throw Error(
        fmt::format("{}: bad magic number 0x{:08x}, expected 0x{:08x} (IDX {} of unsigned bytes, {} "
                    "dimension{}){}",
                    path, found, magic, kind, dims, dims == 1 ? "" : "s", hint));
  }
  if (static_cast<int64_t>(b.size()) < headerBytes) throw truncatedHeader();
  std::vector<uint32_t> sizes;
  for (int d = 0; d < dims; ++d) sizes.push_back(bigEndian32(b, 4 + 4 * static_cast<size_t>(d)));
  return sizes;
}

void checkIdxLength(const RawFile& raw, const std::string& path, uint64_t expected, const std::string& says) {
  const uint64_t have = raw.bytes.size();
  if (have < expected) {
    throw Error(fmt::format("{}: truncated at byte {} of {} expected (header says {}){}", path, have, expected, says,
                            zlibNote(raw)));
  }
  if (!raw.zlibError.empty()) throw Error(fmt::format("{}: corrupt gzip data: {}", path, raw.zlibError));
  if (have > expected) {
    throw Error(fmt::format("{}: {} bytes, expected {} (header says {}): {} unexpected bytes at the end", path, have,
                            expected, says, have - expected));
  }
}

/// classNames empty: "0".."max label"; otherwise every label must index it.
std::shared_ptr<ImageDataset> loadIdx(const std::string& imagesPath, const std::string& labelsPath,
                                      const std::string& name, std::vector<std::string> classNames,
                                      const std::string& source) {
  RawFile images = readMaybeGzip(imagesPath, name);
  const auto imageDims = checkIdx(images, imagesPath, kIdxImagesMagic, kIdxImagesHeader, "images");
  const uint64_t count = imageDims[0], rows = imageDims[1], cols = imageDims[2];
  const std::string says = fmt::format("{} images of {}x{}", count, rows, cols);
  if (rows == 0 || cols == 0) throw Error(fmt::format("{}: images of {}x{} pixels (header)", imagesPath, rows, cols));
  checkIdxLength(images, imagesPath, kIdxImagesHeader + count * rows * cols, says);

  RawFile labels = readMaybeGzip(labelsPath, name);
  const auto labelDims = checkIdx(labels, labelsPath, kIdxLabelsMagic, kIdxLabelsHeader, "labels");
  if (labelDims[0] != count) {
    throw Error(fmt::format("{} has {} images but {} has {} labels; expected one label per image", imagesPath, count,
                            labelsPath, labelDims[0]));
  }
  checkIdxLength(labels, labelsPath, kIdxLabelsHeader + count, fmt::format("{} labels", count));
  labels.bytes.erase(labels.bytes.begin(), labels.bytes.begin() + kIdxLabelsHeader);

  if (classNames.empty()) {
    const uint8_t top = labels.bytes.empty() ? 0 : *std::max_element(labels.bytes.begin(), labels.bytes.end());
    classNames = numberedNames(int64_t{top} + 1);
  } else {
    for (size_t i = 0; i < labels.bytes.size(); ++i) {
      if (labels.bytes[i] >= classNames.size()) {
        throw Error(fmt::format("{}: label {} of sample {} is out of range, expected 0..{} ({} classes)", labelsPath,
                                labels.bytes[i], i, classNames.size() - 1, classNames.size()));
      }
    }
  }
  const ImageShape shape{1, static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
  return std::make_shared<InMemoryImageDataset>(std::move(images.bytes), kIdxImagesHeader, std::move(labels.bytes),
                                                shape, std::move(classNames), name, source);
}

/// root/stem.gz, else root/stem; neither: an error naming both and `hint`.
std::string findIdxFile(const std::string& root, const std::string& stem, const std::string& name,
                        const std::string& hint) {
  const fs::path gz = fs::path(root) / (stem + ".gz");
  const fs::path raw = fs::path(root) / stem;
  std::error_code ec;
  if (fs::exists(gz, ec)) return gz.string();
  if (fs::exists(raw, ec)) return raw.string();
  throw Error(fmt::format("{}: {} not found (nor {}){}", name, gz.string(), raw.string(), hint));
}

std::shared_ptr<ImageDataset> openMnistLayout(const std::string& root, bool train, const std::string& family,
                                              std::vector<std::string> classNames, const std::string& hint) {
  const std::string split = train ? "train" : "t10k";
  const std::string name = fmt::format("{} {}", family, train ? "train" : "test");
  const std::string images = findIdxFile(root, split + "-images-idx3-ubyte", name, hint);
  const std::string labels = findIdxFile(root, split + "-labels-idx1-ubyte", name, hint);
  return loadIdx(images, labels, name, std::move(classNames), root);
}

// ---- CIFAR-10 -----------------------------------------------------------------

std::vector<uint8_t> readBinary(const std::string& path, const std::string& what, const std::string& hint) {
  requireFile(path, what, hint);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot read {}: {}", what, path, std::strerror(errno)));
  std::vector<uint8_t> bytes(static_cast<size_t>(fs::file_size(path)));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(bytes.size())) {
    throw Error(fmt::format("{}: read {} of {} bytes of {}", what, in.gcount(), bytes.size(), path));
  }
  return bytes;
}

std::vector<std::string> cifarClassNames(const std::string& root) {
  const fs::path meta = fs::path(root) / "batches.meta.txt";
  std::error_code ec;
  if (!fs::exists(meta, ec)) return kCifar10Names;
  std::ifstream in(meta);
  if (!in) throw Error(fmt::format("CIFAR-10: cannot read {}", meta.string()));
  std::vector<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    const auto last = line.find_last_not_of(" \t\r");
    names.push_back(line.substr(first, last - first + 1));
  }
  if (names.size() != kCifar10Names.size()) {
    throw Error(
        fmt::format("{}: {} class names (non-empty lines), expected {}; remove the file to use CIFAR-10's "
                    "standard names",
                    meta.string(), names.size(), kCifar10Names.size()));
  }
  return names;
}

}  // namespace

std::shared_ptr<ImageDataset> openIdx(const std::string& imagesPath, const std::string& labelsPath,
                                      const std::string& name) {
  return loadIdx(imagesPath, labelsPath, name, {}, imagesPath + " + " + labelsPath);
}

std::shared_ptr<ImageDataset> openFashionMnist(const std::string& root, bool train) {
  const std::string dir = root.empty() ? std::string(kDefaultFashionMnistRoot) : root;
  return openMnistLayout(dir, train, "Fashion-MNIST", kFashionMnistNames,
                         "; the Debian package dataset-fashion-mnist provides it in " +
                             std::string(kDefaultFashionMnistRoot) +
                             ": install it with scripts/setup.sh (or apt-get install dataset-fashion-mnist)");
}

std::shared_ptr<ImageDataset> openMnist(const std::string& root, bool train) {
  return openMnistLayout(root, train, "MNIST", numberedNames(10),
                         "; expected MNIST's four IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                         "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, gzip-compressed or not) in that folder");
}

std::shared_ptr<ImageDataset> openCifar10(const std::string& root, bool train) {
  const std::string name = train ? "CIFAR-10 train" : "CIFAR-10 test";
  const std::string hint =
      "; expected the binary version of CIFAR-10 (the folder cifar-10-batches-bin: data_batch_1.bin .. "
      "data_batch_5.bin, test_batch.bin, batches.meta.txt)";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw Error(fmt::format("{}: folder {} not found{}", name, root, hint));

  std::vector<std::string> files;
  if (train) {
    for (int k = 1; k <= kCifarTrainBatches; ++k) {
      const std::string path = (fs::path(root) / fmt::format("data_batch_{}.bin", k)).string();
      if (fs::exists(path, ec)) {
        if (static_cast<int>(files.size()) != k - 1) {
          throw Error(
              fmt::format("{}: {} exists but data_batch_{}.bin is missing in {}", name, path, files.size() + 1, root));
        }
        files.push_back(path);
      }
    }
    if (files.empty()) requireFile((fs::path(root) / "data_batch_1.bin").string(), name, hint);
  } else {
    files.push_back((fs::path(root) / "test_batch.bin").string());
  }

  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels;
  for (const auto& path : files) {
    const std::vector<uint8_t> bytes = readBinary(path, name, hint);
    if (bytes.empty() || bytes.size() % kCifarRecord != 0) {
      throw Error(
          fmt::format("{}: {} bytes, not a positive multiple of {} (a CIFAR-10 record is 1 label byte + {} "
                      "pixel bytes); a truncated download or not the binary version?",
                      path, bytes.size(), kCifarRecord, kCifarPixels));
    }
    const size_t records = bytes.size() / kCifarRecord;
    pixels.reserve(pixels.size() + records * kCifarPixels);
    for (size_t r = 0; r < records; ++r) {
      const uint8_t* record = bytes.data() + r * kCifarRecord;
      if (record[0] >= kCifar10Names.size()) {
        throw Error(fmt::format("{}: record {} (byte {}) has label {}, expected 0..{}", path, r, r * kCifarRecord,
                                record[0], kCifar10Names.size() - 1));
      }
      labels.push_back(record[0]);
      pixels.insert(pixels.end(), record + 1, record + kCifarRecord);
    }
  }
  std::string source = root;
  if (train) {
    source += files.size() == 1 ? " (data_batch_1.bin)" : fmt::format(" (data_batch_1..{}.bin)", files.size());
  } else {
    source += " (test_batch.bin)";
  }
  return std::make_shared<InMemoryImageDataset>(std::move(pixels), 0, std::move(labels),
                                                ImageShape{3, kCifarSide, kCifarSide}, cifarClassNames(root), name,
                                                source);
}

}  // namespace lockstep
