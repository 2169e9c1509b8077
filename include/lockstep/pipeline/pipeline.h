// lockstep/pipeline/pipeline.h — a model split into consecutive stages on consecutive ranks (pipeline
// parallelism), with GPipe and 1F1B schedules over micro-batches.
//
//   std::vector<lockstep::Layer> layers = ...;   // the model as a chain: y = ln(...l1(l0(x)))
//   auto pipe = comm->split(rank / P, rank % P, "pipeline");   // P consecutive ranks, one per stage
//   lockstep::PipelineStage stage(layers, pipe, {P, /*microbatches=*/8});
//   auto opt = torch::optim::SGD(stage.parameters(), 0.1);
//   for (const Batch& batch : ...) {                     // every stage is given the same batch
//     opt.zero_grad();
//     double loss = stage.trainBatch(batch, lossFn);     // forward + backward, in the schedule's order
//     opt.step();
//   }
//
// Each stage runs its layers on micro-batches (the batch split along its first dimension into
// `microbatches` parts whose sizes differ by at most one); activations travel to the next stage and
// their gradients back by send/recv. Shapes are agreed once per micro-batch shape: the first time a
// shape is seen, the sender tells the receiver the activation's shape and dtype, afterwards only the
// data travels. The last stage computes the loss of each micro-batch, weighted by its share of the
// batch's rows, so the gradients are those of the batch's mean loss, as in the unsplit model.
//
// Schedules (PipelineSchedule): gpipe runs every forward, then every backward (fill-drain: M
// micro-batches of activations alive at once); 1f1b (PipeDream-flush) runs P-1-stage forwards to
// fill the pipe, then one forward and one backward alternately, then the remaining backwards, so at
// most P-stage micro-batches are alive. Both produce the same gradients; both idle (P-1)/(M+P-1) of
// a step with equal stages (the bubble), which lastTimings() measures.
//
// Every stage of a pipeline must call trainBatch/forward in the same order with batches of the same
// shape (stages other than the first use the batch's shape, the last its targets). Collectives of
// other groups (data parallelism across pipelines) are the caller's business; DistributedDataParallel
// over a stage's modules works through setDataParallel().
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/data/dataset.h"
#include "lockstep/nn/layer.h"
#include "lockstep/nn/precision.h"

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}

namespace lockstep {

class DistributedDataParallel;

enum class PipelineSchedule { kGpipe, k1f1b };
const char* toString(PipelineSchedule schedule);
/// "gpipe" or "1f1b"; ConfigError naming `what` otherwise.
PipelineSchedule parsePipelineSchedule(const std::string& text, const std::string& what);

/// One entry of a stage's schedule: the forward or the backward of micro-batch `micro`.
struct PipelineOp {
  enum Kind { kForward, kBackward } kind;
  int micro;
  bool operator==(const PipelineOp& o) const { return kind == o.kind && micro == o.micro; }
};
/// The order stage `stage` of `stages` runs its forwards and backwards over `micro` micro-batches.
std::vector<PipelineOp> pipelineSchedule(PipelineSchedule schedule, int stages, int stage, int micro);
/// The most micro-batches whose forward ran and backward did not, at any point of `ops`.
int peakMicrobatchesInFlight(const std::vector<PipelineOp>& ops);

/// Layers per stage (sums to layerElements.size()), every stage at least one layer, contiguous, chosen to
/// make the largest stage's parameter elements as small as possible (ties: earlier stages smaller).
std::vector<int64_t> balanceByParameters(const std::vector<int64_t>& layerElements, int stages);

struct PipelineOptions {
  int64_t stages = 1;        ///< P (config parallel.pipeline)
  int64_t microbatches = 0;  ///< M per batch (parallel.microbatches); 0: 4 x stages
  PipelineSchedule schedule = PipelineSchedule::k1f1b;
  std::vector<int64_t> balance;  ///< layers per stage (parallel.balance); empty: balanceByParameters
  /// Forward (and the loss) under this autocast; the Trainer sets it from TrainerOptions::precision.
  Precision precision = Precision::kFp32;
  /// Where the stage's layers, micro-batches and received activations are: the stage moves its
  /// layers there (the other stages' stay where they are). The Trainer sets it to the run's device.
  c10::Device device = c10::kCPU;
  int microbatchesOrDefault() const { return static_cast<int>(microbatches > 0 ? microbatches : 4 * stages); }
};

/// Throws ConfigError naming the parallel.* key when `options` cannot split `layerCount` layers over
/// `world` ranks: stages < 1 or not dividing world, more stages than layers, microbatches < 0,
/// a balance with the wrong number of entries, an entry < 1, or not summing to layerCount.
void checkPipelineOptions(const PipelineOptions& options, int64_t layerCount, int world);

/// The loss of a micro-batch from the last stage's output (mean over its rows).
using OutputLossFn = std::function<at::Tensor(const at::Tensor& output, const Batch& batch)>;

/// What the last trainBatch did on this stage, in seconds since it began.
struct PipelineTimings {
  struct Op {
    PipelineOp op;
    double start = 0, end = 0;  ///< the op's span, its receive wait included
    double waitSeconds = 0;     ///< of which waiting for the neighbour's activation or gradient
  };
  std::vector<Op> ops;
  double seconds = 0;         ///< first op's start to the end of the step (sends completed)
  double computeSeconds = 0;  ///< sum over ops of span minus wait
  int peakInFlight = 0;       ///< micro-batches stored for backward at once
  /// The most tensor bytes forward left allocated for backward (activations of the micro-batches in
  /// flight), sampled after each forward by the counting allocator (common/tensor_memory.h) less the
  /// gradients' bytes; -1 unless tracking is on.
  int64_t peakStoredBytes = -1;
  /// 1 - compute / seconds: the share of the step this stage was idle (-1 before any step).
  double idleFraction() const { return seconds > 0 ? 1.0 - computeSeconds / seconds : -1; }
};

class PipelineStage {
 public:
  /// `comm`: the pipeline group (its rank is the stage, its size the number of stages, which must
  /// equal options.stages). The stage keeps `layers[first, first + balance[stage])`.
  PipelineStage(std::vector<Layer> layers, std::shared_ptr<Communicator> comm, PipelineOptions options);
  ~PipelineStage();
  PipelineStage(const PipelineStage&) = delete;
  PipelineStage& operator=(const PipelineStage&) = delete;

