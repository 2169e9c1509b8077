// op_profile.cpp — where a built-in image model's forward+backward goes, op by
// op: LibTorch's own profiler (torch::autograd::profiler::RecordProfile) over
// STEPS steps of a random batch, one thread, after 5 untimed steps; writes a
// Chrome trace that bench/op_profile.sh sums per op name.
//
//   build/bench/op_profile TRACE.json [MODEL] [BATCH] [STEPS] [fp32|bf16] [HIDDEN]
//     (defaults convnet, 128, 20, fp32; 1x28x28 images, 10 classes; HIDDEN is
//      the mlp's hidden widths, default 4096,4096 as configs/mlp-bench.yaml;
//      built with -DLOCKSTEP_BUILD_BENCHMARKS=ON)
//
// LOCKSTEP_PLAIN_POOLING=1 profiles the convnet with LibTorch's relu + max_pool2d.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "lockstep/common/tensor_memory.h"
#include "lockstep/models/vision.h"
#include "lockstep/nn/precision.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: op_profile TRACE.json [MODEL] [BATCH] [STEPS] [fp32|bf16] [HIDDEN]\n");
    return 2;
  }
  const std::string trace = argv[1];
  const std::string type = argc > 2 ? argv[2] : "convnet";
  const int64_t batch = argc > 3 ? std::atoll(argv[3]) : 128;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 20;
  try {
    const lockstep::Precision precision = lockstep::parsePrecision(argc > 5 ? argv[5] : "fp32", "precision");
    at::set_num_threads(1);
    // The allocator the Trainer trains with (common/tensor_memory.h): freed blocks are kept for the
    // next tensor of their size. Without it every large tensor of a step (autocast's bf16 copies of the
    // weights, new gradients) is fresh memory from the kernel, and its page faults count in its op.
    lockstep::trackTensorMemory();
    at::manual_seed(0);
    lockstep::ImageModelOptions options;
    options.inChannels = 1;
    options.imageSize = 28;
    options.hiddenSizes = {4096, 4096};
    if (argc > 6) {
      options.hiddenSizes.clear();
      for (const char* p = argv[6]; *p != '\0';) {
        char* end = nullptr;
        options.hiddenSizes.push_back(std::strtoll(p, &end, 10));
        if (end == p)
          throw std::invalid_argument(std::string("HIDDEN: expected widths like 4096,4096, got ") + argv[6]);
        p = *end == ',' ? end + 1 : end;
      }
    }
    auto model = lockstep::makeImageModel(type, options);
    const at::Tensor images = at::randn({batch, 1, 28, 28});
    const at::Tensor labels = at::randint(10, {batch}, at::kLong);
    auto step = [&] {
      model->zero_grad();
      at::Tensor loss;
      {
        lockstep::AutocastGuard amp(precision);
        loss = at::cross_entropy_loss(model->forward(images), labels);
      }
      loss.backward();
    };
    for (int i = 0; i < 5; ++i) step();
    {
      torch::autograd::profiler::RecordProfile profile(trace);
      for (int i = 0; i < steps; ++i) step();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "op_profile: %s\n", e.what());
    return 1;
  }
  return 0;
}
