// membership_worker — a real member process for the membership and elastic launch tests.
//
//   membership_worker PORT RANK DIE_RANK   a member the test starts itself: connects to the TCP
//                                          store the test serves at 127.0.0.1:PORT (token
//                                          "membership-test") with launcher rank RANK
//   membership_worker DIE_RANK             a worker of `lockstep run --min-np`: joins through
//                                          init() and the launcher's variables
//                                          (elasticMembershipOptions); without them, exit code 2
//
// Either joins generation 1 and allreduces 50 times; the member of rank DIE_RANK kills itself
// with SIGKILL before its 10th. A survivor prints "lost: <the CommError>", forms the next
// generation and prints "generation G: rank R of S, previous ranks P..., sum of previous ranks X"
// after one allreduce.
#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <string>

#include "lockstep/comm/comm_error.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/rendezvous/membership.h"
#include "support/elastic_steps.h"

using namespace lockstep;

namespace {

double sumOver(Communicator& comm, double value) {
  std::vector<at::Tensor> t{at::full({4096}, value, at::kFloat)};
  comm.allreduce(t)->wait();
  return t[0][0].item<double>();
}

int loseAndReform(Membership& m, int dieRank) {
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

std::string memberId(int rank) { return "member" + std::to_string(rank) + ":" + std::to_string(::getpid()); }

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2) {
    const auto options = test::launcherMembershipOptions("membership_worker");
    if (!options) return 2;
    Context ctx = init(InitOptions{});
    Membership m(ctx.store, memberId(ctx.world.rank), ctx.world.rank, *options);
    return loseAndReform(m, std::stoi(argv[1]));
  }
  if (argc != 4) {
    std::cerr << "usage: membership_worker PORT RANK DIE_RANK | membership_worker DIE_RANK\n";
    return 2;
  }
  const int port = std::stoi(argv[1]), rank = std::stoi(argv[2]);
  TcpStoreOptions so;
  so.port = port;
  so.token = "membership-test";
  so.timeout = std::chrono::seconds(30);
  MembershipOptions o;
  o.minMembers = 2;
  o.joinWindow = std::chrono::seconds(3);
  o.gloo.timeout = std::chrono::seconds(10);
  Membership m(Store::tcp(so), memberId(rank), rank, o);
  return loseAndReform(m, std::stoi(argv[3]));
}
