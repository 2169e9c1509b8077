// mpi_runtime.h — the process-wide MPI state the MPI communicator shares:
// initialisation once (MPI_THREAD_SERIALIZED), the one mutex every MPI call
// holds, finalisation at exit unless a collective failed, and the reduction
// operations for the 16-bit float types. Included only by the MPI backend's
// sources (it includes <mpi.h>).
#pragma once

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <ATen/core/Tensor.h>

#include <mutex>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"

namespace lockstep::detail {

/// MPI's text for an error code.
std::string mpiErrorText(int code);
/// The MPI datatype of a supported dtype; 16-bit floats travel as MPI_UINT16_T
/// and reduce with MpiRuntime::op. MPI_DATATYPE_NULL for anything else.
MPI_Datatype mpiType(at::ScalarType t);

/// MPI_Comm_split of `parent` (a negative color: MPI_UNDEFINED, *out = MPI_COMM_NULL), errors returned
/// rather than fatal on the new communicator, and the global rank of each of its members (every rank
/// passes its own). The caller holds MpiRuntime's mutex; returns the first failing call's code.
int splitCommunicator(MPI_Comm parent, int color, int key, int globalRank, MPI_Comm* out,
                      std::vector<int>* globalRanks);

class MpiRuntime {
 public:
  /// Never destroyed: MPI is finalised from an atexit handler, after main.
  static MpiRuntime& get();

  /// Every MPI call holds this lock.
  std::mutex& mutex() { return mutex_; }

  /// Initialises MPI once (and the 16-bit reductions). Caller holds mutex().
  void ensureInitializedLocked();

  /// A communicator failed: MPI may hold operations that never finish, so the
  /// process must not wait in MPI_Finalize.
  void markFailed() { failed_ = true; }
  bool finalized() const { return finalized_; }

  /// The MPI operation reducing `dtype` by `op` (kAvg sums; the caller divides).
  MPI_Op op(at::ScalarType dtype, ReduceOp op) const;

 private:
  void makeOps();
  static void finalizeAtExit();

  std::mutex mutex_;
  bool initialized_ = false;
  bool ownsInit_ = false;
  bool failed_ = false;
  bool finalized_ = false;
  MPI_Op halfOps_[3]{};
  MPI_Op bf16Ops_[3]{};
};

}  // namespace lockstep::detail
