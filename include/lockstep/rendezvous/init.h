// lockstep/rendezvous/init.h — one call that turns the environment into a communicator.
//
//   auto ctx = lockstep::init();          // reads the environment (world.h)
//   ctx.comm->allreduce(grads)->wait();   // world 1 works too
//
// init() detects the world, sets LibTorch's intra-op threads (LOCKSTEP_NUM_THREADS,
// else OMP_NUM_THREADS, else cores / local world size), tags log lines with the
// rank, meets the other ranks through a TCP store at the master address (served
// by `lockstep run` where LOCKSTEP_AGENT_STORE=1, else by rank 0), and connects
// the backend. Every rank must call it; it blocks until all
// ranks joined or the timeout passed (CommError kTimeout naming the master).
//
// The store admits only processes holding the job token (see jobToken), and
// listens on the master address itself (loopback stays loopback;
// LOCKSTEP_STORE_BIND=0.0.0.0 listens everywhere). Gloo binds to the address
// on the route to the master unless LOCKSTEP_IFACE names an interface. For
// world > 1 the communicator checks that ranks call the same collectives
// (desync_check.h, LOCKSTEP_DESYNC_CHECK) and warns about stalls
// (stall_inspector.h).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "lockstep/comm/communicator.h"
#include "lockstep/common/device.h"
#include "lockstep/common/env.h"
#include "lockstep/rendezvous/placement.h"
#include "lockstep/rendezvous/world.h"

namespace lockstep {

struct InitOptions {
  /// Timeout for joining and default per-operation timeout. Unset: LOCKSTEP_COMM_TIMEOUT
  /// (seconds) or 300 s.
  std::optional<std::chrono::milliseconds> timeout;
  /// "gloo", "mpi", "nccl" or "auto". Empty: LOCKSTEP_BACKEND, else "auto" — NCCL
  /// when every worker of a node has a GPU of its own (more than one worker), else
  /// MPI when mpirun started the workers and the MPI backend was built, else Gloo.
  std::string backend;
  /// Set LibTorch's intra-op thread count (see above).
  bool setThreads = true;
  /// The worker's device (lockstep/common/device.h, setWorkerDevice): made current in the
  /// calling thread and in every thread lockstep starts, as torchrun's scripts call
  /// torch.cuda.set_device(LOCAL_RANK). auto: cuda:(local rank mod visible GPUs) where the
  /// process sees a GPU, else the CPU; cuda without a visible GPU: ConfigError naming "device".
  /// The nccl backend always takes cuda:(local rank) (placement.h), and kCpu over it is a
  /// ConfigError. A program that trains on the CPU on a GPU machine passes kCpu, so that its
  /// workers open no CUDA context (backend auto then picks mpi or gloo).
  DeviceChoice device = DeviceChoice::kAuto;
};

struct Context {
  WorldInfo world;
  std::shared_ptr<Communicator> comm;
  Store store;          ///< the rendezvous store (shared with the backend, keys under "lockstep/")
  int numThreads = 0;   ///< LibTorch intra-op threads after init
  Placement placement;  ///< this worker's device and backend (placement.h)
};

Context init(const InitOptions& options = {});
Context init(const InitOptions& options, const Environment& env);

/// The backend `requested` ("gloo", "mpi", "nccl", "auto") resolves to for `world`;
/// ConfigError naming `source` (the variable or option it came from) when it
/// is unknown or cannot work (mpi without mpirun, nccl without a GPU per worker,
/// or not built). "auto" picks nccl only for workers that may train on a GPU (`device` not kCpu).
std::string chooseBackend(const std::string& requested, const WorldInfo& world, const std::string& source,
                          const Environment& env, DeviceChoice device = DeviceChoice::kAuto);

namespace detail {
/// What backend "auto" resolves to for `world` when the process sees `visibleGpus` GPUs and the
/// build has NCCL (`ncclBuilt`) and MPI (`mpiBuilt`): chooseBackend's rule with its facts given.
std::string autoBackend(const WorldInfo& world, DeviceChoice device, int visibleGpus, bool ncclBuilt, bool mpiBuilt);
/// Why the nccl backend cannot serve this rank of `world` when the process sees `visibleGpus`
/// GPUs and the build has NCCL (`built`): the ConfigError text naming `source`; nullopt when it fits.
std::optional<std::string> ncclMisfit(const WorldInfo& world, int visibleGpus, bool built, const std::string& source);
}  // namespace detail

/// The job token: LOCKSTEP_JOB_TOKEN, else the file LOCKSTEP_JOB_TOKEN_FILE names,
/// else (when `mpi` is given, i.e. mpirun started the ranks) one rank 0 draws
/// and broadcasts. ConfigError naming the rank and the variables otherwise.
std::string jobToken(const Environment& env, const WorldInfo& world, Communicator* mpi);

/// This host's address on the route to `host` (the interface Gloo should use to
/// reach the master). ConfigError when the master cannot be resolved or reached.
std::string addressTowards(const std::string& host, int port);

/// Threads a worker should use: LOCKSTEP_NUM_THREADS, else OMP_NUM_THREADS, else
/// max(1, cores / localWorldSize).
int workerThreads(const Environment& env, int localWorldSize);

}  // namespace lockstep
