// Image datasets: the real Fashion-MNIST that scripts/setup.sh installs, and
// IDX, CIFAR-10 and image-folder files that the tests write themselves (IDX
// gzip with zlib, PNG/JPEG with stb_image_write), checked byte for byte.
#include <ATen/ops/empty.h>
#include <ATen/ops/upsample_bilinear2d.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "support/expect.h"
#include "lockstep/common/error.h"
#include "lockstep/data/image_dataset.h"

// The reference decoder and the writer; static, so they cannot clash with liblockstep's own copy.
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#include <stb/stb_image.h>
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

using test::errorOf;

/// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "lockstep_images_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

void writeFile(const std::string& path, const Bytes& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void writeGzip(const std::string& path, const Bytes& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

Bytes readGzip(const std::string& path) {
  Bytes out;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  std::array<uint8_t, 1 << 16> buf{};
  int n = 0;
  while ((n = gzread(f, buf.data(), buf.size())) > 0) out.insert(out.end(), buf.begin(), buf.begin() + n);
  gzclose(f);
  return out;
}

void putBigEndian(Bytes& b, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(v >> shift));
}

Bytes idxFile(uint32_t magic, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b;
  putBigEndian(b, magic);
  for (uint32_t d : dims) putBigEndian(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes tensorBytes(const at::Tensor& t) {
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.scalar_type(), at::kByte);
  const auto* p = t.data_ptr<uint8_t>();
  return Bytes(p, p + t.numel());
}

std::vector<int64_t> sizesOf(const at::Tensor& t) { return t.sizes().vec(); }

// ---- Fashion-MNIST, the real files ------------------------------------------

std::shared_ptr<ImageDataset> openRealFashion(bool train) {
  try {
    return openFashionMnist(kDefaultFashionMnistRoot, train);
  } catch (const Error& e) {
    ADD_FAILURE() << "cannot open Fashion-MNIST; run scripts/setup.sh (it installs dataset-fashion-mnist): "
                  << e.what();
    return nullptr;
  }
}

TEST(FashionMnist, TrainIs60000BalancedImages) {
  auto ds = openRealFashion(true);
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->size(), 60000);
  EXPECT_EQ(ds->numClasses(), 10);
  ASSERT_EQ(ds->classNames().size(), 10u);
  EXPECT_EQ(ds->classNames()[0], "T-shirt/top");
  EXPECT_EQ(ds->classNames()[9], "Ankle boot");
  const ImageShape s = ds->shape();
  EXPECT_EQ(s.channels, 1);
  EXPECT_EQ(s.height, 28);
  EXPECT_EQ(s.width, 28);
  EXPECT_HAS(ds->description(), "Fashion-MNIST train (60000 images 1x28x28, 10 classes)");
  EXPECT_HAS(ds->description(), kDefaultFashionMnistRoot);

  std::vector<int64_t> histogram(10, 0);
  uint64_t pixelSum = 0;
  for (int64_t i = 0; i < ds->size(); ++i) {
    auto [image, label] = ds->get(i);
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++histogram[static_cast<size_t>(label)];
    if (i % 1000 == 0) {
      EXPECT_EQ(sizesOf(image), (std::vector<int64_t>{1, 28, 28}));
      for (uint8_t v : tensorBytes(image)) pixelSum += v;
    }
  }
  EXPECT_EQ(histogram, std::vector<int64_t>(10, 6000));  // Fashion-MNIST's train set is balanced
  EXPECT_GT(pixelSum, 0u);
}

TEST(FashionMnist, TestIs10000BalancedImages) {
  auto ds = openRealFashion(false);
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->size(), 10000);
  EXPECT_EQ(ds->numClasses(), 10);
  std::vector<int64_t> histogram(10, 0);
  for (int64_t i = 0; i < ds->size(); ++i) ++histogram[static_cast<size_t>(ds->get(i).second)];
  EXPECT_EQ(histogram, std::vector<int64_t>(10, 1000));
  EXPECT_HAS(ds->description(), "Fashion-MNIST test (10000 images 1x28x28, 10 classes)");
}