  int stage() const { return stage_; }
  int stages() const { return static_cast<int>(options_.stages); }
  bool isFirst() const { return stage_ == 0; }
  bool isLast() const { return stage_ + 1 == stages(); }
  int microbatches() const { return options_.microbatchesOrDefault(); }
  /// The layers of this stage: [first, end) of the model's.
  int64_t firstLayer() const { return first_; }
  int64_t endLayer() const { return end_; }
  const std::vector<int64_t>& balance() const { return balance_; }
  /// This stage's modules and their parameters, in layer order, each once.
  const std::vector<std::shared_ptr<torch::nn::Module>>& modules() const { return modules_; }
  std::vector<at::Tensor> parameters() const;

  /// Gradients of this stage's modules are averaged by `ddp` (built over them, on the data group):
  /// every backward of a batch but the schedule's last runs under ddp->noSync().
  void setDataParallel(DistributedDataParallel* ddp) { ddp_ = ddp; }

  /// Forward and backward of `batch` in micro-batches; gradients accumulate into .grad, as for
  /// `scale` x the batch's mean loss. Returns the batch's mean loss (unscaled) on every stage.
  /// Collective over the pipeline group.
  double trainBatch(const Batch& batch, const OutputLossFn& loss, double scale = 1.0);
  /// Forward only, without autograd, micro-batch by micro-batch (fewer for a batch of fewer rows than
  /// microbatches()): the model's output on the last stage, an undefined tensor on the others.
  /// Collective over the pipeline group.
  at::Tensor forward(const Batch& batch);

  const PipelineTimings& lastTimings() const { return timings_; }

 private:
  struct Micro;
  at::Tensor runLayers(const at::Tensor& x) const;
  int64_t gradientBytes() const;
  void postActivationReceive(Micro& mb, double* waited);
  at::Tensor receiveActivation(Micro& mb, double* waited);
  void sendActivation(const std::vector<int64_t>& key, const at::Tensor& y);
  void runForward(std::vector<Micro>& micro, const std::vector<Batch>& parts, int m, const OutputLossFn& loss,
                  double scale);
  void runBackward(std::vector<Micro>& micro, int m, bool lastBackward);
  /// `batch` in microbatches() parts (fewerIfSmall: at most one per row).
  std::vector<Batch> split(const Batch& batch, bool fewerIfSmall) const;

  std::vector<Layer> layers_;
  std::shared_ptr<Communicator> comm_;
  PipelineOptions options_;
  std::vector<int64_t> balance_;
  int stage_ = 0;
  int64_t first_ = 0, end_ = 0;
  std::vector<std::shared_ptr<torch::nn::Module>> modules_;
  DistributedDataParallel* ddp_ = nullptr;
  /// Per micro-batch input shape: the activation this stage receives (dtype code, then sizes).
  std::map<std::vector<int64_t>, std::vector<int64_t>> received_;
  /// Per micro-batch input shape: whether this stage already told the next one its output's shape.
  std::map<std::vector<int64_t>, bool> announced_;
  std::vector<WorkHandle> pendingSends_;
  int64_t totalRows_ = 0;  // of the batch in trainBatch
  double lossSum_ = 0;     // the last stage's loss of the batch so far
  PipelineTimings timings_;
};

}  // namespace lockstep
