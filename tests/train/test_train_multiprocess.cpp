// `lockstep train` as a user runs it, under the real launcher: resume after a
// killed run is bitwise identical to an uninterrupted run, a truncated or
// altered checkpoint is named and skipped, mismatched models fail fast, and the
// trained checkpoint generates names; a resume on another world size keeps the
// position in samples, a full disk while checkpointing keeps the previous checkpoint, and saving a
// checkpoint does not raise the peak resident set.
#include <gtest/gtest.h>
#include <unistd.h>

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb_image_write.h>

#include <random>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/expect.h"
#include "support/replicas.h"
#include "support/subprocess.h"
#include "support/tiny_config.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using test::ProcessOptions;
using test::ProcessResult;

const std::string kTinyConfig = test::tinyNamesConfig("  max_steps: 26\n  log_every: 2\n",
                                                      "checkpoint:\n  dir: ckpt\n  every: 6\n  keep_last: 3\n");

std::string makeRunDir() {
  std::string dir = test::makeTempDir();
  std::ofstream(dir + "/tiny.yaml") << kTinyConfig;
  return dir;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

/// Runs `lockstep run -np N RUNARGS -- lockstep train tiny.yaml ARGS` inside `dir`.
ProcessResult train(const std::string& dir, int np, const std::string& args, ProcessOptions o = {},
                    const std::string& runArgs = "") {
  return test::trainTiny(dir, np, args, std::move(o), runArgs);
}

using test::readAll;

std::string ckpt(const std::string& dir, int step) { return test::ckptPath(dir, step); }

TEST(TrainMultiprocess, ResumeAfterAKilledRunIsBitIdentical) {
  std::string straight = makeRunDir();
  auto a = train(straight, 2, "");
  ASSERT_EQ(a.exitCode, 0) << a.err;
  EXPECT_TRUE(test::sameFinalParameters(a.err, 2)) << a.err;
  EXPECT_NE(a.err.find("training on 2 worker(s)"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("per-worker batch 16, global batch 32; lr 0.01 scaled to 0.02 (linear rule, base batch 16)"),
            std::string::npos)
      << a.err;
  ASSERT_TRUE(fs::exists(ckpt(straight, 26))) << a.err;

  std::string interrupted = makeRunDir();
  ProcessOptions crash;
  crash.setEnv = {{"LOCKSTEP_FAULT_CRASH_AFTER_STEP", "12"}};
  auto b1 = train(interrupted, 2, "", crash);
  EXPECT_NE(b1.exitCode, 0) << b1.err;
  EXPECT_NE(b1.err.find("was killed by SIGKILL"), std::string::npos) << b1.err;
  ASSERT_TRUE(fs::exists(ckpt(interrupted, 12)));
  ASSERT_FALSE(fs::exists(ckpt(interrupted, 18)));

  auto b2 = train(interrupted, 2, "");
  ASSERT_EQ(b2.exitCode, 0) << b2.err;
  EXPECT_TRUE(test::sameFinalParameters(b2.err, 2)) << b2.err;
  EXPECT_EQ(test::finalChecksums(b2.err), test::finalChecksums(a.err)) << "every replica as in the uninterrupted run";
  EXPECT_NE(b2.err.find("resumed from ckpt/step-000000012.ckpt: step 12"), std::string::npos) << b2.err;
  ASSERT_TRUE(fs::exists(ckpt(interrupted, 26)));
  // Same config text, same relative paths: the files must be identical to the bit —
  // model, optimizer state, RNG state, position.
  EXPECT_TRUE(readAll(ckpt(straight, 26)) == readAll(ckpt(interrupted, 26)))
      << "resumed run diverged from the uninterrupted one";
  EXPECT_TRUE(readAll(ckpt(straight, 24)) == readAll(ckpt(interrupted, 24)));
}

TEST(TrainMultiprocess, WorkerKilledAtARandomStepIsRestartedAndEndsBitIdentical) {
  std::string straight = makeRunDir();
  auto a = train(straight, 2, "");
  ASSERT_EQ(a.exitCode, 0) << a.err;

  // SIGKILL one rank at the end of a random step (before that step's checkpoint);
  // the launcher restarts both workers, which resume from the newest checkpoint.
  unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  int step = std::uniform_int_distribution<int>(2, 25)(rng);
  int rank = std::uniform_int_distribution<int>(0, 1)(rng);
  SCOPED_TRACE("seed " + std::to_string(seed) + ": rank " + std::to_string(rank) + " killed at step " +
               std::to_string(step));
  std::string restarted = makeRunDir();
  ProcessOptions kill;
  kill.setEnv = {{"LOCKSTEP_FAULT_KILL_AT_STEP", std::to_string(step)},
                 {"LOCKSTEP_FAULT_KILL_RANK", std::to_string(rank)}};
  // Gloo: the launcher owns the workers and names each one's pid (under mpirun, mpirun restarts them all).
  auto b = train(restarted, 2, "", kill, "--max-restarts 1 --backend gloo");
  ASSERT_EQ(b.exitCode, 0) << b.err;
  EXPECT_EQ(test::finalChecksums(b.err), test::finalChecksums(a.err)) << "every replica as in the uninterrupted run";
  EXPECT_NE(b.err.find("lockstep run: rank " + std::to_string(rank) + " (pid"), std::string::npos) << b.err;
  EXPECT_NE(b.err.find("was killed by SIGKILL"), std::string::npos) << b.err;
  EXPECT_NE(b.err.find("restarting all 2 worker(s) of node 0 (restart 1 of 1)"), std::string::npos) << b.err;
  int resumeStep = step / 6 * 6;  // checkpoints every 6 steps; the killed step's own was never written
  if (resumeStep == step) resumeStep -= 6;
  if (resumeStep > 0) {
    char line[96];
    std::snprintf(line, sizeof(line), "resumed from ckpt/step-%09d.ckpt: step %d", resumeStep, resumeStep);
    EXPECT_NE(b.err.find(line), std::string::npos) << b.err;
  } else {
    EXPECT_EQ(b.err.find("resumed from"), std::string::npos) << b.err;
  }
  EXPECT_TRUE(readAll(ckpt(straight, 26)) == readAll(ckpt(restarted, 26)))
      << "the restarted run ended with other parameters than the uninterrupted one";
}

// docs/training.md: "Resuming with another world size or batch keeps the position
// in samples and logs a warning." 2 workers x 16 stop after step 12; 1 worker x 16
// resumes at the same sample of the same epoch (twice the micro-batch index).
TEST(TrainMultiprocess, ResumeWithAnotherWorldSizeKeepsThePositionInSamples) {
  std::string dir = makeRunDir();
  ProcessOptions crash;
  crash.setEnv = {{"LOCKSTEP_FAULT_CRASH_AFTER_STEP", "12"}};
  auto two = train(dir, 2, "", crash);
  ASSERT_TRUE(fs::exists(ckpt(dir, 12))) << two.err;
  std::smatch m;
  const std::regex perEpoch("optimizer steps \\(([0-9]+) per epoch\\)");
  ASSERT_TRUE(std::regex_search(two.err, m, perEpoch)) << two.err;
  const int stepsPerEpoch = std::stoi(m[1].str());
  ASSERT_GT(stepsPerEpoch, 0);
  const int epoch = 12 / stepsPerEpoch, batchInEpoch = 12 % stepsPerEpoch;

  auto one = train(dir, 1, "");
  ASSERT_EQ(one.exitCode, 0) << one.err;
  EXPECT_HAS(one.err, "resumed from ckpt/step-000000012.ckpt: step 12");
  EXPECT_HAS(one.err, "resuming a run of 2 workers x batch 16 with 1 workers x batch 16: continuing epoch " +
                          std::to_string(epoch) + " at micro-batch " + std::to_string(2 * batchInEpoch));
  EXPECT_TRUE(fs::exists(ckpt(dir, 26))) << "the one-worker run finished the 26 steps";
}

TEST(TrainMultiprocess, CorruptCheckpointIsNamedAndThePreviousOneIsUsed) {
  std::string dir = makeRunDir();
  auto first = train(dir, 2, "");
  ASSERT_EQ(first.exitCode, 0) << first.err;
  std::string newest = ckpt(dir, 26);
  std::string previous = ckpt(dir, 24);
  std::string goodNewest = readAll(newest);
  std::string previousBytes = readAll(previous);
  {
    std::ofstream out(newest, std::ios::binary | std::ios::trunc);
    out << goodNewest.substr(0, goodNewest.size() / 2);
  }
  // Asked for explicitly: a clear error naming the file, non-zero exit.
  auto explicitResume = train(dir, 2, "checkpoint.resume=ckpt/step-000000026.ckpt");
  EXPECT_EQ(explicitResume.exitCode, 1) << explicitResume.err;
  EXPECT_NE(explicitResume.err.find("checkpoint ckpt/step-000000026.ckpt is truncated"), std::string::npos)
      << explicitResume.err;
  EXPECT_TRUE(readAll(previous) == previousBytes) << "the previous checkpoint was touched";
  // Automatic resume skips it, names it, and continues from the previous one.
  auto automatic = train(dir, 2, "");
  ASSERT_EQ(automatic.exitCode, 0) << automatic.err;
  EXPECT_NE(automatic.err.find("skipping unusable checkpoint"), std::string::npos) << automatic.err;
  EXPECT_NE(automatic.err.find("resumed from ckpt/step-000000024.ckpt"), std::string::npos) << automatic.err;
  ASSERT_TRUE(readAll(newest) == goodNewest) << "recomputing steps 25-26 must give the same checkpoint";

  // Altered rather than truncated: one byte flipped in the middle, same size. The CRC catches it.
  std::string altered = goodNewest;
  altered[altered.size() / 2] = static_cast<char>(altered[altered.size() / 2] ^ 0x10);
  {
    std::ofstream out(newest, std::ios::binary | std::ios::trunc);
    out << altered;
  }
  auto explicitAltered = train(dir, 2, "checkpoint.resume=ckpt/step-000000026.ckpt");
  EXPECT_EQ(explicitAltered.exitCode, 1) << explicitAltered.err;
  EXPECT_NE(explicitAltered.err.find("checkpoint ckpt/step-000000026.ckpt is corrupt: CRC-32C"), std::string::npos)
      << explicitAltered.err;
  auto automaticAltered = train(dir, 2, "");
  ASSERT_EQ(automaticAltered.exitCode, 0) << automaticAltered.err;
  EXPECT_NE(automaticAltered.err.find("skipping unusable checkpoint: checkpoint ckpt/step-000000026.ckpt is corrupt: "
                                      "CRC-32C"),
            std::string::npos)
      << automaticAltered.err;
  EXPECT_NE(automaticAltered.err.find("resumed from ckpt/step-000000024.ckpt"), std::string::npos)
      << automaticAltered.err;
  EXPECT_TRUE(readAll(newest) == goodNewest) << "recomputing steps 25-26 must give the same checkpoint";
  EXPECT_TRUE(readAll(previous) == previousBytes) << "the previous checkpoint was touched";
}

TEST(TrainMultiprocess, MismatchedModelsFailFastWithTheDifference) {
  std::string dir = makeRunDir();
  std::string bin = test::lockstepBin();
  std::string cmd = "cd " + quote(dir) + " && exec " + quote(bin) + " run -np 2 --comm-timeout 20 -- sh -c " +
                    quote("exec " + bin + " train tiny.yaml model.hidden=$((16 + LOCKSTEP_RANK))");
  auto r = test::runProcess({"sh", "-c", cmd});
  EXPECT_NE(r.exitCode, 0) << r.err;
  EXPECT_LT(r.seconds, 60);
  EXPECT_NE(r.err.find("the model differs between ranks: entry #0 is 'parameter lstm.weight_ih_l0 float32[64,"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("on rank 0 but 'parameter lstm.weight_ih_l0 float32[68,"), std::string::npos) << r.err;
}

/// A tmpfs of `bytes` mounted on a fresh directory while alive (root only).
class SmallDisk {
 public:
  explicit SmallDisk(int64_t bytes) : dir_(test::makeTempDir() + "/disk") {
    fs::create_directories(dir_);
    ok_ = std::system(("mount -t tmpfs -o size=" + std::to_string(bytes) + " tmpfs " + quote(dir_)).c_str()) == 0;
  }
  ~SmallDisk() {
    if (ok_) std::system(("umount " + quote(dir_)).c_str());
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;
  bool ok() const { return ok_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  bool ok_ = false;
};

// A full disk while writing a checkpoint: a clear error naming the file and
// the reason, a non-zero exit, no partial file, and the previous checkpoint
// intact (still loadable). The disk holds one checkpoint and a half.
TEST(TrainMultiprocess, FullDiskWhileCheckpointingKeepsThePreviousCheckpoint) {
  LOCKSTEP_SKIP_UNLESS(::geteuid() == 0, "root, to mount a small tmpfs (CI runs as root)");
  std::string sizing = makeRunDir();
  auto first = train(sizing, 2, "trainer.max_steps=6");
  ASSERT_EQ(first.exitCode, 0) << first.err;
  const auto size = static_cast<int64_t>(fs::file_size(ckpt(sizing, 6)));

  SmallDisk disk(size + size / 2);
  ASSERT_TRUE(disk.ok()) << "mount -t tmpfs failed";
  std::string dir = makeRunDir();
  auto full = train(dir, 2, "trainer.max_steps=12 checkpoint.dir=" + disk.dir());
  EXPECT_NE(full.exitCode, 0) << full.err;
  EXPECT_HAS(full.err, "step-000000012.ckpt.tmp");
  EXPECT_HAS(full.err, "No space left on device");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(disk.dir())) files.push_back(entry.path().filename().string());
  ASSERT_EQ(files, std::vector<std::string>{"step-000000006.ckpt"}) << "no partial file is left";
  auto generate = test::runProcess(
      {test::lockstepBin(), "generate", "--checkpoint", disk.dir() + "/step-000000006.ckpt", "-n", "2"});
  EXPECT_EQ(generate.exitCode, 0) << "the previous checkpoint still loads: " << generate.err;
}

TEST(TrainMultiprocess, TrainedCheckpointGeneratesNames) {
  std::string dir = makeRunDir();
  auto trained = train(dir, 1, "trainer.max_steps=4 generate.samples=3");
  ASSERT_EQ(trained.exitCode, 0) << trained.err;
  EXPECT_NE(trained.out.find("generated names"), std::string::npos) << trained.out;
  std::string bin = test::lockstepBin();
  auto g1 = test::runProcess({bin, "generate", "--checkpoint", ckpt(dir, 4), "-n", "5", "--seed", "3"});
  auto g2 = test::runProcess({bin, "generate", "--checkpoint", ckpt(dir, 4), "-n", "5", "--seed", "3"});
  ASSERT_EQ(g1.exitCode, 0) << g1.err;
  EXPECT_EQ(g1.out, g2.out) << "the same seed must give the same names";
  int lines = 0;
  std::istringstream in(g1.out);
  std::string line;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_LE(line.size(), 24u);
    for (char c : line)
      EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(c)) || c == ' ' || c == '-' || c == '\'') << line;
  }
  EXPECT_EQ(lines, 5);
  auto bad = test::runProcess({bin, "generate", "--checkpoint", dir + "/tiny.yaml"});
  EXPECT_EQ(bad.exitCode, 1);
  EXPECT_NE(bad.err.find(dir + "/tiny.yaml is not a lockstep checkpoint"), std::string::npos) << bad.err;
}

TEST(TrainMultiprocess, FashionConvnetLearnsOnTwoWorkers) {
  // The real Fashion-MNIST from Debian's package, 40 steps: enough to be far above chance.
  std::string dir = test::makeTempDir();
  std::string bin = test::lockstepBin();
  std::string config = std::string(LOCKSTEP_SOURCE_DIR) + "/configs/fashion_convnet.yaml";
  std::string cmd = "cd " + quote(dir) + " && exec " + quote(bin) + " run -np 2 -- " + quote(bin) + " train " +
                    quote(config) + " trainer.max_steps=40 trainer.log_every=20 checkpoint.dir=ckpt";
  auto r = test::runProcess({"sh", "-c", cmd});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(test::sameFinalParameters(r.err, 2)) << r.err;
  EXPECT_NE(r.err.find("model: convnet with 421642 parameters"), std::string::npos) << r.err;
  auto pos = r.out.find("validation accuracy ");
  ASSERT_NE(pos, std::string::npos) << r.out;
  double accuracy = std::stod(r.out.substr(pos + 20));
  EXPECT_GT(accuracy, 60.0) << r.out;
  EXPECT_LE(accuracy, 100.0);
}

/// CIFAR-10 binary files (2 train batches + test batch) of `perFile` random records.
void writeCifar(const std::string& root, int perFile) {
  std::mt19937 rng(1);
  auto write = [&](const std::string& name) {
    std::ofstream out(root + "/" + name, std::ios::binary);
    for (int r = 0; r < perFile; ++r) {
      out.put(static_cast<char>(rng() % 10));
      for (int i = 0; i < 3072; ++i) out.put(static_cast<char>(rng() % 256));
    }
  };
  fs::create_directories(root);
  write("data_batch_1.bin");
  write("data_batch_2.bin");
  write("test_batch.bin");
}

/// root/{train,val}/<class>/<n>.png, 40x30 RGB images.
void writeImageFolder(const std::string& root) {
  std::mt19937 rng(2);
  for (const char* split : {"train", "val"}) {
    for (const char* cls : {"cat", "dog", "fox"}) {
      std::string dir = root + "/" + split + "/" + cls;
      fs::create_directories(dir);
      for (int i = 0; i < 6; ++i) {
        std::vector<unsigned char> pixels(40 * 30 * 3);
        for (auto& p : pixels) p = static_cast<unsigned char>(rng() % 256);
        stbi_write_png((dir + "/" + std::to_string(i) + ".png").c_str(), 40, 30, 3, pixels.data(), 40 * 3);
      }
    }
  }
}

TEST(TrainMultiprocess, ImageConfigsRunEndToEnd) {
  // The shipped CIFAR and image-folder configs, on files written here, for two steps on 2 workers.
  std::string dir = test::makeTempDir();
  writeCifar(dir + "/cifar", 24);
  writeImageFolder(dir + "/folder");
  std::string bin = test::lockstepBin();
  auto run = [&](const std::string& config, const std::string& extra) {
    std::string cmd = "cd " + quote(dir) + " && exec " + quote(bin) + " run -np 2 -- " + quote(bin) + " train " +
                      quote(std::string(LOCKSTEP_SOURCE_DIR) + "/configs/" + config) +
                      " trainer.max_steps=2 trainer.batch_size=4 checkpoint.dir=ckpt-" + config + " " + extra;
    return test::runProcess({"sh", "-c", cmd});
  };
  auto cifar = run("cifar_resnet18.yaml", "data.root=cifar");
  ASSERT_EQ(cifar.exitCode, 0) << cifar.err;
  EXPECT_NE(cifar.err.find("model: resnet18 with 11173962 parameters"), std::string::npos) << cifar.err;
  EXPECT_NE(cifar.out.find("resnet18 on cifar10: validation accuracy"), std::string::npos) << cifar.out;
  auto alexnet = run("cifar_alexnet.yaml", "data.root=cifar");
  ASSERT_EQ(alexnet.exitCode, 0) << alexnet.err;
  auto folder = run("imagefolder_resnet50.yaml", "data.root=folder data.image_size=32");
  ASSERT_EQ(folder.exitCode, 0) << folder.err;
  EXPECT_NE(folder.err.find("3 classes"), std::string::npos) << folder.err;
  EXPECT_NE(folder.out.find("resnet50 on imagefolder: validation accuracy"), std::string::npos) << folder.out;
  // A corrupt image with bad_images=abort stops the run naming the file.
  std::ofstream(dir + "/folder/train/dog/broken.png") << "not an image";
  auto broken = run("imagefolder_resnet50.yaml", "data.root=folder data.image_size=32 data.bad_images=abort");
  EXPECT_NE(broken.exitCode, 0);
  EXPECT_NE(broken.err.find("broken.png"), std::string::npos) << broken.err;
  auto skipped = run("imagefolder_resnet50.yaml", "data.root=folder data.image_size=32 data.bad_images=skip");
  EXPECT_EQ(skipped.exitCode, 0) << skipped.err;
}

TEST(TrainMultiprocess, SavingACheckpointDoesNotRaiseThePeakResidentSet) {
  // A 20M-parameter MLP with Adam: 240 MB of parameters and optimizer state to write. The checkpoint
  // streams from the tensors into the file, and the sharded strategies send rank 0 each tensor's
  // pieces only as it writes that tensor, so the resident set while saving stays within 10% of
  // training's peak (a serialized copy would add 240 MB to ~700; assembling zero3's state first, 240
  // MB to ~580).
  std::string dir = test::makeTempDir();
  std::string bin = test::lockstepBin();
  for (auto [np, strategy] :
       {std::pair{1, "ddp"}, std::pair{2, "zero1"}, std::pair{2, "zero2"}, std::pair{2, "zero3"}}) {
    SCOPED_TRACE(std::string(strategy) + " on " + std::to_string(np));
    std::string cmd = "cd " + quote(dir) + " && exec " + quote(bin) + " run -np " + std::to_string(np) + " -- " +
                      quote(bin) + " train " + quote(std::string(LOCKSTEP_SOURCE_DIR) + "/configs/mlp-bench.yaml") +
                      " optimizer.type=adam trainer.max_steps=2 checkpoint.every=2 checkpoint.dir=ckpt-" + strategy +
                      " monitor.dir=off strategy.type=" + strategy;
    auto r = test::runProcess({"sh", "-c", cmd});
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_TRUE(test::sameFinalParameters(r.err, np)) << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, std::regex("peak RSS while saving (\\d+) MB, training's (\\d+) MB")))
        << r.err;
    const double saving = std::stod(m[1]), training = std::stod(m[2]);
    EXPECT_GT(training, 400) << "the model's state alone is 160 to 320 MB";
    EXPECT_LE(saving, 1.1 * training) << r.err;
  }
}

