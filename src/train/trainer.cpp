// Trainer::fit: checks what it was given and runs one FitRun (fit_run.h), or,
// for schedule async_ps, one AsyncPsRun (async_ps_run.h).
#include "lockstep/train/trainer.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include "lockstep/comm/host_staging.h"
#include "lockstep/common/enum_names.h"
#include "lockstep/common/error.h"
#include "lockstep/ps/parameter_server.h"
#include "lockstep/rendezvous/placement.h"
#include "lockstep/rendezvous/world.h"
#include "train/async_ps_run.h"
#include "train/elastic_checks.h"
#include "train/fit_run.h"

namespace lockstep {

namespace {

constexpr EnumName<NanPolicy> kNanPolicyNames[] = {{NanPolicy::kStop, "stop"}, {NanPolicy::kSkip, "skip"}};
constexpr EnumName<Schedule> kScheduleNames[] = {{Schedule::kSync, "sync"}, {Schedule::kAsyncPs, "async_ps"}};

/// Where one fit runs: its options with the device resolved (the loader delivers batches
/// there) and the communicator its tensors go through.
struct PlacedRun {
  TrainerOptions options;
  std::shared_ptr<Communicator> comm;
};

/// `o`'s device resolved (placement.h) and `model` moved to it. On CUDA over a backend that moves
/// host memory (gloo, mpi), the communicator stages CUDA tensors through pinned host buffers.
PlacedRun placeOn(const TrainerOptions& o, std::shared_ptr<Communicator> comm, torch::nn::Module& model) {
  const int localRank = o.localRank >= 0 ? o.localRank : detectWorld(Environment::fromProcess()).localRank;
  const Placement placement = resolvePlacement(o.device, comm->backend(), localRank, "device");
  c10::Device device = placement.device;
  if (device.is_cuda()) {
    setWorkerDevice(device);  // this thread's and every later lockstep thread's current device
    if (o.schedule == Schedule::kAsyncPs && placement.backend == Backend::kNccl) {
      // Its servers keep their shards in host memory and talk to each worker on its own.
      throw ConfigError(
          fmt::format("schedule.type async_ps on {}: its parameter servers hold their shards in host memory and "
                      "exchange them over gloo or mpi, not nccl; start it with --backend gloo",
                      device.str()));
    }
    // A parameter server keeps its shard and optimizer in host memory: it needs no model on the GPU.
    if (o.schedule == Schedule::kAsyncPs && psRole(comm->rank(), comm->size(), o.ps).server) {
      device = c10::Device(c10::kCPU);
    } else if (placement.stagesThroughHost()) {
      comm = withHostStaging(std::move(comm));
    }
  }
  PlacedRun placed{o, std::move(comm)};
  placed.options.loader.device = device;
  // A pipeline stage moves its own layers (PipelineOptions::device); the rest stay in host memory.
  if (o.pipeline.stages <= 1) model.to(device);
  return placed;
}

}  // namespace

const char* toString(NanPolicy policy) { return enumName(kNanPolicyNames, policy); }
const char* toString(Schedule schedule) { return enumName(kScheduleNames, schedule); }
Schedule parseSchedule(const std::string& text, const std::string& what) {
  return parseEnum(kScheduleNames, text, what);
}
NanPolicy parseNanPolicy(const std::string& text, const std::string& what) {
  return parseEnum(kNanPolicyNames, text, what);
}

const char* toString(Phase phase) {
  switch (phase) {
    case Phase::kDataWait: return "data_wait";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kCommWait: return "comm_wait";
    case Phase::kOptimizer: return "optimizer";
  }
  return "unknown";
}

Trainer::Trainer(std::shared_ptr<Communicator> comm, TrainerOptions options)
    : comm_(std::move(comm)), options_(std::move(options)) {
  LOCKSTEP_CHECK(comm_ != nullptr, "the Trainer needs a communicator");
  LOCKSTEP_CHECK(options_.batchSize > 0, "batch size must be positive, got ", options_.batchSize);
  LOCKSTEP_CHECK(options_.accumulation > 0, "accumulation must be positive, got ", options_.accumulation);
  LOCKSTEP_CHECK(options_.epochs > 0 || options_.maxSteps > 0, "epochs or maxSteps must be positive");
  for (size_t i = 0; i < options_.callbacks.size(); ++i) {
    LOCKSTEP_CHECK(options_.callbacks[i] != nullptr, "TrainerOptions::callbacks[", i, "] is null");
  }
}

FitResult Trainer::fit(std::shared_ptr<torch::nn::Module> model, const LossFn& loss, const Dataset& train,
                       const Dataset* validation, const CorrectFn& correct) {
  LOCKSTEP_CHECK(model != nullptr, "Trainer::fit needs a model");
  return fit(wholeModel(std::move(model), loss, correct), train, validation);
}

FitResult Trainer::fit(const LayeredModel& model, const Dataset& train, const Dataset* validation) {
  LOCKSTEP_CHECK(model.model != nullptr && model.loss != nullptr, "Trainer::fit needs a model and a loss function");
  const PipelineOptions& pipeline = options_.pipeline;
  if (pipeline.stages > 1 && model.layers.empty()) {
    throw ConfigError(
        fmt::format("parallel.pipeline {} needs the model as a chain of layers: call Trainer::fit with "
                    "a LayeredModel",
                    pipeline.stages));
  }
  if (!model.layers.empty() || pipeline.stages != 1) {
    checkPipelineOptions(pipeline, static_cast<int64_t>(model.layers.size()), comm_->size());
  }
  if (pipeline.stages > 1 && options_.batchSize < pipeline.microbatchesOrDefault()) {
    throw ConfigError(
        fmt::format("trainer.batch_size {} cannot be split into {} micro-batches (parallel.microbatches; 0 means 4 x "
                    "parallel.pipeline): raise the batch size or lower parallel.microbatches",
                    options_.batchSize, pipeline.microbatchesOrDefault()));
  }
  const PlacedRun placed = placeOn(options_, comm_, *model.model);
  if (placed.options.elastic) detail::checkElasticOptions(placed.options);
  if (options_.schedule == Schedule::kAsyncPs) {
    return detail::AsyncPsRun(placed.comm, placed.options, model, faults_, train, validation).run();
  }
  return detail::FitRun(placed.comm, placed.options, model, faults_, train, validation).run();
}

}  // namespace lockstep
