// lockstep/comm/communicator.h — collectives between the ranks of a job.
//
// Contract:
// - Every rank must call the same collectives, in the same order, with tensors
//   of the same dtype and size (broadcast/allgather/reduce-scatter: as stated
//   per method). Operations of one communicator run one at a time in the
//   order they were submitted; submitting never blocks on the network.
// - Each call returns a Work at once. The tensors belong to the operation
//   until Work::wait() returned: do not read, write or free them before.
// - Each operation has a timeout (CollectiveOptions::timeout, or the
//   communicator's default). A peer that died or stopped calling produces a
//   CommError within that time, never a hang. After a failure the
//   communicator is unusable (see comm_error.h).
// - Supported dtypes: float32, float64, float16, bfloat16 for every operation;
//   int8/uint8/int32/int64 for all but ReduceOp::kAvg. Tensors must be dense
//   and contiguous; Gloo and MPI take CPU tensors (host_staging.h brings GPU
//   tensors to them through host memory), NCCL takes tensors on its GPU and
//   stages CPU tensors there (nccl.h). Lists may mix dtypes and sizes.
// - Methods may be called from any one thread at a time; a Communicator is
//   not meant to be shared by threads that submit concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/store/store.h"
#include "lockstep/comm/work.h"
#include "lockstep/common/comm_error.h"

namespace at {
class Tensor;
}

namespace lockstep {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* toString(ReduceOp op);

struct CollectiveOptions {
  /// 0 means the communicator's default timeout. A longer timeout than the
  /// communicator's is capped at it (the backend enforces that one itself).
  std::chrono::milliseconds timeout{0};
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backendName() const = 0;
  /// backendName() as a Backend; ConfigError for a name that is none of them.
  Backend backend() const;
  virtual std::chrono::milliseconds defaultTimeout() const = 0;

  /// Reduces every tensor of `tensors` elementwise across ranks, in place.
  /// A list is fused into one buffer per dtype (one message, not one per tensor).
  virtual WorkHandle allreduce(std::vector<at::Tensor>& tensors, ReduceOp op = ReduceOp::kSum,
                               const CollectiveOptions& options = {}) = 0;
  /// Copies `root`'s tensors into every other rank's, in place.
  virtual WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root, const CollectiveOptions& options = {}) = 0;
  /// output = concatenation over ranks of `input` (output.numel() == size() * input.numel(),
  /// same dtype). This is the flat form ZeRO needs. `input` may be output's own chunk
  /// (output.narrow(0, rank() * n, n)): an in-place all-gather, nothing copied in or out.
  virtual WorkHandle allgather(const at::Tensor& input, at::Tensor& output, const CollectiveOptions& options = {}) = 0;
  /// outputs[r] = rank r's `input`; outputs.size() == size(), each shaped like `input`.
  virtual WorkHandle allgather(const at::Tensor& input, std::vector<at::Tensor>& outputs,
                               const CollectiveOptions& options = {}) = 0;
  /// output = reduction over ranks of chunk rank() of `input`
  /// (input.numel() == size() * output.numel(), same dtype).
  virtual WorkHandle reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op = ReduceOp::kSum,
                                   const CollectiveOptions& options = {}) = 0;
  /// Returns once every rank has called barrier().
  virtual WorkHandle barrier(const CollectiveOptions& options = {}) = 0;
  /// Point to point. The receiver's tensor must match the sender's dtype and size.
  virtual WorkHandle send(const at::Tensor& tensor, int dst, int tag = 0, const CollectiveOptions& options = {}) = 0;
  virtual WorkHandle recv(at::Tensor& tensor, int src, int tag = 0, const CollectiveOptions& options = {}) = 0;

  /// Groups (MPI_Comm_split): ranks passing the same `color` (>= 0) form one
  /// communicator, ranked by `key`, ties by their rank here. Collective: every
  /// rank of this communicator calls it, in the same order relative to its
  /// other operations (earlier ones finish first). A rank passing a negative
  /// color gets nullptr. Groups have their own connections, timeouts, stall
  /// and desync checks; errors name the group (`name`, default "color<c>")
  /// and the global ranks. Groups can be split again.
  virtual std::shared_ptr<Communicator> split(int color, int key, const std::string& name = "");
  /// The global rank of each member, in this communicator's rank order (the world: 0..size()-1).
  virtual std::vector<int> globalRanks() const;
  /// The group's name; empty for the world.
  virtual std::string groupName() const { return ""; }
};

struct GlooOptions {
  int rank = 0;
  int worldSize = 1;
  /// Default and backend timeout of every operation, also for connecting.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// Address the transport binds to; empty: Gloo's default device (the address
  /// this machine's hostname resolves to).
  std::string hostname = "127.0.0.1";
  /// Network interface to bind (overrides hostname when set), e.g. "eth0".
  std::string interface;
};

/// A Communicator over Gloo (LibTorch's c10d ProcessGroupGloo) meeting through `store`.
/// Blocks until every rank connected or options.timeout passed (CommError kTimeout).
std::shared_ptr<Communicator> makeGlooCommunicator(const Store& store, const GlooOptions& options);

struct MpiOptions {
  /// Default timeout of every operation. MPI itself has none: lockstep enforces it.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// How often (microseconds) a background thread drives outstanding
  /// operations while nobody waits on them (e.g. gradient buckets during
  /// backward); 0 turns the thread off, so operations progress only inside
  /// wait() and later submissions. Overridden by LOCKSTEP_MPI_PROGRESS_US.
  int progressIntervalUs = 200;
  /// Allreduces of at least this many bytes run as blocking MPI_Allreduce on
  /// a communication thread (OpenMPI's tuned, pipelined algorithms) instead of
  /// MPI_Iallreduce (libnbc, which moves large buffers in fewer, bigger steps).
  /// Later operations queue behind such a call. 0: every allreduce blocking;
  /// -1: never. Overridden by LOCKSTEP_MPI_BLOCKING_BYTES.
  int64_t blockingBytes = int64_t(16) << 20;
};

/// True when this build of lockstep has the MPI backend (libopenmpi-dev was found).
bool mpiBackendBuilt();

/// A Communicator over MPI_COMM_WORLD (OpenMPI): the process must have been
/// started by `mpirun` (or `srun --mpi=pmix`). Initialises MPI on first use
/// (MPI_THREAD_SERIALIZED; lockstep serialises its own calls) and finalises it
/// at exit. Throws ConfigError when the backend was not built.
std::shared_ptr<Communicator> makeMpiCommunicator(const MpiOptions& options);

}  // namespace lockstep