TEST(FashionMnist, PixelsAndLabelsMatchTheDecompressedFiles) {
  auto ds = openRealFashion(true);
  ASSERT_NE(ds, nullptr);
  const std::string root = kDefaultFashionMnistRoot;
  const Bytes images = readGzip(root + "/train-images-idx3-ubyte.gz");
  const Bytes labels = readGzip(root + "/train-labels-idx1-ubyte.gz");
  ASSERT_EQ(images.size(), 16u + 60000u * 784u);
  ASSERT_EQ(labels.size(), 8u + 60000u);
  for (int64_t i : {0, 1, 12345, 59999}) {
    auto [image, label] = ds->get(i);
    const auto at = static_cast<size_t>(16 + i * 784);
    EXPECT_EQ(tensorBytes(image), Bytes(images.begin() + at, images.begin() + at + 784)) << "sample " << i;
    EXPECT_EQ(label, labels[static_cast<size_t>(8 + i)]) << "sample " << i;
  }
}

TEST(FashionMnist, GetReturnsAnOwnedCopy) {
  auto ds = openRealFashion(false);
  ASSERT_NE(ds, nullptr);
  auto first = ds->get(7).first;
  const Bytes before = tensorBytes(first);
  first.fill_(0);
  EXPECT_EQ(tensorBytes(ds->get(7).first), before);
  EXPECT_HAS(errorOf([&] { ds->get(10000); }), "index 10000 out of range [0, 10000)");
  EXPECT_HAS(errorOf([&] { ds->get(-1); }), "index -1");
}

TEST(FashionMnist, GetThroughputOneThread) {
  auto ds = openRealFashion(true);
  ASSERT_NE(ds, nullptr);
  constexpr int64_t kCalls = 200000;
  int64_t checksum = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < kCalls; ++k) checksum += ds->get((k * 7919) % ds->size()).second;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double rate = static_cast<double>(kCalls) / seconds;
  std::printf("[ info     ] Fashion-MNIST get(): %.0f calls/s on one thread (%.2f us per call)\n", rate,
              1e6 / rate);
  RecordProperty("get_per_second", static_cast<int>(rate));
  EXPECT_GT(checksum, 0);
}

TEST(FashionMnist, MissingFilesNameThePathAndThePackage) {
  TempDir dir;
  const std::string e = errorOf([&] { openFashionMnist(dir.str(), true); });
  EXPECT_HAS(e, dir / "train-images-idx3-ubyte.gz");
  EXPECT_HAS(e, "not found");
  EXPECT_HAS(e, "dataset-fashion-mnist");
  EXPECT_HAS(e, "scripts/setup.sh");
}

// ---- IDX files written here ---------------------------------------------------

struct SmallIdx {
  static constexpr uint32_t kCount = 5, kRows = 3, kCols = 4;
  Bytes pixels;
  Bytes labels{2, 0, 1, 2, 1};
  SmallIdx() {
    for (uint32_t k = 0; k < kCount * kRows * kCols; ++k) pixels.push_back(static_cast<uint8_t>((k * 37 + 11) % 256));
  }
  Bytes imagesFile() const { return idxFile(0x803, {kCount, kRows, kCols}, pixels); }
  Bytes labelsFile() const { return idxFile(0x801, {kCount}, labels); }
};

void expectSmallIdx(const ImageDataset& ds, const SmallIdx& ref) {
  ASSERT_EQ(ds.size(), 5);
  EXPECT_EQ(ds.shape().channels, 1);
  EXPECT_EQ(ds.shape().height, 3);
  EXPECT_EQ(ds.shape().width, 4);
  for (int64_t i = 0; i < 5; ++i) {
    auto [image, label] = ds.get(i);
    EXPECT_EQ(sizesOf(image), (std::vector<int64_t>{1, 3, 4}));
    EXPECT_EQ(tensorBytes(image), Bytes(ref.pixels.begin() + i * 12, ref.pixels.begin() + (i + 1) * 12));
    EXPECT_EQ(label, ref.labels[static_cast<size_t>(i)]);
  }
}

TEST(Idx, GzipAndRawDecodeExactly) {
  TempDir dir;
  SmallIdx ref;
  writeGzip(dir / "img.gz", ref.imagesFile());
  writeGzip(dir / "lbl.gz", ref.labelsFile());
  writeFile(dir / "img", ref.imagesFile());
  writeFile(dir / "lbl", ref.labelsFile());
  for (auto [images, labels] : {std::pair{"img.gz", "lbl.gz"}, std::pair{"img", "lbl"}, std::pair{"img", "lbl.gz"}}) {
    SCOPED_TRACE(images);
    auto ds = openIdx(dir / images, dir / labels, "tiny");
    expectSmallIdx(*ds, ref);
    EXPECT_EQ(ds->numClasses(), 3);  // largest label + 1
    EXPECT_EQ(ds->classNames(), (std::vector<std::string>{"0", "1", "2"}));
    EXPECT_HAS(ds->description(), "tiny (5 images 1x3x4, 3 classes) from " + (dir / images));
  }
}

