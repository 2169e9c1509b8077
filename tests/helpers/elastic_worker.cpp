// elastic_worker — a worker of an elastic `lockstep run` job for the launcher's tests.
//
//   lockstep run -np N --min-np A -- elastic_worker DIE_RANK
//
// Joins through init() and the job's membership (elasticMembershipOptions: the launcher's
// variables), allreduces 50 times in generation 1; the worker of rank DIE_RANK kills itself with
// SIGKILL before its 10th. A survivor prints "lost: <the CommError>", forms the next generation
// and prints "generation G: rank R of S, previous ranks P..., sum of previous ranks X" after one
// allreduce over it. Without the launcher's variables it exits with code 2.
#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <string>

#include "lockstep/comm/comm_error.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/rendezvous/membership.h"

using namespace lockstep;

namespace {

double sumOver(Communicator& comm, double value) {
  std::vector<at::Tensor> t{at::full({4096}, value, at::kFloat)};
  comm.allreduce(t)->wait();
  return t[0][0].item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: elastic_worker DIE_RANK\n";
    return 2;
  }
  const int dieRank = std::stoi(argv[1]);
  auto options = elasticMembershipOptions(Environment::fromProcess());
  if (!options) {
    std::cerr << "elastic_worker: not an elastic job (no " << kMinMembersVar << ")\n";
    return 2;
  }
  options->joinWindow = std::chrono::seconds(2);
  Context ctx = init(InitOptions{});
  Membership m(ctx.store, "worker" + std::to_string(ctx.world.rank) + ":" + std::to_string(::getpid()), ctx.world.rank,
               *options);
  Generation g = m.next();
  try {
    for (int i = 0; i < 50; ++i) {
      if (g.rank == dieRank && i == 9) ::raise(SIGKILL);
      sumOver(*g.comm, 1);
    }
    std::cerr << "no member was lost\n";
    return 1;
  } catch (const CommError& e) { std::cout << "lost: " << e.what() << std::endl; }
  g.comm.reset();
  g = m.next();
  std::cout << "generation " << g.number << ": rank " << g.rank << " of " << g.size << ", previous ranks";
  for (int p : g.previousRanks) std::cout << " " << p;
  std::cout << ", sum of previous ranks " << sumOver(*g.comm, g.previousRanks[static_cast<size_t>(g.rank)])
            << std::endl;
  return 0;
}
