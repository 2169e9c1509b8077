// elastic_trainer — data-parallel training through the loss of a worker, for the elastic tests.
//
//   lockstep run -np N --min-np A -- elastic_trainer DIE_RANK DIE_STEP STEPS
//
// Trains an MLP with ddp and Adam for STEPS steps at a fixed global batch of 28 samples
// (GlobalBatchPlan) on data every worker draws alike. The worker of launcher rank DIE_RANK kills
// itself with SIGKILL as step DIE_STEP begins (-1: nobody). A survivor's step fails with a
// CommError; it forms the next generation (Membership), takes up the furthest state
// (recoverFromFurthest) and trains on at the new size. After each completed step every worker
// prints "step S world W samples I,J,...", its share; at the end rank 0 prints
// "parameter K: SUM WEIGHTED" for every parameter (%.9g).
#include <ATen/ATen.h>
#include <signal.h>
#include <torch/optim/adam.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "lockstep/comm/comm_error.h"
#include "lockstep/data/global_batches.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/rendezvous/membership.h"
#include "lockstep/train/recovery.h"
#include "support/elastic_steps.h"

using namespace lockstep;

namespace {

struct Job {
  at::Tensor x, y;
  GlobalBatchPlan plan;
};

void trainStep(Strategy& strategy, Mlp& mlp, const Job& job, int64_t step, const Generation& g) {
  const BatchShare share = job.plan.share(step, 0, g.rank, g.size);
  test::trainShare(strategy, *mlp, job.x, job.y, share);
  std::string ids;
  for (int64_t i : share.indices) ids += (ids.empty() ? "" : ",") + std::to_string(i);
  std::cout << "step " << step << " world " << g.size << " samples " << ids << std::endl;
}

void printParameters(Mlp& mlp) {
  int k = 0;
  for (const auto& p : mlp->parameters()) {
    const at::Tensor flat = p.detach().reshape(-1).to(at::kDouble);
    const at::Tensor weights = at::arange(flat.numel(), at::kDouble).remainder(7) + 1;
    std::printf("parameter %d: %.9g %.9g\n", k++, flat.sum().item<double>(), (flat * weights).sum().item<double>());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: elastic_trainer DIE_RANK DIE_STEP STEPS\n";
    return 2;
  }
  const int dieRank = std::stoi(argv[1]);
  const int64_t dieStep = std::stoll(argv[2]), steps = std::stoll(argv[3]);
  const auto options = test::launcherMembershipOptions("elastic_trainer");
  if (!options) return 2;
  Context ctx = init(InitOptions{});
  const int launcherRank = ctx.world.rank;
  torch::manual_seed(3);
  GlobalBatchOptions po;
  po.datasetSize = 28 * 16;
  po.globalBatch = 28;
  po.seed = 5;
  Job job{at::randn({po.datasetSize, 12}), at::randn({po.datasetSize, 5}), GlobalBatchPlan(po)};
  torch::manual_seed(100 + launcherRank);  // ddp starts every rank from rank 0's model
  Mlp mlp(MlpOptions{12, {32, 16}, 5});
  LayeredModel whole = wholeModel(mlp.ptr(), [](torch::nn::Module& m, const Batch& b) {
    return at::mse_loss(static_cast<MlpImpl&>(m).forward(b.inputs), b.targets);
  });
  StrategyBuilder build = [&](std::shared_ptr<Communicator> comm) {
    auto adam = std::make_unique<torch::optim::Adam>(mlp->parameters(), torch::optim::AdamOptions(0.01));
    return makeStrategy(whole, std::move(comm), StrategyOptions{}, std::move(adam));
  };
  Membership members(ctx.store, "worker" + std::to_string(launcherRank) + ":" + std::to_string(::getpid()),
                     launcherRank, *options);
  Generation g = members.next();
  std::unique_ptr<Strategy> strategy = build(g.comm);
  strategy->start();
  for (int64_t step = 0; step < steps;) {
    try {
      if (launcherRank == dieRank && step == dieStep) ::raise(SIGKILL);
      trainStep(*strategy, mlp, job, step, g);
      ++step;
    } catch (const CommError& e) {
      std::cerr << "step " << step << " failed: " << e.what() << "\n";
      g = members.next();
      Recovery r = recoverFromFurthest(std::move(strategy), step - 1, g.comm, build);
      std::cout << "generation " << g.number << ": rank " << g.rank << " of " << g.size << ", from step " << r.step
                << " of rank " << r.source << std::endl;
      strategy = std::move(r.strategy);
      step = r.step + 1;
    }
  }
  strategy->end();
  if (g.rank == 0) printParameters(mlp);
  return 0;
}
