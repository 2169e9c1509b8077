// Image datasets: the real Fashion-MNIST that scripts/setup.sh installs, and
// IDX and CIFAR-10 files that the tests write themselves (IDX gzip with zlib),
// checked byte for byte. Image folders: test_image_folder.cpp.
#include <ATen/ops/empty.h>
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

#include "lockstep/common/error.h"
#include "lockstep/data/image_dataset.h"
#include "support/expect.h"
#include "support/image_files.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using test::Bytes;
using test::errorOf;
using test::expectSameFromFourThreads;
using test::idxFile;
using test::putBigEndian;
using test::readGzip;
using test::sizesOf;
using test::TempDir;
using test::tensorBytes;
using test::writeFile;
using test::writeGzip;

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
  std::printf("[ info     ] Fashion-MNIST get(): %.0f calls/s on one thread (%.2f us per call)\n", rate, 1e6 / rate);
  RecordProperty("get_per_second", static_cast<int>(rate));
  // Measured 1.4-1.5 million calls/s: get() indexes decoded memory. A get()
  // that decoded or copied the file per call would be thousands of times slower.
  EXPECT_GT(rate, 200000) << "get() must not decode per call";
  // The calls read real labels: Fashion-MNIST's training set has 6000 of each
  // of the ten classes, so the labels of all 60000 samples add up to 270000.
  int64_t all = 0;
  for (int64_t i = 0; i < ds->size(); ++i) all += ds->get(i).second;
  EXPECT_EQ(ds->size(), 60000);
  EXPECT_EQ(all, 270000);
  EXPECT_GT(checksum, 0);  // keeps the timed loop from being optimised away
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

// ---- thread safety ----------------------------------------------------------

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
