// mpi_runtime.cpp — process-wide MPI state (mpi_runtime.h).
#include "comm/mpi_runtime.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <fmt/format.h>

#include <cstdlib>

#include "lockstep/common/error.h"

namespace lockstep::detail {
namespace {

// User-defined reductions for the 16-bit float types: float32 arithmetic, one rounding per pairwise step.
template <typename T, ReduceOp Op>
void reduce16(void* in, void* inout, int* length, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) {
    float x = static_cast<float>(a[i]);
    float y = static_cast<float>(b[i]);
    float r = Op == ReduceOp::kMax ? (x > y ? x : y) : Op == ReduceOp::kMin ? (x < y ? x : y) : x + y;
    b[i] = static_cast<T>(r);
  }
}

}  // namespace

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<size_t>(length));
}

MPI_Datatype mpiType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kHalf:
    case at::kBFloat16: return MPI_UINT16_T;  // reduced by the user-defined ops
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MpiRuntime& MpiRuntime::get() {
  static MpiRuntime* runtime = new MpiRuntime();
  return *runtime;
}

void MpiRuntime::ensureInitializedLocked() {
  if (initialized_) return;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    // Large allreduces (the blocking path) use the ring algorithm unless the user chose:
    // between local ranks it beats OpenMPI's default choice for large buffers
    // (docs/communicator.md). setenv(..., 0) keeps the user's.
    ::setenv("OMPI_MCA_coll_tuned_use_dynamic_rules", "1", 0);
    ::setenv("OMPI_MCA_coll_tuned_allreduce_algorithm", "4", 0);
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) throw Error("MPI_Init_thread failed: " + mpiErrorText(rc));
    if (provided < MPI_THREAD_SERIALIZED) {
      throw Error(fmt::format("this MPI provides thread level {} but lockstep needs MPI_THREAD_SERIALIZED ({})",
                              provided, static_cast<int>(MPI_THREAD_SERIALIZED)));
    }
    std::atexit(&MpiRuntime::finalizeAtExit);
    ownsInit_ = true;
  }
  makeOps();
  initialized_ = true;
}

MPI_Op MpiRuntime::op(at::ScalarType dtype, ReduceOp op) const {
  bool half = dtype == at::kHalf;
  bool bf16 = dtype == at::kBFloat16;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return half ? halfOps_[0] : bf16 ? bf16Ops_[0] : MPI_SUM;
    case ReduceOp::kMax: return half ? halfOps_[1] : bf16 ? bf16Ops_[1] : MPI_MAX;
    case ReduceOp::kMin: return half ? halfOps_[2] : bf16 ? bf16Ops_[2] : MPI_MIN;
  }
  return MPI_SUM;
}

void MpiRuntime::makeOps() {
  MPI_Op_create(&reduce16<c10::Half, ReduceOp::kSum>, 1, &halfOps_[0]);
  MPI_Op_create(&reduce16<c10::Half, ReduceOp::kMax>, 1, &halfOps_[1]);
  MPI_Op_create(&reduce16<c10::Half, ReduceOp::kMin>, 1, &halfOps_[2]);
  MPI_Op_create(&reduce16<c10::BFloat16, ReduceOp::kSum>, 1, &bf16Ops_[0]);
  MPI_Op_create(&reduce16<c10::BFloat16, ReduceOp::kMax>, 1, &bf16Ops_[1]);
  MPI_Op_create(&reduce16<c10::BFloat16, ReduceOp::kMin>, 1, &bf16Ops_[2]);
}

void MpiRuntime::finalizeAtExit() {
  MpiRuntime& r = get();
  std::lock_guard<std::mutex> lock(r.mutex_);
  r.finalized_ = true;
  int done = 0;
  MPI_Finalized(&done);
  if (!r.ownsInit_ || done || r.failed_) return;
  MPI_Finalize();
}

int splitCommunicator(MPI_Comm parent, int color, int key, int globalRank, MPI_Comm* out,
                      std::vector<int>* globalRanks) {
  int rc = MPI_Comm_split(parent, color < 0 ? MPI_UNDEFINED : color, key, out);
  if (rc != MPI_SUCCESS || *out == MPI_COMM_NULL) return rc;
  MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  int size = 0;
  MPI_Comm_size(*out, &size);
  globalRanks->assign(static_cast<size_t>(size), -1);
  return MPI_Allgather(&globalRank, 1, MPI_INT, globalRanks->data(), 1, MPI_INT, *out);
}

}  // namespace lockstep::detail
