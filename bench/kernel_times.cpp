// Milliseconds of lockstep's own CPU kernels against what they replace, one
// thread, with the allocator `lockstep train` installs (common/tensor_memory.h):
//   pooling   reluMaxPool2x2's forward and backward (through autograd) on the
//             convnet's two layers at batch 128 (32 x 28 x 28 and 64 x 14 x 14),
//             float32 and bfloat16, against at::max_pool2d(at::relu(x))
//   optimizer one step of FusedSGD (momentum 0.9) and FusedAdam over N
//             parameters against LibTorch's SGD and Adam
// Each figure is the median of ROUNDS rounds (the two sides alternate within a
// round), a round the mean of REPS calls.
//
//   build/bench/kernel_times [pooling|optimizer|all] [ROUNDS] [N]   (defaults all, 7, 20037642)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/common/tensor_memory.h"
#include "lockstep/nn/pooling.h"
#include "lockstep/optim/fused_optimizers.h"

namespace {

using Clock = std::chrono::steady_clock;

double meanMs(const std::function<void()>& f, int reps) {
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / reps;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Prints the median (and min-max) over `rounds` of each side's mean time, the sides alternating in order.
void compare(const std::string& what, const std::vector<std::pair<std::string, std::function<void()>>>& sides,
             int rounds, int reps) {
  std::vector<std::vector<double>> times(sides.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < sides.size(); ++k) {
      const size_t s = r % 2 == 0 ? k : sides.size() - 1 - k;
      times[s].push_back(meanMs(sides[s].second, reps));
    }
  }
  std::printf("%-44s", what.c_str());
  for (size_t s = 0; s < sides.size(); ++s) {
    const auto [low, high] = std::minmax_element(times[s].begin(), times[s].end());
    std::printf("  %s %7.2f ms (%.2f-%.2f)", sides[s].first.c_str(), median(times[s]), *low, *high);
  }
  std::printf("\n");
}

void pooling(int rounds) {
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    std::vector<at::Tensor> inputs, upstream;
    for (auto shape : {std::vector<int64_t>{128, 32, 28, 28}, std::vector<int64_t>{128, 64, 14, 14}}) {
      inputs.push_back(at::randn(shape).to(dtype).requires_grad_(true));
      upstream.push_back(at::randn({shape[0], shape[1], shape[2] / 2, shape[3] / 2}).to(dtype));
    }
    auto forward = [&](bool plain) {
      return [&, plain] {
        for (auto& x : inputs) {
          at::Tensor y = plain ? at::max_pool2d(at::relu(x), {2, 2}) : lockstep::reluMaxPool2x2(x);
        }
      };
    };
    auto both = [&](bool plain) {
      return [&, plain] {
        for (size_t i = 0; i < inputs.size(); ++i) {
          at::Tensor y = plain ? at::max_pool2d(at::relu(inputs[i]), {2, 2}) : lockstep::reluMaxPool2x2(inputs[i]);
          y.backward(upstream[i]);
          inputs[i].mutable_grad() = at::Tensor();
        }
      };
    };
    const std::string name = dtype == at::kFloat ? "float32" : "bfloat16";
    compare("pooling " + name + ", both layers, forward", {{"LibTorch", forward(true)}, {"lockstep", forward(false)}},
            rounds, 10);
    compare("pooling " + name + ", both layers, forward+backward",
            {{"LibTorch", both(true)}, {"lockstep", both(false)}}, rounds, 10);
  }
}

void optimizers(int rounds, int64_t n) {
  at::Tensor a = at::randn({n}).requires_grad_(true), b = a.detach().clone().requires_grad_(true);
  a.mutable_grad() = at::randn({n});
  b.mutable_grad() = a.grad().clone();
  {
    torch::optim::SGD plain({a}, torch::optim::SGDOptions(0.01).momentum(0.9));
    lockstep::FusedSGD fused({b}, torch::optim::SGDOptions(0.01).momentum(0.9));
    plain.step();  // the momentum buffers exist from here on
    fused.step();
    compare("SGD, momentum 0.9, " + std::to_string(n) + " parameters",
            {{"LibTorch", [&] { plain.step(); }}, {"lockstep", [&] { fused.step(); }}}, rounds, 5);
  }
  torch::optim::Adam plain({a}, torch::optim::AdamOptions(1e-3));
  lockstep::FusedAdam fused({b}, torch::optim::AdamOptions(1e-3));
  compare("Adam, " + std::to_string(n) + " parameters",
          {{"LibTorch", [&] { plain.step(); }}, {"lockstep", [&] { fused.step(); }}}, rounds, 5);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  const int64_t n = argc > 3 ? std::atoll(argv[3]) : 20037642;
  if (rounds < 1 || n < 1 || (which != "all" && which != "pooling" && which != "optimizer")) {
    std::fprintf(stderr, "usage: kernel_times [pooling|optimizer|all] [ROUNDS >= 1] [N >= 1]\n");
    return 2;
  }
  at::set_num_threads(1);
  lockstep::trackTensorMemory();
  at::manual_seed(0);
  if (which != "optimizer") pooling(rounds);
  if (which != "pooling") optimizers(rounds, n);
  return 0;
}
