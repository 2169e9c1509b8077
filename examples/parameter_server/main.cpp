// Asynchronous training through a parameter server, with a straggler.
//
//   lockstep run -np 4 -- build/examples/parameter_server [SECONDS]
//
// The last rank serves the weights of a small regression MLP; the other three train it, each
// pushing gradients and pulling fresh weights at its own pace for SECONDS (default 3) wall-clock
// seconds. Worker 2 is a straggler: after each step it sleeps as long as the step took, so it runs
// at half speed. The run is made twice: with staleness bound s = 0 (every worker waits for the
// round: synchronous SGD) and with s = 4 (the fast workers push while the straggler computes).
// Rank 0 prints, per bound, the updates the server applied per second, each worker's steps, the
// largest staleness applied and the loss before and after. Exits 1 when the loss did not fall, an
// update exceeded its bound, or s = 4 applied no more updates per second than s = 0.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <lockstep/lockstep.h>
#include <lockstep/ps/parameter_server.h>

namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  double updatesPerSecond = 0, firstLoss = 0, lastLoss = 0;
  int64_t steps = 0, maxStaleness = -1;
};

torch::nn::Sequential makeModel() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(64, 256), torch::nn::Tanh(), torch::nn::Linear(256, 256),
                               torch::nn::Tanh(), torch::nn::Linear(256, 1));
}

torch::Tensor targetsOf(const torch::Tensor& x) {
  torch::manual_seed(7);
  const torch::Tensor teacher = torch::randn({64, 1}) / 8;
  return torch::tanh(x.matmul(teacher));
}

double evalLoss(torch::nn::Sequential& model) {
  torch::NoGradGuard noGrad;
  torch::manual_seed(99);
  const torch::Tensor x = torch::randn({2048, 64});
  return torch::mse_loss(model->forward(x), targetsOf(x)).item<double>();
}

Outcome train(lockstep::Context& ctx, int staleness, double seconds) {
  const lockstep::PsOptions options{/*servers=*/1, staleness};
  const lockstep::PsRole role = lockstep::psRole(ctx.world.rank, ctx.world.worldSize, options);
  auto model = makeModel();
  Outcome out;
  out.firstLoss = evalLoss(model);
  const auto t0 = Clock::now();
  if (role.server) {
    lockstep::ParameterServer server(ctx.comm, options, model->parameters(), [](const std::vector<at::Tensor>& p) {
      return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.05));
    });
    server.serve();
    out.updatesPerSecond = server.updates() / std::chrono::duration<double>(Clock::now() - t0).count();
    out.maxStaleness = server.stats().maxStaleness();
    out.steps = server.updates();
    return out;
  }
  lockstep::PsWorker worker(ctx.comm, options, model->parameters());
  worker.pull();
  torch::manual_seed(1000 + ctx.world.rank);
  while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
    const auto stepStart = Clock::now();
    const torch::Tensor x = torch::randn({256, 64});
    model->zero_grad();
    torch::mse_loss(model->forward(x), targetsOf(x)).backward();
    if (ctx.world.rank == 2) std::this_thread::sleep_for(Clock::now() - stepStart);  // the straggler
    worker.push();
  }
  worker.finish();
  out.steps = worker.pushes();
  out.maxStaleness = worker.maxStaleness();
  out.lastLoss = evalLoss(model);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  lockstep::Context ctx = lockstep::init();
  if (ctx.world.worldSize != 4) {
    if (ctx.world.rank == 0) std::fprintf(stderr, "parameter_server: run it on 4 workers (lockstep run -np 4)\n");
    return 2;
  }
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  bool ok = true;
  double rate[2] = {0, 0};
  const int bounds[2] = {0, 4};
  for (int i = 0; i < 2; ++i) {
    const Outcome o = train(ctx, bounds[i], seconds);
    // Every rank reports to rank 0 by one allreduce: updates/s (server), steps (workers), staleness.
    torch::Tensor report = torch::zeros({6}, torch::kDouble);
    if (ctx.world.rank == 3) report[0] = o.updatesPerSecond;
    if (ctx.world.rank < 3) report[1 + ctx.world.rank] = static_cast<double>(o.steps);
    report[4] = static_cast<double>(o.maxStaleness);
    std::vector<torch::Tensor> t{report};
    ctx.comm->allreduce(t, lockstep::ReduceOp::kMax)->wait();
    rate[i] = report[0].item<double>();
    if (ctx.world.rank == 0) {
      std::printf(
          "s=%d: %.0f updates/s, steps per worker %.0f / %.0f / %.0f (worker 2 at half speed), "
          "max staleness %.0f, loss %.4f -> %.4f\n",
          bounds[i], rate[i], report[1].item<double>(), report[2].item<double>(), report[3].item<double>(),
          report[4].item<double>(), o.firstLoss, o.lastLoss);
      ok = ok && o.lastLoss < 0.5 * o.firstLoss;
    }
    ok = ok && report[4].item<double>() <= bounds[i];
  }
  if (ctx.world.rank == 0) {
    std::printf("s=4 applied %.2fx the updates per second of s=0\n", rate[1] / rate[0]);
    ok = ok && rate[1] > rate[0];
    std::printf("%s\n", ok ? "parameter server OK" : "parameter server FAILED");
  }
  return ok ? 0 : 1;
}