TEST(Idx, MnistLayoutHasTenClasses) {
  TempDir dir;
  SmallIdx ref;
  writeGzip(dir / "train-images-idx3-ubyte.gz", ref.imagesFile());
  writeGzip(dir / "train-labels-idx1-ubyte.gz", ref.labelsFile());
  writeFile(dir / "t10k-images-idx3-ubyte", ref.imagesFile());  // raw works too
  writeFile(dir / "t10k-labels-idx1-ubyte", ref.labelsFile());
  for (bool train : {true, false}) {
    auto ds = openMnist(dir.str(), train);
    expectSmallIdx(*ds, ref);
    EXPECT_EQ(ds->numClasses(), 10);
    EXPECT_EQ(ds->classNames().front(), "0");
    EXPECT_EQ(ds->classNames().back(), "9");
    EXPECT_HAS(ds->description(), train ? "MNIST train" : "MNIST test");
  }
  auto fashion = openFashionMnist(dir.str(), true);
  expectSmallIdx(*fashion, ref);
  EXPECT_EQ(fashion->classNames()[1], "Trouser");
}

TEST(Idx, BadMagicNumber) {
  TempDir dir;
  SmallIdx ref;
  writeGzip(dir / "train-images-idx3-ubyte.gz", idxFile(0x802, {5, 3, 4}, ref.pixels));
  writeGzip(dir / "train-labels-idx1-ubyte.gz", ref.labelsFile());
  const std::string e = errorOf([&] { openMnist(dir.str(), true); });
  EXPECT_HAS(e, (dir / "train-images-idx3-ubyte.gz") +
                    ": bad magic number 0x00000802, expected 0x00000803 (IDX images of unsigned bytes, 3 dimensions)");
  // Images and labels swapped.
  const std::string swapped =
      errorOf([&] { openIdx(dir / "train-labels-idx1-ubyte.gz", dir / "train-images-idx3-ubyte.gz"); });
  EXPECT_HAS(swapped, "bad magic number 0x00000801, expected 0x00000803");
  EXPECT_HAS(swapped, "swapped");
}

