// lockstep's activation checkpointing on a GPU, for bench/gpu/check_checkpoint.sh
// (needs a CUDA build of LibTorch; not part of the CPU build or the test suite).
//
// A 64-256-256-10 MLP with dropout on CUDA, run plainly and through
// checkpointSequential (2 segments) from the same generator state: the loss,
// every parameter gradient and the next random draw on the GPU must be
// bit-equal, in float32 and under CUDA autocast to float16. Without the GPU
// generator's state replayed, the recomputation draws other dropout masks;
// without the forward's CUDA autocast replayed, it computes in float32.
// Prints one line per case and PASS or FAIL; exits 1 on FAIL.
#include <torch/torch.h>

#include <iostream>
#include <string>
#include <vector>

#include "lockstep/nn/activation_checkpoint.h"
#include "nn/autocast_scope.h"

namespace {

struct Outcome {
  at::Tensor loss;
  std::vector<at::Tensor> grads;
  at::Tensor nextDraw;
};

Outcome run(torch::nn::Sequential& model, const at::Tensor& x, const at::Tensor& y, int segments, bool fp16) {
  model->zero_grad();
  torch::manual_seed(1234);  // CPU and every GPU generator
  at::Tensor loss;
  {  // a disabled state leaves autocast off
    lockstep::detail::AutocastScope amp(at::kCUDA, {fp16, at::kHalf});
    at::Tensor logits = segments > 0 ? lockstep::checkpointSequential(*model, segments, x) : model->forward(x);
    loss = torch::nn::functional::cross_entropy(logits, y);
  }
  loss.backward();
  Outcome out{loss.detach().clone(), {}, at::rand({4}, at::TensorOptions().device(at::kCUDA))};
  for (const auto& p : model->parameters()) out.grads.push_back(p.grad().clone());
  return out;
}

bool same(const Outcome& a, const Outcome& b) {
  if (!at::equal(a.loss, b.loss) || !at::equal(a.nextDraw, b.nextDraw)) return false;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    if (!at::equal(a.grads[i], b.grads[i])) return false;
  }
  return true;
}

}  // namespace

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "checkpoint_cuda: no CUDA device\n";
    return 2;
  }
  torch::manual_seed(7);
  torch::nn::Sequential model(torch::nn::Linear(64, 256), torch::nn::Dropout(0.5), torch::nn::ReLU(),
                              torch::nn::Linear(256, 256), torch::nn::Dropout(0.3), torch::nn::ReLU(),
                              torch::nn::Linear(256, 10));
  model->to(at::kCUDA);
  model->train();
  const at::Tensor x = at::randn({32, 64}, at::TensorOptions().device(at::kCUDA));
  const at::Tensor y = at::randint(0, 10, {32}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  bool ok = true;
  for (bool fp16 : {false, true}) {
    const Outcome plain = run(model, x, y, 0, fp16);
    const Outcome checkpointed = run(model, x, y, 2, fp16);
    const bool equal = same(plain, checkpointed);
    ok = ok && equal;
    std::cout << (fp16 ? "float16 autocast" : "float32") << ": loss " << plain.loss.item<float>() << " / "
              << checkpointed.loss.item<float>() << ", gradients and next draw " << (equal ? "bit-equal" : "DIFFER")
              << "\n";
  }
  std::cout << (ok ? "PASS" : "FAIL") << "\n";
  return ok ? 0 : 1;
}
