// lockstep's LossScaler driving float16 training on a GPU, for
// bench/gpu/check_loss_scaler.sh (needs a CUDA build of LibTorch; not part of
// the CPU build or the test suite).
//
//   loss_scaler_cuda train INPUT_DIR OUT_DIR   the reference run's model and data
//   loss_scaler_cuda time TENSORS ELEMENTS CALLS    microseconds per unscale()
//
// `train`: a 64-256-10 MLP under CUDA autocast (float16), SGD with momentum,
// LossScaler(initScale 2^20, growthInterval 3) so that it overflows, backs off
// and grows again many times. It reads its weights and batches from the raw
// float32/int64 files loss_scaler_reference.py wrote and writes one line per
// step (scale after update, skipped or not, loss) and the final parameters,
// for the reference to compare with PyTorch's GradScaler.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "lockstep/optim/loss_scaler.h"
#include "nn/autocast_scope.h"

namespace {

constexpr int64_t kIn = 64, kHidden = 256, kOut = 10, kBatch = 32;

at::Tensor readRaw(const std::string& path, at::IntArrayRef shape, at::ScalarType type) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type));
  std::ifstream in(path, std::ios::binary);
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (!in) throw std::runtime_error("cannot read " + std::to_string(t.nbytes()) + " bytes from " + path);
  return t.to(at::kCUDA);
}

void writeRaw(const std::string& path, const at::Tensor& t) {
  at::Tensor cpu = t.detach().to(at::kCPU).contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(cpu.data_ptr()), static_cast<std::streamsize>(cpu.nbytes()));
}

int train(const std::string& in, const std::string& out) {
  const int64_t steps = readRaw(in + "/steps.i64", {1}, at::kLong).item<int64_t>();
  torch::nn::Linear fc1(kIn, kHidden), fc2(kHidden, kOut);
  fc1->to(at::kCUDA);
  fc2->to(at::kCUDA);
  {
    torch::NoGradGuard noGrad;
    fc1->weight.copy_(readRaw(in + "/w1.f32", {kHidden, kIn}, at::kFloat));
    fc1->bias.copy_(readRaw(in + "/b1.f32", {kHidden}, at::kFloat));
    fc2->weight.copy_(readRaw(in + "/w2.f32", {kOut, kHidden}, at::kFloat));
    fc2->bias.copy_(readRaw(in + "/b2.f32", {kOut}, at::kFloat));
  }
  const at::Tensor xs = readRaw(in + "/x.f32", {steps, kBatch, kIn}, at::kFloat);
  const at::Tensor ys = readRaw(in + "/y.i64", {steps, kBatch}, at::kLong);
  std::vector<at::Tensor> params{fc1->weight, fc1->bias, fc2->weight, fc2->bias};
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  lockstep::LossScalerOptions options;
  options.initScale = 1048576.0;
  options.growthInterval = 3;
  lockstep::LossScaler scaler(nullptr, options);
  std::ofstream log(out + "/steps.txt");
  for (int64_t s = 0; s < steps; ++s) {
    sgd.zero_grad();
    at::Tensor loss;
    {  // lockstep's own scope (nn/autocast_scope.h), as activation checkpointing replays it
      lockstep::detail::AutocastScope fp16(at::kCUDA, {true, at::kHalf});
      at::Tensor logits = fc2->forward(torch::relu(fc1->forward(xs[s])));
      loss = torch::nn::functional::cross_entropy(logits, ys[s]);
    }
    scaler.scale(loss).backward();
    const bool stepped = scaler.step(sgd);
    scaler.update();
    char line[128];
    std::snprintf(line, sizeof line, "%lld %.17g %d %.9g\n", static_cast<long long>(s), scaler.scale(), stepped ? 0 : 1,
                  loss.item<float>());
    log << line;
  }
  writeRaw(out + "/params.f32", at::cat({fc1->weight.flatten(), fc1->bias, fc2->weight.flatten(), fc2->bias}));
  std::cout << "train: " << steps << " steps, " << scaler.skippedSteps() << " skipped, final scale " << scaler.scale()
            << "\n";
  return 0;
}

// Median microseconds of one unscale()+update() over `calls` calls, gradients of `tensors` x `elements` floats.
int timeUnscale(int64_t tensors, int64_t elements, int calls) {
  std::vector<at::Tensor> params;
  for (int64_t i = 0; i < tensors; ++i) {
    params.push_back(at::zeros({elements}, at::TensorOptions().device(at::kCUDA)).requires_grad_());
    params.back().mutable_grad() = at::randn({elements}, at::TensorOptions().device(at::kCUDA));
  }
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.0));
  lockstep::LossScalerOptions options;
  options.growthInterval = 1 << 30;
  lockstep::LossScaler scaler(nullptr, options);
  std::vector<double> micros;
  for (int c = 0; c < calls; ++c) {
    torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    scaler.unscale(sgd);
    scaler.update();
    torch::cuda::synchronize();
    micros.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(micros.begin(), micros.end());
  std::cout << "unscale_us " << micros[micros.size() / 2] << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!torch::cuda::is_available()) {
    std::cerr << "loss_scaler_cuda: no CUDA device\n";
    return 2;
  }
  if (args.size() == 3 && args[0] == "train") return train(args[1], args[2]);
  if (args.size() == 4 && args[0] == "time")
    return timeUnscale(std::stoll(args[1]), std::stoll(args[2]), std::stoi(args[3]));
  std::cerr << "usage: loss_scaler_cuda train INPUT_DIR OUT_DIR | time TENSORS ELEMENTS CALLS\n";
  return 2;
}