TEST(Idx, TruncatedFiles) {
  TempDir dir;
  SmallIdx ref;
  Bytes cut = ref.imagesFile();
  cut.resize(50);  // header (16) + 34 of 60 pixel bytes
  writeFile(dir / "img", cut);
  writeGzip(dir / "img.gz", cut);
  writeFile(dir / "lbl", ref.labelsFile());
  for (const char* name : {"img", "img.gz"}) {
    const std::string e = errorOf([&] { openIdx(dir / name, dir / "lbl"); });
    EXPECT_HAS(e, (dir / name) + ": truncated at byte 50 of 76 expected (header says 5 images of 3x4)");
  }
  // A gzip stream that breaks off: the same message, plus zlib's.
  writeGzip(dir / "full.gz", ref.imagesFile());
  std::ifstream in(dir / "full.gz", std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  writeFile(dir / "half.gz", gz);
  const std::string e = errorOf([&] { openIdx(dir / "half.gz", dir / "lbl"); });
  EXPECT_HAS(e, (dir / "half.gz") + ": truncated");
  EXPECT_HAS(e, "gzip");
  // A header that is itself cut short.
  writeFile(dir / "tiny", Bytes{0, 0, 8, 3, 0});
  EXPECT_HAS(errorOf([&] { openIdx(dir / "tiny", dir / "lbl"); }),
             (dir / "tiny") + ": truncated at byte 5 of the 16-byte IDX images header");
  // Extra bytes at the end.
  Bytes longer = ref.imagesFile();
  longer.push_back(1);
  writeFile(dir / "long", longer);
  EXPECT_HAS(errorOf([&] { openIdx(dir / "long", dir / "lbl"); }), "1 unexpected bytes at the end");
}

TEST(Idx, CountMismatchNamesBothFiles) {
  TempDir dir;
  SmallIdx ref;
  writeFile(dir / "img", ref.imagesFile());
  writeFile(dir / "lbl", idxFile(0x801, {4}, {0, 1, 2, 3}));
  const std::string e = errorOf([&] { openIdx(dir / "img", dir / "lbl"); });
  EXPECT_HAS(e, (dir / "img") + " has 5 images");
  EXPECT_HAS(e, (dir / "lbl") + " has 4 labels");
}

TEST(Idx, LabelOutOfRangeForTenClasses) {
  TempDir dir;
  SmallIdx ref;
  writeFile(dir / "train-images-idx3-ubyte", ref.imagesFile());
  writeFile(dir / "train-labels-idx1-ubyte", idxFile(0x801, {5}, {0, 1, 2, 10, 4}));
  const std::string e = errorOf([&] { openFashionMnist(dir.str(), true); });
  EXPECT_HAS(e, (dir / "train-labels-idx1-ubyte") + ": label 10 of sample 3 is out of range, expected 0..9");
  EXPECT_HAS(errorOf([&] { openIdx(dir / "missing.gz", dir / "lbl"); }), (dir / "missing.gz") + " not found");
}

// ---- CIFAR-10 binary files written here -------------------------------------

constexpr size_t kRecord = 3073;

/// `count` records with labels label0, label0+1, ... (mod 10) and pixels from `seed`.
Bytes cifarRecords(int count, int label0, int seed) {
  Bytes b;
  for (int r = 0; r < count; ++r) {
    b.push_back(static_cast<uint8_t>((label0 + r) % 10));
    for (int p = 0; p < 3072; ++p) {
      const int channel = p / 1024;  // R plane, then G, then B
      b.push_back(static_cast<uint8_t>((seed * 53 + r * 29 + channel * 80 + p * 7) % 256));
    }
  }
  return b;
}

TEST(Cifar10, DecodesRecordsExactly) {
  TempDir dir;
  const Bytes b1 = cifarRecords(3, 7, 1), b2 = cifarRecords(2, 2, 2), test = cifarRecords(2, 5, 3);
  writeFile(dir / "data_batch_1.bin", b1);
  writeFile(dir / "data_batch_2.bin", b2);
  writeFile(dir / "test_batch.bin", test);
  const std::vector<std::string> names = {"a0", "b1", "c2", "d3", "e4", "f5", "g6", "h7", "i8", "j9"};
  std::string meta;
  for (const auto& n : names) meta += n + "\n";
  meta += "\n";  // the real file ends with a blank line
  writeFile(dir / "batches.meta.txt", Bytes(meta.begin(), meta.end()));

  auto train = openCifar10(dir.str(), true);
  ASSERT_EQ(train->size(), 5);
  EXPECT_EQ(train->numClasses(), 10);
  EXPECT_EQ(train->classNames(), names);
  EXPECT_EQ(train->shape().channels, 3);
  EXPECT_EQ(train->shape().height, 32);
  EXPECT_EQ(train->shape().width, 32);
  EXPECT_HAS(train->description(), "CIFAR-10 train (5 images 3x32x32, 10 classes) from " + dir.str());
  Bytes all = b1;
  all.insert(all.end(), b2.begin(), b2.end());
  for (int64_t i = 0; i < 5; ++i) {
    auto [image, label] = train->get(i);
    const uint8_t* record = all.data() + i * kRecord;
    EXPECT_EQ(label, record[0]);
    EXPECT_EQ(sizesOf(image), (std::vector<int64_t>{3, 32, 32}));
    EXPECT_EQ(tensorBytes(image), Bytes(record + 1, record + kRecord)) << "sample " << i;
    // Channel 0 is the R plane: pixel (y=1, x=2) of the green channel is byte 1024 + 32 + 2.
    EXPECT_EQ(image.data_ptr<uint8_t>()[1 * 1024 + 1 * 32 + 2], record[1 + 1024 + 32 + 2]);
  }

  auto testSet = openCifar10(dir.str(), false);
  ASSERT_EQ(testSet->size(), 2);
  EXPECT_EQ(testSet->get(1).second, 6);
  EXPECT_EQ(tensorBytes(testSet->get(1).first), Bytes(test.begin() + kRecord + 1, test.end()));
  EXPECT_HAS(testSet->description(), "CIFAR-10 test (2 images");

  fs::remove(dir / "batches.meta.txt");
  EXPECT_EQ(openCifar10(dir.str(), false)->classNames(),
            (std::vector<std::string>{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                                      "truck"}));
}

TEST(Cifar10, Errors) {
  TempDir dir;
  Bytes odd = cifarRecords(2, 0, 1);
  odd.resize(odd.size() + 5);
  writeFile(dir / "test_batch.bin", odd);
  std::string e = errorOf([&] { openCifar10(dir.str(), false); });
  EXPECT_HAS(e, (dir / "test_batch.bin") + ": 6151 bytes, not a positive multiple of 3073");

  Bytes badLabel = cifarRecords(3, 0, 1);
  badLabel[kRecord] = 11;  // record 1's label byte
  writeFile(dir / "test_batch.bin", badLabel);
  e = errorOf([&] { openCifar10(dir.str(), false); });
  EXPECT_HAS(e, (dir / "test_batch.bin") + ": record 1 (byte 3073) has label 11, expected 0..9");

  // Train batches: the first is required, and no gaps.
  e = errorOf([&] { openCifar10(dir.str(), true); });
  EXPECT_HAS(e, (dir / "data_batch_1.bin") + " not found");
  EXPECT_HAS(e, "binary version");
  writeFile(dir / "data_batch_1.bin", cifarRecords(1, 0, 1));
  writeFile(dir / "data_batch_3.bin", cifarRecords(1, 0, 1));
  e = errorOf([&] { openCifar10(dir.str(), true); });
  EXPECT_HAS(e, (dir / "data_batch_3.bin") + " exists but data_batch_2.bin is missing");

  const std::string meta = "cat\ndog\n";
  writeFile(dir / "batches.meta.txt", Bytes(meta.begin(), meta.end()));
  fs::remove(dir / "data_batch_3.bin");
  e = errorOf([&] { openCifar10(dir.str(), true); });
  EXPECT_HAS(e, (dir / "batches.meta.txt") + ": 2 class names (non-empty lines), expected 10");

  e = errorOf([&] { openCifar10(dir / "nowhere", true); });
  EXPECT_HAS(e, (dir / "nowhere") + " not found");
}

// ---- image folders written here ---------------------------------------------

/// An interleaved [h, w, c] image.
struct Image {
  int h, w, c;
  Bytes hwc;
  /// As [c, h, w].
  Bytes planar() const {
    Bytes out(hwc.size());
    for (int ch = 0; ch < c; ++ch)
      for (int p = 0; p < h * w; ++p) out[static_cast<size_t>(ch * h * w + p)] = hwc[static_cast<size_t>(p * c + ch)];
    return out;
  }
};

Image noisy(int h, int w, int c, uint32_t seed) {
  Image im{h, w, c, {}};
  uint32_t state = seed * 2654435761u + 1;
  for (int k = 0; k < h * w * c; ++k) {
    state = state * 1664525u + 1013904223u;
    im.hwc.push_back(static_cast<uint8_t>(state >> 24));
  }
  return im;
}

Image smooth(int h, int w) {
  Image im{h, w, 3, {}};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      im.hwc.push_back(static_cast<uint8_t>(40 + 12 * x));
      im.hwc.push_back(static_cast<uint8_t>(60 + 15 * y));
      im.hwc.push_back(static_cast<uint8_t>(128));
    }
  return im;
}

