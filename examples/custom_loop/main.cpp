// Keep your own training loop; use only lockstep's DDP engine.
//
//   lockstep run -np 2 -- build/examples/custom_loop
//
// Each worker trains a small regression model on its own shard of the data.
// After every backward, finishGradientSync() leaves the gradient averaged over
// the workers in .grad, so every replica takes the same optimizer step.
#include <torch/torch.h>

#include <iostream>

#include <lockstep/ddp/distributed_data_parallel.h>
#include <lockstep/lockstep.h>

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

int main() {
  lockstep::Context ctx = lockstep::init();
  const int rank = ctx.world.rank;
  const int world = ctx.world.worldSize;

  torch::manual_seed(rank);  // replicas start different; DDP broadcasts rank 0's weights
  auto model = std::make_shared<Net>();
  lockstep::DistributedDataParallel ddp(model, ctx.comm, {});
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));

  // The same synthetic dataset everywhere; each rank takes every world-th row.
  torch::manual_seed(1234);
  auto x = torch::randn({512, 8});
  auto y = x.sum(1, true) * 0.5;
  auto mine = torch::arange(rank, 512, world);
  auto xs = x.index_select(0, mine);
  auto ys = y.index_select(0, mine);

  for (int step = 0; step < 200; ++step) {
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(xs), ys);
    loss.backward();
    ddp.finishGradientSync();
    optimizer.step();
    if (rank == 0 && step % 50 == 0) std::cout << "step " << step << " loss " << loss.item<double>() << std::endl;
  }

  // Replicas must still be identical: compare a checksum of the weights across ranks.
  double sum = 0;
  for (const auto& p : model->parameters()) sum += p.sum().item<double>();
  std::vector<at::Tensor> sums{torch::tensor({sum, -sum}, torch::kDouble)};
  ctx.comm->allreduce(sums, lockstep::ReduceOp::kMax)->wait();
  bool identical = sums[0][0].item<double>() == sum && -sums[0][1].item<double>() == sum;
  double finalLoss = torch::mse_loss(model->forward(x), y).item<double>();
  if (rank == 0) {
    std::cout << "final loss on all data " << finalLoss << "; replicas identical: " << (identical ? "yes" : "no")
              << std::endl;
    if (identical && finalLoss < 0.05) std::cout << "custom_loop OK" << std::endl;
  }
  return identical && finalLoss < 0.05 ? 0 : 1;
}
