#include "lockstep/rendezvous/init.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include <thread>

#include "common/socket_address.h"
#include "lockstep/comm/desync_check.h"
#include "lockstep/comm/nccl.h"
#include "lockstep/comm/nccl_order.h"
#include "lockstep/comm/stall_inspector.h"
#include "lockstep/common/device.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/token.h"
#include "lockstep/rendezvous/membership.h"
#include "lockstep/rendezvous/placement.h"

namespace lockstep {

namespace {
int usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

std::string jobToken(const Environment& env, const WorldInfo& world, Communicator* mpi) {
  if (auto token = tokenFromEnvironment(env)) return *token;
  if (mpi == nullptr) {
    throw ConfigError(fmt::format(
        "rank {}: no job token. The rendezvous store at {}:{} admits only processes that hold the job's token; "
        "`lockstep run` hands one to its workers, and with the mpi backend rank 0 draws one; when you start "
        "the workers yourself (srun, mpirun with gloo, by hand) set {} to the same secret on every rank, or {} to a "
        "file holding it",
        world.rank, world.masterAddr, world.masterPort, kJobTokenVar, kJobTokenFileVar));
  }
  // Under mpirun the ranks already trust each other through MPI: rank 0 draws a token and sends it.
  std::string token = world.rank == 0 ? randomToken() : std::string(64, '0');
  std::vector<at::Tensor> bytes{at::empty({static_cast<int64_t>(token.size())}, at::kByte)};
  std::memcpy(bytes[0].data_ptr<uint8_t>(), token.data(), token.size());
  mpi->broadcast(bytes, 0)->wait();
  return std::string(reinterpret_cast<const char*>(bytes[0].data_ptr<uint8_t>()), token.size());
}

std::string addressTowards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result) != 0 || result == nullptr) {
    throw ConfigError(fmt::format("cannot resolve the master address '{}' ({})", host, env::kMasterAddr));
  }
  std::string address;
  for (addrinfo* a = result; a != nullptr && address.empty(); a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // A UDP connect sends nothing; it only asks the kernel which route and source address reach the master.
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      address = detail::hostOf(local);
    }
    ::close(fd);
  }
  freeaddrinfo(result);
  if (address.empty()) {
    throw ConfigError(
        fmt::format("no route from this host to the master {}:{}; check {} or choose an interface "
                    "with {} / --iface",
                    host, port, env::kMasterAddr, env::kIface));
  }
  return address;
}

int workerThreads(const Environment& env, int localWorldSize) {
  if (auto n = env.getInt(env::kNumThreads, 1, 4096)) return static_cast<int>(*n);
  if (auto n = env.getInt("OMP_NUM_THREADS", 1, 4096)) return static_cast<int>(*n);
  return std::max(1, usableCores() / std::max(1, localWorldSize));
}

namespace {

/// `comm` with NCCL's order when LOCKSTEP_NCCL_ORDER asks for it (a test aid, comm/nccl_order.h).
std::shared_ptr<Communicator> withNcclOrderFromEnv(std::shared_ptr<Communicator> comm, const Store& store,
                                                   const Environment& env) {
  auto order = detail::ncclOrderFromEnv(env);
  if (!order) return comm;
  log::info(fmt::format("LOCKSTEP_NCCL_ORDER: {} runs its operations in NCCL's order (stall limit {} s)",
                        comm->backendName(), order->stallLimit.count() / 1000.0));
  return detail::withNcclOrder(std::move(comm), store.withPrefix("lockstep"), *order);
}

}  // namespace

namespace detail {

std::optional<std::string> ncclMisfit(const WorldInfo& world, int visibleGpus, bool built, const std::string& source) {
  if (!built) {
    return fmt::format("{}=nccl: this lockstep was built against a LibTorch without NCCL; use gloo", source);
  }
  if (visibleGpus == 0) {
    return fmt::format(
        "{}=nccl: no CUDA device is visible to rank {} ({}); use gloo, which takes CUDA tensors through host "
        "memory",
        source, world.rank, describeCudaVisibleDevices());
  }
  if (world.localWorldSize > visibleGpus) {
    return fmt::format(
        "{}=nccl: {} workers on this node share {} GPU(s), and NCCL cannot put two ranks on one GPU; start at "
        "most {} worker(s) per node (-np gpu), or use gloo",
        source, world.localWorldSize, visibleGpus, visibleGpus);
  }
  return std::nullopt;
}

}  // namespace detail