void writePng(const std::string& path, const Image& im) {
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_TRUE(stbi_write_png(path.c_str(), im.w, im.h, im.c, im.hwc.data(), im.w * im.c)) << path;
}

void writeJpg(const std::string& path, const Image& im) {
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_TRUE(stbi_write_jpg(path.c_str(), im.w, im.h, im.c, im.hwc.data(), 95)) << path;
}

/// The test's own stb_image decode of `path` to `channels`, as [c, h, w].
Bytes referenceDecode(const std::string& path, int channels) {
  int w = 0, h = 0, n = 0;
  stbi_uc* p = stbi_load(path.c_str(), &w, &h, &n, channels);
  if (p == nullptr) {
    ADD_FAILURE() << path << ": " << stbi_failure_reason();
    return {};
  }
  Image im{h, w, channels, Bytes(p, p + w * h * channels)};
  stbi_image_free(p);
  return im.planar();
}

/// bird/e.png, cat/a.png, cat/b.PNG, dog/c.jpg, dog/d.jpeg (6 high, 8 wide), plus files to ignore.
struct Folder {
  TempDir dir;
  std::string root = dir / "images";
  std::map<std::string, Image> pngs;  // relative path -> pixels
  Image jpgSource = smooth(6, 8);
  std::vector<std::string> order = {"bird/e.png", "cat/a.png", "cat/b.PNG", "dog/c.jpg", "dog/d.jpeg"};
  std::vector<int64_t> labels = {0, 1, 1, 2, 2};

