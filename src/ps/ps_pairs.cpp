// The parameter servers' layout and wiring: who serves, which elements each server holds, the
// (worker, server) groups, and the start from rank 0's weights.
#include "ps/ps_pairs.h"

#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include <algorithm>

#include "lockstep/common/error.h"

namespace lockstep {

void checkPsOptions(const PsOptions& options, int worldSize) {
  if (options.servers < 1 || options.servers >= worldSize) {
    throw ConfigError(
        fmt::format("ps.servers {}: expected at least 1 and fewer than the {} workers of the run "
                    "(the last ps.servers ranks serve, the others train)",
                    options.servers, worldSize));
  }
  LOCKSTEP_CHECK(options.checkpointEvery >= 0 && options.firstUpdate >= 0,
                 "PsOptions: checkpointEvery and firstUpdate must be 0 or more, not ", options.checkpointEvery, " and ",
                 options.firstUpdate);
  if (!(options.compensation >= 0)) {
    throw ConfigError(fmt::format("ps.compensation {}: expected 0 (off) or a positive lambda0 (2 is the usual start)",
                                  options.compensation));
  }
  if (options.staleness < 0) {
    throw ConfigError(fmt::format("ps.staleness {}: expected 0 (synchronous) or more updates", options.staleness));
  }
}

PsRole psRole(int rank, int worldSize, const PsOptions& options) {
  checkPsOptions(options, worldSize);
  PsRole role;
  role.servers = static_cast<int>(options.servers);
  role.workers = worldSize - role.servers;
  role.server = rank >= role.workers;
  role.index = role.server ? rank - role.workers : rank;
  return role;
}

std::pair<int64_t, int64_t> psShardRange(int64_t numel, int servers, int server) {
  const int64_t part = (numel + servers - 1) / servers;  // gradientPieces' cut of one group
  const int64_t first = std::min(numel, part * server);
  return {first, std::min(numel, first + part)};
}

int64_t PsStats::maxStaleness() const {
  for (size_t g = staleness.size(); g-- > 0;) {
    if (staleness[g] > 0) return static_cast<int64_t>(g);
  }
  return -1;
}

void PsStats::record(int64_t stalenessValue, int64_t lagValue) {
  auto bump = [](std::vector<int64_t>& histogram, int64_t value) {
    const auto i = static_cast<size_t>(std::max<int64_t>(value, 0));
    if (histogram.size() <= i) histogram.resize(i + 1, 0);
    ++histogram[i];
  };
  bump(staleness, stalenessValue);
  bump(lag, lagValue);
  ++updates;
}

namespace detail {

std::unique_ptr<PsPairs> connectPsPairs(const std::shared_ptr<Communicator>& comm, const PsOptions& options) {
  auto pairs = std::make_unique<PsPairs>();
  pairs->rank = comm->rank();
  pairs->role = psRole(comm->rank(), comm->size(), options);
  const PsRole& role = pairs->role;
  const int self = role.index, rounds = std::max(role.workers, role.servers);
  const size_t peers = static_cast<size_t>(role.server ? role.workers : role.servers);
  pairs->peers.resize(peers);
  pairs->peerRanks.resize(peers);
  // Round k pairs worker w with server (k - w) mod n: every round is a matching, and after n
  // rounds every worker met every server once (n = max(workers, servers)).
  for (int k = 0; k < rounds; ++k) {
    const int peer = ((k - self) % rounds + rounds) % rounds;
    const bool paired = peer < (role.server ? role.workers : role.servers);
    const int worker = role.server ? peer : self, server = role.server ? self : peer;
    auto group = comm->split(paired ? k * role.servers + server : -1, role.server ? 1 : 0,
                             fmt::format("ps worker{} server{}", worker, server));
    if (!paired) continue;
    pairs->peers[static_cast<size_t>(peer)] = std::move(group);
    pairs->peerRanks[static_cast<size_t>(peer)] = role.server ? worker : role.workers + server;
  }
  pairs->servers = comm->split(role.server ? 0 : -1, role.index, "ps servers");
  return pairs;
}

int64_t totalElements(const std::vector<at::Tensor>& parameters) {
  int64_t n = 0;
  for (const auto& p : parameters) n += p.numel();
  return n;
}

at::Tensor broadcastFlatParameters(Communicator& comm, const std::vector<at::Tensor>& parameters) {
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i].scalar_type() != at::kFloat) {
      throw Error(fmt::format("parameter server: parameter {} is {}; the parameter servers hold float32 parameters", i,
                              toString(parameters[i].scalar_type())));
    }
  }
  at::Tensor flat = at::empty({totalElements(parameters)}, at::kFloat);
  if (comm.rank() == 0) {
    c10::NoGradGuard noGrad;
    int64_t offset = 0;
    for (const auto& p : parameters) {
      flat.narrow(0, offset, p.numel()).copy_(p.detach().reshape({-1}));
      offset += p.numel();
    }
  }
  std::vector<at::Tensor> tensors{flat};
  comm.broadcast(tensors, 0)->wait();
  return flat;
}

int64_t packedBufferBytes(const std::vector<at::Tensor>& buffers) {
  int64_t n = 0;
  for (const auto& b : buffers) n += b.numel() * static_cast<int64_t>(b.element_size());
  return n;
}

void packBuffers(const std::vector<at::Tensor>& buffers, at::Tensor& packed) {
  c10::NoGradGuard noGrad;
  int64_t offset = 0;
  for (const auto& b : buffers) {
    const int64_t bytes = b.numel() * static_cast<int64_t>(b.element_size());
    packed.narrow(0, offset, bytes).copy_(b.detach().cpu().contiguous().reshape({-1}).view(at::kByte));
    offset += bytes;
  }
}

void unpackBuffers(const at::Tensor& packed, const std::vector<at::Tensor>& buffers) {
  c10::NoGradGuard noGrad;
  int64_t offset = 0;
  for (const auto& b : buffers) {
    const int64_t bytes = b.numel() * static_cast<int64_t>(b.element_size());
    // A copy starts at offset 0: viewing bytes as a wider type needs an aligned start.
    b.copy_(packed.narrow(0, offset, bytes).clone().view(b.scalar_type()).view(b.sizes()));
    offset += bytes;
  }
}

std::string psPeerName(const PsPairs& pairs, size_t peer) {
  const int rank = pairs.peerRanks[peer];
  return pairs.role.server ? fmt::format("worker {} (rank {})", peer, rank)
                           : fmt::format("parameter server {} (rank {})", peer, rank);
}

}  // namespace detail
}  // namespace lockstep
