// Fit a deeper model into the same memory: activation checkpointing and bf16
// autocast in your own loop, under lockstep's DDP.
//
//   lockstep run -np 2 -- build/examples/memory_savers
//
// A 48-block residual MLP trains for a few steps twice: plainly, then with
// its blocks checkpointed in 6 segments and the forward in bf16. Rank 0
// prints the tensor bytes each forward+backward allocated at its peak
// (lockstep's counting allocator) and the final losses; every rank checks
// that the two runs' parameters stay equal across ranks.
#include <torch/torch.h>

#include <cstdio>

#include <lockstep/common/tensor_memory.h>
#include <lockstep/ddp/distributed_data_parallel.h>
#include <lockstep/lockstep.h>
#include <lockstep/nn/activation_checkpoint.h>
#include <lockstep/nn/precision.h>

struct ResidualMlp : torch::nn::Module {
  ResidualMlp(int blocks, int width, int64_t segments) : segments_(segments) {
    for (int b = 0; b < blocks; ++b) {
      auto layer = register_module("block" + std::to_string(b), torch::nn::Linear(width, width));
      stages_.push_back(
          {[layer](const torch::Tensor& x) { return x + 0.1 * torch::tanh(layer->forward(x)); }, nullptr});
    }
    head_ = register_module("head", torch::nn::Linear(width, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = segments_ > 0 ? lockstep::checkpointSequence(stages_, segments_, x) : run(x);
    return head_->forward(h);
  }
  torch::Tensor run(torch::Tensor x) {
    for (auto& s : stages_) x = s.fn(x);
    return x;
  }
  int64_t segments_;
  std::vector<lockstep::CheckpointStage> stages_;
  torch::nn::Linear head_{nullptr};
};

struct Outcome {
  double loss = 0;
  int64_t peakBytes = 0;
};

Outcome train(lockstep::Context& ctx, int64_t segments, lockstep::Precision precision) {
  torch::manual_seed(0);
  auto model = std::make_shared<ResidualMlp>(48, 128, segments);
  lockstep::DistributedDataParallel ddp(model, ctx.comm, {});
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));
  torch::manual_seed(100 + ctx.world.rank);  // each rank its own data
  Outcome out;
  for (int step = 0; step < 5; ++step) {
    torch::Tensor x = torch::randn({512, 128});
    torch::Tensor y = x.mean(1, true);
    optimizer.zero_grad();
    const int64_t before = lockstep::liveTensorBytes();
    lockstep::resetPeakTensorBytes();
    torch::Tensor loss;
    {
      lockstep::AutocastGuard amp(precision);
      loss = torch::mse_loss(model->forward(x).to(torch::kFloat), y);
    }
    loss.backward();
    out.peakBytes = std::max(out.peakBytes, lockstep::peakTensorBytes() - before);
    ddp.finishGradientSync();
    optimizer.step();
    out.loss = loss.item<double>();
  }
  // Replicas must agree: compare a checksum of the parameters over ranks.
  double sum = 0;
  for (auto& p : model->parameters()) sum += p.sum().item<double>();
  std::vector<torch::Tensor> check{torch::tensor({sum, -sum}, torch::kDouble)};
  ctx.comm->allreduce(check, lockstep::ReduceOp::kMax)->wait();
  if (check[0][0].item<double>() != sum || -check[0][1].item<double>() != sum) {
    std::fprintf(stderr, "rank %d: replicas diverged (segments %ld): %.17g vs max %.17g\n", ctx.world.rank,
                 static_cast<long>(segments), sum, check[0][0].item<double>());
    std::exit(1);
  }
  return out;
}

int main() {
  lockstep::trackTensorMemory();  // before any tensor: count every allocation
  lockstep::Context ctx = lockstep::init();
  Outcome plain = train(ctx, 0, lockstep::Precision::kFp32);
  Outcome saved = train(ctx, 6, lockstep::Precision::kBf16);
  if (ctx.world.rank == 0) {
    std::printf("plain fp32:              loss %.4f, forward+backward peak %.1f MB\n", plain.loss,
                plain.peakBytes / 1e6);
    std::printf("6 segments + bf16:       loss %.4f, forward+backward peak %.1f MB (%.0f%% of plain)\n", saved.loss,
                saved.peakBytes / 1e6, 100.0 * saved.peakBytes / plain.peakBytes);
    std::printf("memory_savers OK\n");
  }
  return saved.peakBytes < plain.peakBytes ? 0 : 1;
}