namespace detail {

std::string autoBackend(const WorldInfo& world, DeviceChoice device, int visibleGpus, bool ncclBuilt, bool mpiBuilt) {
  // NCCL when every worker of this node has a GPU of its own and may train on it; else MPI when
  // mpirun started us (its shared-memory path is the fastest here); else Gloo.
  if (world.worldSize > 1 && device != DeviceChoice::kCpu && ncclBuilt &&
      visibleGpus >= std::max(1, world.localWorldSize)) {
    return "nccl";
  }
  return mpiBuilt && world.source == WorldSource::kOpenMpi ? "mpi" : "gloo";
}

}  // namespace detail

namespace {

/// NCCL needs this build to have it and a GPU of its own for every worker of this node.
void checkNcclFits(const WorldInfo& world, const std::string& source) {
  if (auto why = detail::ncclMisfit(world, visibleCudaDevices(), ncclBackendBuilt(), source)) throw ConfigError(*why);
}

/// A worker `lockstep run --min-np` started into the running job (kNewcomerVar): the job's store,
/// and a world of its own until it joins the members' next generation (train/elastic.h).
Context newcomerContext(const WorldInfo& world, const std::optional<std::string>& token, Store store,
                        const Placement& placement, std::chrono::milliseconds timeout) {
  if (!token) {
    throw ConfigError(
        fmt::format("{}=1: a newcomer joins a running job through its store, and {} has no job token "
                    "({}); only `lockstep run --min-np` starts newcomers",
                    kNewcomerVar, world.describe(), kJobTokenVar));
  }
  GlooOptions gloo;
  gloo.rank = 0;
  gloo.worldSize = 1;
  gloo.timeout = timeout;
  gloo.hostname = "127.0.0.1";
  auto comm = makeGlooCommunicator(Store::inMemory(timeout), gloo);
  log::debug(fmt::format("a newcomer to the running job ({}); store {}", world.describe(), store.description()));
  return Context{world, std::move(comm), store, at::get_num_threads(), placement};
}

}  // namespace

std::string chooseBackend(const std::string& requested, const WorldInfo& world, const std::string& source,
                          const Environment& env, DeviceChoice device) {
  if (requested == "gloo") return requested;
  if (requested == "mpi") {
    if (!mpiBackendBuilt()) {
      throw ConfigError(
          fmt::format("{}=mpi: this lockstep was built without the MPI backend; install "
                      "libopenmpi-dev (scripts/setup.sh does) and rebuild, or use gloo",
                      source));
    }
    if (world.worldSize > 1 && world.source != WorldSource::kOpenMpi && !env.has("PMIX_RANK")) {
      throw ConfigError(
          fmt::format("{}=mpi needs workers started by mpirun (or `lockstep run --backend mpi`, or "
                      "`srun --mpi=pmix`); these were started by {}",
                      source, world.describe()));
    }
    return requested;
  }
  if (requested == "nccl") {
    checkNcclFits(world, source);
    return requested;
  }
  if (requested == "auto") {
    return detail::autoBackend(world, device, visibleCudaDevices(), ncclBackendBuilt(), mpiBackendBuilt());
  }
  throw ConfigError(fmt::format("{}='{}': unknown backend; expected gloo, mpi, nccl or auto", source, requested));
}

Context init(const InitOptions& options) { return init(options, Environment::fromProcess()); }