  Folder() {
    pngs["bird/e.png"] = noisy(6, 8, 3, 1);
    pngs["cat/a.png"] = noisy(6, 8, 3, 2);
    pngs["cat/b.PNG"] = noisy(6, 8, 4, 3);  // RGBA: alpha is dropped
    for (auto& [rel, im] : pngs) writePng(path(rel), im);
    writeJpg(path("dog/c.jpg"), jpgSource);
    writeJpg(path("dog/d.jpeg"), jpgSource);
    const std::string text = "not an image";
    writeFile(path("dog/notes.txt"), Bytes(text.begin(), text.end()));
    writePng(path(".thumbnails/x.png"), noisy(2, 2, 3, 9));  // hidden: not a class
    writePng(path("cat/.hidden.png"), noisy(3, 3, 3, 9));   // hidden: not a sample
  }
  std::string path(const std::string& rel) const { return root + "/" + rel; }
  /// The exact [3, 6, 8] pixels of a PNG (RGB of RGBA).
  Bytes rgbPlanar(const std::string& rel) const {
    const Image& im = pngs.at(rel);
    Bytes p = im.planar();
    p.resize(static_cast<size_t>(3 * im.h * im.w));
    return p;
  }
};

ImageFolderOptions opts(int64_t h = 0, int64_t w = 0, int64_t channels = 3,
                        BadImagePolicy policy = BadImagePolicy::kAbort, bool cache = false) {
  ImageFolderOptions o;
  o.resizeHeight = h;
  o.resizeWidth = w;
  o.channels = channels;
  o.onBadImage = policy;
  o.cacheDecoded = cache;
  return o;
}

TEST(ImageFolder, ClassesFilesAndExactPixels) {
  Folder f;
  for (bool cache : {false, true}) {
    SCOPED_TRACE(cache ? "cached" : "lazy");
    auto ds = ImageFolderDataset::open(f.root, opts(0, 0, 3, BadImagePolicy::kAbort, cache));
    EXPECT_EQ(ds->classNames(), (std::vector<std::string>{"bird", "cat", "dog"}));
    EXPECT_EQ(ds->numClasses(), 3);
    ASSERT_EQ(ds->size(), 5);
    EXPECT_EQ(ds->shape().channels, 3);
    EXPECT_EQ(ds->shape().height, 6);
    EXPECT_EQ(ds->shape().width, 8);
    EXPECT_EQ(ds->skippedCount(), 0);
    EXPECT_HAS(ds->description(), "image folder (5 images 3x6x8, 3 classes");
    EXPECT_HAS(ds->description(), f.root);
    for (int64_t i = 0; i < 5; ++i) {
      const std::string& rel = f.order[static_cast<size_t>(i)];
      SCOPED_TRACE(rel);
      EXPECT_EQ(ds->filePath(i), f.path(rel));
      auto [image, label] = ds->get(i);
      EXPECT_EQ(label, f.labels[static_cast<size_t>(i)]);
      EXPECT_EQ(sizesOf(image), (std::vector<int64_t>{3, 6, 8}));
      if (f.pngs.count(rel)) {
        EXPECT_EQ(tensorBytes(image), f.rgbPlanar(rel));  // PNG is lossless
      } else {
        // JPEG: exactly what stb_image decodes, and close to what was written.
        const Bytes got = tensorBytes(image);
        EXPECT_EQ(got, referenceDecode(f.path(rel), 3));
        const Bytes want = f.jpgSource.planar();
        ASSERT_EQ(got.size(), want.size());
        int worst = 0;
        for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::abs(int{got[k]} - int{want[k]}));
        EXPECT_LE(worst, 8) << "JPEG quality 95 of a smooth ramp";
      }
    }
    EXPECT_HAS(errorOf([&] { ds->get(5); }), "index 5 out of range [0, 5)");
  }
}

TEST(ImageFolder, GreyAndColourConversion) {
  Folder f;
  auto grey = ImageFolderDataset::open(f.root, opts(0, 0, 1));
  EXPECT_EQ(grey->shape().channels, 1);
  for (int64_t i = 0; i < grey->size(); ++i) {
    const std::string path = grey->filePath(i);
    EXPECT_EQ(tensorBytes(grey->get(i).first), referenceDecode(path, 1)) << path;
  }
  // A grey PNG read as RGB: three equal planes.
  TempDir dir;
  const Image g = noisy(4, 5, 1, 7);
  writePng(dir / "r/only/g.png", g);
  auto rgb = ImageFolderDataset::open(dir / "r", opts());
  Bytes three = g.hwc;
  three.insert(three.end(), g.hwc.begin(), g.hwc.end());
  three.insert(three.end(), g.hwc.begin(), g.hwc.end());
  EXPECT_EQ(tensorBytes(rgb->get(0).first), three);
}

