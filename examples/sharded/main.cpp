// Train a model whose parameters are split over the workers (ZeRO-3) in your
// own loop.
//
//   lockstep run -np 2 -- build/examples/sharded
//
// A 16-layer MLP, each Linear+Tanh a unit: FullyShardedDataParallel gathers a
// unit just before its layer runs (forward and backward) and frees it after,
// so between steps each worker holds 1/N of the parameters, gradients and
// Adam state. Rank 0 prints what a worker holds next to what DDP would hold;
// at the end the whole trained parameters go back into every worker's model
// and the program checks that the replicas agree.
#include <torch/torch.h>

#include <cstdio>

#include <lockstep/ddp/fully_sharded_data_parallel.h>
#include <lockstep/lockstep.h>

int main() {
  lockstep::Context ctx = lockstep::init();
  const int width = 256, depth = 16;
  torch::manual_seed(0);
  auto model = std::make_shared<torch::nn::Module>();
  std::vector<lockstep::Layer> layers;
  for (int i = 0; i < depth; ++i) {
    auto linear = model->register_module("fc" + std::to_string(i), torch::nn::Linear(width, width));
    const bool last = i + 1 == depth;
    layers.push_back({"fc" + std::to_string(i),
                      [linear, last](const torch::Tensor& x) {
                        torch::Tensor y = linear->forward(x);
                        return last ? y : torch::tanh(y);
                      },
                      {linear}});
  }
  int64_t elements = 0;
  for (const auto& p : model->parameters()) elements += p.numel();

  lockstep::FullyShardedDataParallel zero(
      model, layers, ctx.comm,
      std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3)));
  torch::manual_seed(100 + ctx.world.rank);  // each rank its own data
  double loss = 0;
  for (int step = 0; step < 20; ++step) {
    torch::Tensor x = torch::randn({64, width});
    torch::Tensor y = torch::sin(x);
    torch::Tensor l = torch::mse_loss(zero.forward(x), y);
    l.backward();
    zero.finishGradientSync();
    zero.clipGradNorm(1.0);
    zero.step();
    loss = l.item<double>();
  }
  const double held = static_cast<double>(zero.parameterBytes() + zero.gradientBytes() + zero.stateBytes());
  const double ddp = 16.0 * static_cast<double>(elements);  // float32 parameters and gradients, Adam's two moments
  zero.restoreModule();

  // Replicas must agree: compare a checksum of the parameters over ranks.
  double sum = 0;
  for (auto& p : model->parameters()) sum += p.sum().item<double>();
  std::vector<torch::Tensor> check{torch::tensor({sum, -sum}, torch::kDouble)};
  ctx.comm->allreduce(check, lockstep::ReduceOp::kMax)->wait();
  if (check[0][0].item<double>() != sum || -check[0][1].item<double>() != sum) {
    std::fprintf(stderr, "rank %d: replicas diverged: %.17g vs max %.17g\n", ctx.world.rank, sum,
                 check[0][0].item<double>());
    return 1;
  }
  if (ctx.world.rank == 0) {
    std::printf("%d workers, %d units, %lld parameters: loss after 20 steps %.4f\n", ctx.world.worldSize,
                zero.numUnits(), static_cast<long long>(elements), loss);
    std::printf("model state per worker between steps: %.2f MB (DDP: %.2f MB, %.3f of it)\n", held / 1e6, ddp / 1e6,
                held / ddp);
    std::printf("sharded OK\n");
  }
  return held <= ddp / ctx.world.worldSize * 1.01 ? 0 : 1;
}
