#include "lockstep/rendezvous/init.h"

#include <ATen/Parallel.h>
#include <sched.h>

#include <fmt/format.h>

#include <thread>

#include "lockstep/comm/stall_inspector.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"

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

bool isLoopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}
}  // namespace

int workerThreads(const Environment& env, int localWorldSize) {
  if (auto n = env.getInt(env::kNumThreads, 1, 4096)) return static_cast<int>(*n);
  if (auto n = env.getInt("OMP_NUM_THREADS", 1, 4096)) return static_cast<int>(*n);
  return std::max(1, usableCores() / std::max(1, localWorldSize));
}

std::string chooseBackend(const std::string& requested, const WorldInfo& world, const std::string& source,
                          const Environment& env) {
  if (requested == "gloo") return requested;
  if (requested == "mpi") {
    if (!mpiBackendBuilt()) {
      throw ConfigError(fmt::format("{}=mpi: this lockstep was built without the MPI backend; install "
                                    "libopenmpi-dev (scripts/setup.sh does) and rebuild, or use gloo", source));
    }
    if (world.worldSize > 1 && world.source != WorldSource::kOpenMpi && !env.has("PMIX_RANK")) {
      throw ConfigError(fmt::format("{}=mpi needs workers started by mpirun (or `lockstep run --backend mpi`, or "
                                    "`srun --mpi=pmix`); these were started by {}", source, world.describe()));
    }
    return requested;
  }
  if (requested == "auto") {
    // MPI when mpirun started us (its shared-memory path is the fastest here), else Gloo.
    return mpiBackendBuilt() && world.source == WorldSource::kOpenMpi ? "mpi" : "gloo";
  }
  throw ConfigError(fmt::format("{}='{}': unknown backend; expected gloo, mpi or auto", source, requested));
}

Context init(const InitOptions& options) { return init(options, Environment::fromProcess()); }

Context init(const InitOptions& options, const Environment& env) {
  if (auto level = env.get(env::kLogLevel)) log::setLevel(log::parseLevel(*level, env::kLogLevel));
  WorldInfo world = detectWorld(env);
  if (world.worldSize > 1) log::setRank(world.rank);

  std::string backend = chooseBackend(options.backend.empty() ? env.get(env::kBackend).value_or("auto")
                                                              : options.backend,
                                      world, options.backend.empty() ? env::kBackend : "InitOptions::backend", env);
  auto timeout = options.timeout ? *options.timeout
                                 : env.getSeconds(env::kCommTimeout).value_or(std::chrono::seconds(300));
  if (timeout.count() <= 0) throw ConfigError(fmt::format("{} must be positive", env::kCommTimeout));

  int threads = workerThreads(env, world.localWorldSize);
  if (options.setThreads) at::set_num_threads(threads);

  Store store = world.worldSize == 1
                    ? Store::inMemory(timeout)
                    : Store::tcp(TcpStoreOptions{world.masterAddr, world.masterPort, world.rank == 0,
                                                 world.worldSize, timeout});
  std::shared_ptr<Communicator> comm;
  if (backend == "mpi") {
    MpiOptions mpi;
    mpi.timeout = timeout;
    comm = makeMpiCommunicator(mpi);
    if (comm->rank() != world.rank || comm->size() != world.worldSize) {
      throw ConfigError(fmt::format("MPI says rank {} of {}, the environment says rank {} of {} ({}); start the "
                                    "workers with mpirun (or `lockstep run --backend mpi`)",
                                    comm->rank(), comm->size(), world.rank, world.worldSize, world.describe()));
    }
  } else {
    GlooOptions gloo;
    gloo.rank = world.rank;
    gloo.worldSize = world.worldSize;
    gloo.timeout = timeout;
    gloo.interface = env.get("LOCKSTEP_IFACE").value_or("");
    gloo.hostname = isLoopback(world.masterAddr) ? "127.0.0.1" : "";
    comm = makeGlooCommunicator(store, gloo);
  }
  if (world.worldSize > 1) {
    std::chrono::milliseconds warn = env.getSeconds("LOCKSTEP_STALL_WARN_SECONDS").value_or(std::chrono::seconds(60));
    if (warn.count() > 0) {
      StallInspectorOptions stall;
      stall.warnAfter = std::chrono::duration_cast<std::chrono::milliseconds>(warn);
      stall.checkEvery = std::min<std::chrono::milliseconds>(std::chrono::seconds(1), stall.warnAfter / 2);
      comm = withStallInspector(std::move(comm), store, stall);
    }
  }
  log::debug(fmt::format("joined: {}; {} threads; backend {}", world.describe(), threads, backend));
  return Context{world, std::move(comm), store, at::get_num_threads()};
}

}  // namespace lockstep
