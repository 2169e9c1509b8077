// A model cut into pipeline stages in your own loop: each worker holds a part of
// the layers, activations travel forward and gradients back, micro-batches keep
// the stages busy.
//
//   lockstep run -np 2 -- build/examples/pipeline
//
// A 16-layer residual MLP is split over the workers (one stage each) and trains a
// regression for 30 steps with each batch in 8 micro-batches, once with the GPipe
// schedule and once with 1F1B. Rank 0 (the first stage) prints, per schedule,
// the loss (which the last stage computed), its idle share of each step
// against the theory (P-1)/(M+P-1), and the most activation bytes it stored
// for backward at once (lockstep's counting allocator): 1F1B keeps at most P
// micro-batches alive where GPipe keeps all M. Exits 1 when the loss did not
// fall or 1F1B stored no less than GPipe.
#include <torch/torch.h>

#include <cstdio>

#include <lockstep/common/tensor_memory.h>
#include <lockstep/lockstep.h>
#include <lockstep/pipeline/pipeline.h>

struct Outcome {
  double firstLoss = 0, lastLoss = 0, idle = 0;
  int64_t storedBytes = 0;
};

Outcome train(lockstep::Context& ctx, lockstep::PipelineSchedule schedule) {
  const int stages = ctx.world.worldSize;
  torch::manual_seed(0);  // every worker builds the same model and keeps its stage's layers
  std::vector<lockstep::Layer> layers;
  for (int i = 0; i < 16; ++i) {
    auto linear = std::make_shared<torch::nn::LinearImpl>(256, i == 15 ? 1 : 256);
    const bool last = i == 15;
    layers.push_back({"fc" + std::to_string(i),
                      [linear, last](const torch::Tensor& x) {
                        torch::Tensor y = linear->forward(x);
                        return last ? y : x + 0.5 * torch::tanh(y);  // residual: 16 layers still learn
                      },
                      {linear}});
  }
  lockstep::PipelineStage stage(layers, ctx.comm, {stages, /*microbatches=*/8, schedule});
  torch::optim::SGD optimizer(stage.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto mse = [](const torch::Tensor& out, const lockstep::Batch& b) { return torch::mse_loss(out, b.targets); };
  torch::manual_seed(7);
  const torch::Tensor teacher = torch::randn({256, 1}) / 16;  // the regression to learn: y = x teacher
  Outcome out;
  double idle = 0;
  for (int step = 0; step < 30; ++step) {
    torch::manual_seed(1000 + step);  // every stage draws the same batch
    torch::Tensor x = torch::randn({512, 256});
    lockstep::Batch batch{x, x.matmul(teacher)};
    optimizer.zero_grad();
    double loss = stage.trainBatch(batch, mse);
    optimizer.step();
    if (step == 0) out.firstLoss = loss;
    out.lastLoss = loss;
    if (step > 0) idle += stage.lastTimings().idleFraction();
    out.storedBytes = std::max(out.storedBytes, stage.lastTimings().peakStoredBytes);
  }
  out.idle = idle / 29;
  return out;
}

int main() {
  lockstep::trackTensorMemory();  // before any tensor: count every allocation
  lockstep::Context ctx = lockstep::init();
  Outcome gpipe = train(ctx, lockstep::PipelineSchedule::kGpipe);
  Outcome oneF1B = train(ctx, lockstep::PipelineSchedule::k1f1b);
  const double p = ctx.world.worldSize, theory = (p - 1) / (8 + p - 1);
  if (ctx.world.rank == 0) {
    const std::pair<const char*, const Outcome*> rows[] = {{"gpipe", &gpipe}, {"1f1b", &oneF1B}};
    for (const auto& [name, o] : rows) {
      std::printf("%-5s loss %.4f -> %.4f, stage 0 idle %.1f%% of a step (theory %.1f%%), activations stored %.2f MB\n",
                  name, o->firstLoss, o->lastLoss, 100 * o->idle, 100 * theory, o->storedBytes / 1e6);
    }
    std::printf("1F1B stored %.0f%% of GPipe's activations (theory P/M = %.0f%%)\n",
                100.0 * oneF1B.storedBytes / gpipe.storedBytes, 100 * p / 8);
  }
  const bool learned = gpipe.lastLoss < 0.5 * gpipe.firstLoss && oneF1B.lastLoss < 0.5 * oneF1B.firstLoss;
  const bool saved = ctx.world.worldSize == 1 || oneF1B.storedBytes < gpipe.storedBytes;
  if (ctx.world.rank == 0) std::printf("%s\n", learned && saved ? "pipeline OK" : "pipeline FAILED");
  return learned && saved ? 0 : 1;
}