TEST(ImageFolder, BilinearResizeMatchesPyTorch) {
  Folder f;
  for (auto [h, w] : {std::pair<int64_t, int64_t>{4, 5}, {12, 16}, {6, 3}, {1, 1}}) {
    SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(w));
    auto ds = ImageFolderDataset::open(f.root, opts(h, w));
    EXPECT_EQ(ds->shape().height, h);
    EXPECT_EQ(ds->shape().width, w);
    EXPECT_HAS(ds->description(), "resized to " + std::to_string(h) + "x" + std::to_string(w));
    for (const std::string rel : {"bird/e.png", "cat/b.PNG"}) {
      const Bytes src = f.rgbPlanar(rel);
      at::Tensor in = at::empty({1, 3, 6, 8}, at::kByte);
      std::memcpy(in.data_ptr<uint8_t>(), src.data(), src.size());
      at::Tensor want = at::upsample_bilinear2d(in.to(at::kFloat), {h, w}, /*align_corners=*/false)
                            .round()
                            .clamp(0, 255)
                            .to(at::kByte)
                            .reshape({3, h, w});
      auto it = std::find(f.order.begin(), f.order.end(), rel);
      at::Tensor got = ds->get(it - f.order.begin()).first;
      EXPECT_EQ(sizesOf(got), (std::vector<int64_t>{3, h, w}));
      // Float rounding may differ by one at exact halves.
      EXPECT_LE(got.to(at::kInt).sub(want.to(at::kInt)).abs().max().item<int>(), 1) << rel;
    }
  }
}

TEST(ImageFolder, CorruptFileAbortsOrIsSkipped) {
  Folder f;
  const std::string bad = f.path("cat/c_corrupt.png");
  const std::string text = "not an image";
  writeFile(bad, Bytes(text.begin(), text.end()));
  int w = 0, h = 0, n = 0;
  ASSERT_FALSE(stbi_info(bad.c_str(), &w, &h, &n));
  const std::string reason = stbi_failure_reason();

  for (bool cache : {false, true}) {
    const std::string e =
        errorOf([&] { ImageFolderDataset::open(f.root, opts(0, 0, 3, BadImagePolicy::kAbort, cache)); });
    EXPECT_HAS(e, bad + ": cannot decode the image: " + reason);
    EXPECT_HAS(e, "kSkip");

    auto ds = ImageFolderDataset::open(f.root, opts(0, 0, 3, BadImagePolicy::kSkip, cache));
    EXPECT_EQ(ds->size(), 5);
    EXPECT_EQ(ds->skippedCount(), 1);
    EXPECT_EQ(ds->skippedFiles(), std::vector<std::string>{bad});
    EXPECT_EQ(tensorBytes(ds->get(2).first), f.rgbPlanar("cat/b.PNG"));  // c_corrupt.png sorts after b.PNG
    EXPECT_EQ(ds->get(3).second, 2);
    EXPECT_HAS(ds->description(), "1 unreadable files skipped");
  }
}

TEST(ImageFolder, DamagedPixelDataIsFoundInGetOrAtOpen) {
  Folder f;
  // A PNG cut after its header chunk: stbi_info reads it, decoding fails.
  const std::string cut = f.path("bird/f_cut.png");
  writePng(cut, noisy(6, 8, 3, 5));
  fs::resize_file(cut, 40);
  auto lazy = ImageFolderDataset::open(f.root, opts());
  ASSERT_EQ(lazy->size(), 6);
  ASSERT_EQ(lazy->filePath(1), cut);
  EXPECT_HAS(errorOf([&] { lazy->get(1); }), cut + ": cannot decode the image: ");
  EXPECT_EQ(tensorBytes(lazy->get(0).first), f.rgbPlanar("bird/e.png"));

  EXPECT_HAS(errorOf([&] { ImageFolderDataset::open(f.root, opts(0, 0, 3, BadImagePolicy::kAbort, true)); }),
             cut + ": cannot decode the image");
  auto skip = ImageFolderDataset::open(f.root, opts(0, 0, 3, BadImagePolicy::kSkip));
  EXPECT_EQ(skip->skippedFiles(), std::vector<std::string>{cut});
  EXPECT_EQ(skip->size(), 5);

  // Every image of a class unreadable: with kSkip that class would be empty.
  fs::remove(f.path("bird/e.png"));
  EXPECT_HAS(errorOf([&] { ImageFolderDataset::open(f.root, opts(0, 0, 3, BadImagePolicy::kSkip)); }),
             "class folder " + f.path("bird") + " has no decodable image");
}