TEST(TrainMultiprocess, ConfigErrorsExitWithCode2) {
  std::string dir = makeRunDir();
  auto r = test::runProcess({test::lockstepBin(), "train", dir + "/tiny.yaml", "trainer.bogus=1"});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("command line: unknown key 'trainer.bogus'"), std::string::npos) << r.err;
  auto missing = test::runProcess({test::lockstepBin(), "train", dir + "/tiny.yaml", "data.sources=[/no/such.csv]"});
  EXPECT_NE(missing.exitCode, 0);
  EXPECT_NE(missing.err.find("/no/such.csv"), std::string::npos) << missing.err;
}

// With every GPU hidden, device cuda is a configuration error naming the key, nothing is
// trained; auto trains on the CPU (common/device.h).
TEST(TrainMultiprocess, DeviceCudaWithoutAVisibleGpuExitsWithCode2) {
  std::string dir = makeRunDir();
  test::ProcessOptions hidden;
  hidden.setEnv = {{"CUDA_VISIBLE_DEVICES", ""}};
  auto cuda = train(dir, 1, "device=cuda", hidden);
  EXPECT_EQ(cuda.exitCode, 2) << cuda.err;
  EXPECT_NE(cuda.err.find("device: cuda, but no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES is '')"),
            std::string::npos)
      << cuda.err;
  auto bogus = train(dir, 1, "device=gpu", hidden);
  EXPECT_EQ(bogus.exitCode, 2) << bogus.err;
  EXPECT_NE(bogus.err.find("device 'gpu' is unknown; expected auto, cpu or cuda"), std::string::npos) << bogus.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt")) << "a failed start wrote checkpoints";
  auto cpu = train(dir, 1, "device=auto trainer.max_steps=4", hidden);
  EXPECT_EQ(cpu.exitCode, 0) << cpu.err;
  EXPECT_NE(cpu.err.find("training on 1 worker(s) (cpu on rank 0)"), std::string::npos) << cpu.err;
}

}  // namespace
}  // namespace lockstep