Context init(const InitOptions& options, const Environment& env) {
  if (auto level = env.get(env::kLogLevel)) log::setLevel(log::parseLevel(*level, env::kLogLevel));
  WorldInfo world = detectWorld(env);
  if (world.worldSize > 1) log::setRank(world.rank);

  const std::string source = options.backend.empty() ? env::kBackend : "InitOptions::backend";
  const Backend backend =
      parseBackend(chooseBackend(options.backend.empty() ? env.get(env::kBackend).value_or("auto") : options.backend,
                                 world, source, env, options.device),
                   source);
  const Placement placement = resolvePlacement(options.device, backend, world.localRank);
  setWorkerDevice(placement.device);
  auto timeout =
      options.timeout ? *options.timeout : env.getSeconds(env::kCommTimeout).value_or(std::chrono::seconds(300));
  if (timeout.count() <= 0) throw ConfigError(fmt::format("{} must be positive", env::kCommTimeout));

  DesyncCheckOptions desync = desyncCheckFromEnv(env);  // a bad value fails before the rendezvous
  int threads = workerThreads(env, world.localWorldSize);
  if (options.setThreads) at::set_num_threads(threads);

  Store store = Store::inMemory(timeout);
  auto serveOrJoin = [&](const std::string& token) {
    TcpStoreOptions so;
    so.host = world.masterAddr;
    so.port = world.masterPort;
    so.isServer = world.rank == 0 && env.get(env::kAgentStore).value_or("") != "1";
    so.timeout = timeout;
    so.token = token;
    so.bindAddr = env.get(env::kStoreBind).value_or("");
    store = Store::tcp(so);
  };
  // The store comes first when the token is known: MPI_Init opens TCP ports of its own and
  // could take the master port a launcher picked a moment ago.
  std::optional<std::string> token;
  if (world.worldSize > 1) token = tokenFromEnvironment(env);
  if (token) serveOrJoin(*token);
  if (env.get(kNewcomerVar).value_or("") == "1") return newcomerContext(world, token, store, placement, timeout);
  std::shared_ptr<Communicator> comm;
  if (backend == Backend::kMpi) {
    MpiOptions mpi;
    mpi.timeout = timeout;
    comm = makeMpiCommunicator(mpi);
    if (comm->rank() != world.rank || comm->size() != world.worldSize) {
      throw ConfigError(
          fmt::format("MPI says rank {} of {}, the environment says rank {} of {} ({}); start the "
                      "workers with mpirun (or `lockstep run --backend mpi`)",
                      comm->rank(), comm->size(), world.rank, world.worldSize, world.describe()));
    }
  }
  if (world.worldSize > 1 && !token) serveOrJoin(jobToken(env, world, comm.get()));
  if (backend == Backend::kNccl) {
    NcclOptions nccl;
    nccl.rank = world.rank;
    nccl.worldSize = world.worldSize;
    nccl.deviceIndex = world.localRank;
    nccl.timeout = timeout;
    comm = makeNcclCommunicator(store, nccl);
  } else if (backend != Backend::kMpi) {
    GlooOptions gloo;
    gloo.rank = world.rank;
    gloo.worldSize = world.worldSize;
    gloo.timeout = timeout;
    gloo.interface = env.get(env::kIface).value_or("");
    if (gloo.interface.empty() && world.worldSize > 1)
      gloo.hostname = addressTowards(world.masterAddr, world.masterPort);
    if (world.worldSize == 1) gloo.hostname = "127.0.0.1";
    comm = makeGlooCommunicator(store, gloo);
  }
  if (world.worldSize > 1 && backend != Backend::kNccl) comm = withNcclOrderFromEnv(std::move(comm), store, env);
  if (world.worldSize > 1) comm = withDesyncCheck(std::move(comm), desync);
  if (world.worldSize > 1) {
    std::chrono::milliseconds warn = env.getSeconds("LOCKSTEP_STALL_WARN_SECONDS").value_or(std::chrono::seconds(60));
    if (warn.count() > 0) {
      StallInspectorOptions stall;
      stall.warnAfter = std::chrono::duration_cast<std::chrono::milliseconds>(warn);
      stall.checkEvery = std::min<std::chrono::milliseconds>(std::chrono::seconds(1), stall.warnAfter / 2);
      comm = withStallInspector(std::move(comm), store, stall);
    }
  }
  log::debug(fmt::format("joined: {}; {} threads; backend {}; store {}", world.describe(), threads, toString(backend),
                         store.description()));
  return Context{world, std::move(comm), store, at::get_num_threads(), placement};
}

}  // namespace lockstep