TEST(ImageFolder, OddSizeWithoutResizeNamesTheFile) {
  Folder f;
  const std::string odd = f.path("dog/e_odd.png");
  writePng(odd, noisy(5, 5, 3, 4));
  const std::string e = errorOf([&] { ImageFolderDataset::open(f.root, opts()); });
  EXPECT_HAS(e, odd + ": image is 5x5 (height x width) but 5 of the 6 images are 6x8 (e.g. " + f.path("bird/e.png"));
  EXPECT_HAS(e, "resizeHeight");
  auto resized = ImageFolderDataset::open(f.root, opts(6, 8));
  EXPECT_EQ(resized->size(), 6);
  EXPECT_EQ(sizesOf(resized->get(5).first), (std::vector<int64_t>{3, 6, 8}));
}

TEST(ImageFolder, LayoutAndOptionErrors) {
  TempDir dir;
  EXPECT_HAS(errorOf([&] { ImageFolderDataset::open(dir / "none", opts()); }),
             "image folder " + (dir / "none") + " does not exist");
  writePng(dir / "flat/a.png", noisy(2, 2, 3, 1));
  const std::string flat = errorOf([&] { ImageFolderDataset::open(dir / "flat", opts()); });
  EXPECT_HAS(flat, "image folder " + (dir / "flat") + " has no class subdirectories");
  EXPECT_HAS(flat, "holds 1 images directly");
  writePng(dir / "two/cat/a.png", noisy(2, 2, 3, 1));
  fs::create_directories(dir / "two/dog");
  writeFile(dir / "two/dog/readme.txt", Bytes{'x'});
  EXPECT_HAS(errorOf([&] { ImageFolderDataset::open(dir / "two", opts()); }),
             "class folder " + (dir / "two/dog") + " has no images");
  EXPECT_HAS(errorOf([&] { ImageFolderDataset::open(dir / "two/cat/a.png", opts()); }), "is not a directory");
  EXPECT_HAS(errorOf([&] { ImageFolderDataset::open(dir / "two", opts(0, 0, 2)); }),
             "ImageFolderOptions.channels = 2, expected 1 (grey) or 3 (RGB)");
  EXPECT_HAS(errorOf([&] { ImageFolderDataset::open(dir / "two", opts(0, 5)); }),
             "resizeHeight = 0, resizeWidth = 5, expected both 0 (no resize) or both > 0");
}

// ---- thread safety ----------------------------------------------------------

void expectSameFromFourThreads(const ImageDataset& ds) {
  const int64_t n = ds.size();
  std::vector<Bytes> serial;
  std::vector<int64_t> serialLabels;
  for (int64_t i = 0; i < n; ++i) {
    auto [image, label] = ds.get(i);
    serial.push_back(tensorBytes(image));
    serialLabels.push_back(label);
  }
  constexpr int kThreads = 4, kRounds = 25;
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (int64_t k = 0; k < n; ++k) {
          const int64_t i = (k * (2 * t + 1) + round) % n;  // a different order per thread
          try {
            auto [image, label] = ds.get(i);
            const auto* p = image.data_ptr<uint8_t>();
            const Bytes& want = serial[static_cast<size_t>(i)];
            if (label != serialLabels[static_cast<size_t>(i)] || image.numel() != static_cast<int64_t>(want.size()) ||
                std::memcmp(p, want.data(), want.size()) != 0) {
              ++mismatches;
            }
          } catch (...) {
            ++errors;
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

TEST(ThreadSafety, FolderGetFromFourThreadsMatchesSerial) {
  Folder f;
  for (bool cache : {false, true}) {
    SCOPED_TRACE(cache ? "cached" : "lazy");
    expectSameFromFourThreads(*ImageFolderDataset::open(f.root, opts(0, 0, 3, BadImagePolicy::kAbort, cache)));
    expectSameFromFourThreads(*ImageFolderDataset::open(f.root, opts(5, 7, 1, BadImagePolicy::kSkip, cache)));
  }
}

TEST(ThreadSafety, IdxAndCifarGetFromFourThreadsMatchesSerial) {
  TempDir dir;
  SmallIdx ref;
  writeGzip(dir / "img.gz", ref.imagesFile());
  writeGzip(dir / "lbl.gz", ref.labelsFile());
  expectSameFromFourThreads(*openIdx(dir / "img.gz", dir / "lbl.gz"));
  writeFile(dir / "test_batch.bin", cifarRecords(9, 0, 4));
  expectSameFromFourThreads(*openCifar10(dir.str(), false));
}

}  // namespace
}  // namespace lockstep
