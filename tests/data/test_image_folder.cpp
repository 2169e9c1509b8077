// Image folders (class per subdirectory): PNG/JPEG files the tests write with
// stb_image_write, decoded and compared byte for byte with the test's own
// stb_image decode; resizing against PyTorch's bilinear; bad files; threads.
#include <ATen/ops/empty.h>
#include <ATen/ops/upsample_bilinear2d.h>
#include <gtest/gtest.h>

#include <map>

#include "lockstep/common/error.h"
#include "lockstep/data/image_dataset.h"
#include "support/expect.h"
#include "support/image_files.h"

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
using test::Bytes;
using test::errorOf;
using test::expectSameFromFourThreads;
using test::sizesOf;
using test::TempDir;
using test::tensorBytes;
using test::writeFile;

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
    writePng(path("cat/.hidden.png"), noisy(3, 3, 3, 9));    // hidden: not a sample
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

TEST(ThreadSafety, FolderGetFromFourThreadsMatchesSerial) {
  Folder f;
  for (bool cache : {false, true}) {
    SCOPED_TRACE(cache ? "cached" : "lazy");
    expectSameFromFourThreads(*ImageFolderDataset::open(f.root, opts(0, 0, 3, BadImagePolicy::kAbort, cache)));
    expectSameFromFourThreads(*ImageFolderDataset::open(f.root, opts(5, 7, 1, BadImagePolicy::kSkip, cache)));
  }
}

}  // namespace
}  // namespace lockstep
