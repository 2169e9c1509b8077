// bare_loop.cpp — the convnet workload as a minimal LibTorch training loop on
// one process: no Trainer, no DDP, no communicator, no checkpoints. It is the
// reference for "trainer overhead against a bare LibTorch loop <= 3%"
// (bench/compare_pytorch.sh runs it interleaved with
// `lockstep run -np 1 --threads 1 -- lockstep train configs/fashion_convnet.yaml`).
//
//   build/bench/bare_loop [STEPS] [--trainer-kernels]   (default 60; -DLOCKSTEP_BUILD_BENCHMARKS=ON)
//
// Plain, it is LibTorch's own loop: torch::optim::Adam and LibTorch's CPU allocator. With
// --trainer-kernels it uses what the Trainer's loop uses beneath it: lockstep's one-pass Adam
// (makeOptimizer, as `optimizer.type: adam`) and the counting allocator that reuses freed blocks
// (trackTensorMemory); against that, the Trainer's own cost is what remains.
//
// It does what the Trainer's loop does per step, with the same pieces and
// nothing else: the same model (makeImageModel("convnet") on 1x28x28, seed 0),
// the same data path (Debian's Fashion-MNIST through ImageClassificationSet
// with the usual normalisation and random flips, DistributedSampler(rank 0 of
// 1, shuffled, seed 0), a DataLoader with 1 worker thread and prefetch 4, as
// configs/fashion_convnet.yaml), batch 128, Adam 1e-3, zero_grad / forward /
// cross entropy / backward / step, loss.item() every step (the Trainer reads
// the loss every step too), 1 intra-op thread (run it with OMP_NUM_THREADS=1
// OPENBLAS_NUM_THREADS=1, as `lockstep run --threads 1` sets them for its
// workers). The first step is not timed; a line gives the mean time per step
// by phase, as the Trainer's, and the last line has the Trainer's format:
//   done: N steps in X s, Y samples/s (global, after the first step), Z s waiting for data
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adam.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "lockstep/common/tensor_memory.h"
#include "lockstep/data/image_dataset.h"
#include "lockstep/data/image_transforms.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/sampler.h"
#include "lockstep/models/vision.h"
#include "lockstep/optim/optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kBatch = 128;
constexpr double kLr = 1e-3;

int run(int64_t steps, bool trainerKernels) {
  at::set_num_threads(1);
  if (trainerKernels) lockstep::trackTensorMemory();
  // OpenBLAS sizes its own thread pool when the library loads, from the environment only.
  for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    const char* value = std::getenv(var);
    if (!value || std::string(value) != "1") {
      std::cerr << fmt::format(
          "bare_loop: note: {} is not 1; set it as `lockstep run --threads 1` does, or BLAS "
          "may use more than one thread\n",
          var);
    }
  }
  auto images = lockstep::openFashionMnist(lockstep::kDefaultFashionMnistRoot, /*train=*/true);
  lockstep::ImageTransformOptions transforms;
  std::tie(transforms.mean, transforms.std) = lockstep::standardNormalisation("fashion-mnist");
  transforms.randomFlip = true;
  lockstep::ImageClassificationSet set(images, transforms);

  lockstep::DistributedSampler sampler(lockstep::SamplerOptions{set.size(), 0, 1, /*shuffle=*/true, 0, false});
  int64_t perEpoch = sampler.numBatches(kBatch, /*dropLastBatch=*/true);
  if (steps > perEpoch) {
    std::cerr << fmt::format("bare_loop: at most {} steps (one epoch of batch {})\n", perEpoch, kBatch);
    return 2;
  }
  std::vector<std::vector<int64_t>> plan;
  for (int64_t b = 0; b < steps; ++b) plan.push_back(sampler.batch(b, kBatch));
  lockstep::DataLoader loader(set, lockstep::LoaderOptions{/*numWorkers=*/1, /*prefetch=*/4});
  loader.start(std::move(plan), 0);

  at::manual_seed(0);
  auto model = lockstep::makeImageModel("convnet", lockstep::ImageModelOptions{1, 28, images->numClasses()});
  model->train();
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (trainerKernels) {
    optimizer =
        lockstep::makeOptimizer(lockstep::OptimizerOptions{lockstep::OptimizerType::kAdam, kLr}, model->parameters());
  } else {
    optimizer = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(kLr));
  }

  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  auto runStart = Clock::now();
  Clock::time_point timedStart;
  double lossSum = 0;
  double phase[4] = {0, 0, 0, 0};  // data wait, forward (with the loss), backward, optimizer; timed steps only
  for (int64_t step = 0; step < steps; ++step) {
    auto t0 = Clock::now();
    optimizer->zero_grad();
    lockstep::Batch batch = loader.next();
    auto t1 = Clock::now();
    at::Tensor loss = at::cross_entropy_loss(model->forward(batch.inputs), batch.targets);
    lossSum += loss.item<double>();
    auto t2 = Clock::now();
    loss.backward();
    auto t3 = Clock::now();
    optimizer->step();
    auto t4 = Clock::now();
    if (step == 0) {
      timedStart = t4;
    } else {
      phase[0] += seconds(t0, t1);
      phase[1] += seconds(t1, t2);
      phase[2] += seconds(t2, t3);
      phase[3] += seconds(t3, t4);
    }
  }
  auto end = Clock::now();
  double timed = std::chrono::duration<double>(end - timedStart).count();
  double total = std::chrono::duration<double>(end - runStart).count();
  std::cout << fmt::format("bare_loop: convnet, batch {}, Adam {} ({}), {} thread(s), mean loss {:.4f}\n", kBatch, kLr,
                           trainerKernels ? "the Trainer's kernels and allocator" : "LibTorch's", at::get_num_threads(),
                           lossSum / static_cast<double>(steps));
  auto ms = [&](double s) { return 1000 * s / static_cast<double>(steps - 1); };
  std::cout << fmt::format(
      "per step (mean of {}): {:.1f} ms = data wait {:.1f} + forward {:.1f} + backward {:.1f} + "
      "optimizer {:.1f}\n",
      steps - 1, ms(timed), ms(phase[0]), ms(phase[1]), ms(phase[2]), ms(phase[3]));
  std::cout << fmt::format(
      "done: {} steps in {:.1f} s, {:.0f} samples/s (global, after the first step), {:.1f} s "
      "waiting for data\n",
      steps, total, static_cast<double>((steps - 1) * kBatch) / timed, loader.waitSeconds());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 60;
  bool trainerKernels = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--trainer-kernels") {
      trainerKernels = true;
    } else {
      steps = std::atoll(arg.c_str());
    }
  }
  if (steps < 2) {
    std::cerr << "usage: bare_loop [STEPS >= 2] [--trainer-kernels]\n";
    return 2;
  }
  try {
    return run(steps, trainerKernels);
  } catch (const std::exception& e) {
    std::cerr << "bare_loop: " << e.what() << "\n";
    return 1;
  }
}
