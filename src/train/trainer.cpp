#include "lockstep/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <signal.h>
#include <torch/nn/module.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/data/sampler.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/train/checkpoint.h"

namespace lockstep {

namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const TrainerOptions& o, std::vector<at::Tensor> params) {
  if (o.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weightDecay));
  }
  if (o.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(o.weightDecay));
  }
  if (o.optimizer == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(o.weightDecay));
  }
  throw ConfigError("optimizer '" + o.optimizer + "' is unknown; expected sgd, adam or adamw");
}

void setLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}


std::string stateKey(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

/// LibTorch's Optimizer::save keys each parameter's state by its address in
/// memory, which differs between processes; this writes it by position instead,
/// so a checkpoint is a pure function of the training state (and resumed runs
/// can be compared to uninterrupted ones byte for byte).
void saveOptimizer(torch::optim::Optimizer& optimizer, torch::serialize::OutputArchive& archive) {
  int64_t index = 0;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    auto& group = optimizer.param_groups()[g];
    torch::serialize::OutputArchive options;
    group.options().serialize(options);
    archive.write(fmt::format("group{}", g), options);
    for (const auto& p : group.params()) {
      auto it = optimizer.state().find(stateKey(p));
      archive.write(fmt::format("param{}/present", index), c10::IValue(it != optimizer.state().end()));
      if (it != optimizer.state().end()) {
        torch::serialize::OutputArchive state;
        it->second->serialize(state);
        archive.write(fmt::format("param{}/state", index), state);
      }
      ++index;
    }
  }
}

void loadOptimizer(torch::optim::Optimizer& optimizer, const std::string& type,
                   torch::serialize::InputArchive& archive) {
  int64_t index = 0;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    auto& group = optimizer.param_groups()[g];
    torch::serialize::InputArchive options;
    archive.read(fmt::format("group{}", g), options);
    group.options().serialize(options);
    for (const auto& p : group.params()) {
      c10::IValue present;
      archive.read(fmt::format("param{}/present", index), present);
      if (present.toBool()) {
        std::unique_ptr<torch::optim::OptimizerParamState> state;
        if (type == "sgd") state = std::make_unique<torch::optim::SGDParamState>();
        else if (type == "adam") state = std::make_unique<torch::optim::AdamParamState>();
        else state = std::make_unique<torch::optim::AdamWParamState>();
        torch::serialize::InputArchive stateArchive;
        archive.read(fmt::format("param{}/state", index), stateArchive);
        state->serialize(stateArchive);
        optimizer.state()[stateKey(p)] = std::move(state);
      } else {
        optimizer.state().erase(stateKey(p));
      }
      ++index;
    }
  }
}

at::Generator cpuGenerator() { return at::detail::getDefaultCPUGenerator(); }

std::string serialise(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

CheckpointInfo readInfo(torch::serialize::InputArchive& archive) {
  CheckpointInfo info;
  auto readInt = [&](const char* key) {
    c10::IValue v;
    archive.read(key, v);
    return v.toInt();
  };
  info.step = readInt("meta/step");
  info.epoch = readInt("meta/epoch");
  info.batchInEpoch = readInt("meta/batch_in_epoch");
  info.worldSize = readInt("meta/world_size");
  info.batchSize = readInt("meta/batch_size");
  c10::IValue keys;
  archive.read("meta/extra_keys", keys);
  std::istringstream lines(keys.toStringRef());
  std::string key;
  while (std::getline(lines, key)) {
    if (key.empty()) continue;
    c10::IValue value;
    archive.read("extra/" + key, value);
    info.extras.emplace_back(key, value.toStringRef());
  }
  return info;
}

void loadArchive(const std::string& path, torch::serialize::InputArchive& archive) {
  std::string payload = readCheckpoint(path);
  try {
    archive.load_from(payload.data(), payload.size());
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("checkpoint {} has a valid frame but an unreadable archive: {}", path,
                                      std::string(e.what()).substr(0, 300)));
  }
}


}  // namespace

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

CheckpointInfo readCheckpointInfo(const std::string& path) {
  torch::serialize::InputArchive archive;
  loadArchive(path, archive);
  try {
    return readInfo(archive);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("checkpoint {} lacks lockstep's metadata: {}", path,
                                      std::string(e.what()).substr(0, 300)));
  }
}

CheckpointInfo loadModelFromCheckpoint(const std::string& path, torch::nn::Module& model) {
  torch::serialize::InputArchive archive;
  loadArchive(path, archive);
  try {
    torch::serialize::InputArchive modelArchive;
    archive.read("model", modelArchive);
    model.load(modelArchive);
    return readInfo(archive);
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("checkpoint {} does not fit this model: {}", path,
                                      std::string(e.what()).substr(0, 300)));
  }
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

FitResult Trainer::fit(std::shared_ptr<torch::nn::Module> model, const LossFn& lossFn, const Dataset& train,
                       const Dataset* validation, const CorrectFn& correct) {
  // Every time the callbacks see is microseconds since this clock read.
  const auto origin = Clock::now();
  const double unixTimeAtOrigin =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto sinceOrigin = [origin](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin).count();
  };
  const TrainerOptions& o = options_;
  const auto& callbacks = o.callbacks;
  const bool observed = !callbacks.empty();
  Communicator& comm = *comm_;
  const int rank = comm.rank();
  const int world = comm.size();
  const bool master = rank == 0;
  const int64_t n = train.size();
  LOCKSTEP_CHECK(n > 0, "the training set is empty");

  DistributedSampler sampler(SamplerOptions{n, rank, world, /*shuffle=*/true, o.seed, /*dropLast=*/false});
  const int64_t microPerEpoch = sampler.numBatches(o.batchSize, /*dropLastBatch=*/true);
  const int64_t stepsPerEpoch = microPerEpoch / o.accumulation;
  if (stepsPerEpoch == 0) {
    throw ConfigError(fmt::format("the training set has {} samples: too few for one step of {} workers x batch {} x "
                                  "accumulation {}; lower trainer.batch_size", n, world, o.batchSize, o.accumulation));
  }
  const int64_t totalSteps = o.maxSteps > 0 ? o.maxSteps : o.epochs * stepsPerEpoch;
  const int64_t globalBatch = o.batchSize * world * o.accumulation;
  LrScalingOptions scaling = o.lrScaling;
  if (scaling.baseBatch == 0) scaling.baseBatch = o.batchSize * o.accumulation;

  auto optimizer = makeOptimizer(o, model->parameters());

  // ---- resume ---------------------------------------------------------------
  FitResult result;
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batchInEpoch = 0;
  std::unique_ptr<CheckpointDir> checkpoints;
  if (!o.checkpointDir.empty()) checkpoints = std::make_unique<CheckpointDir>(o.checkpointDir, o.keepLast);
  std::string resumePath;
  if (o.resume != "none" && o.resume != "auto") {
    resumePath = o.resume;
  } else if (o.resume == "auto" && checkpoints) {
    // Rank 0 picks the newest checkpoint that reads back whole; everyone loads that one.
    int64_t chosen = -1;
    if (master) {
      auto entries = checkpoints->list();
      for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        try {
          readCheckpoint(it->path);
          chosen = it->step;
          break;
        } catch (const CheckpointError& e) {
          log::warn(fmt::format("skipping unusable checkpoint: {}", e.what()));
        }
      }
    }
    std::vector<at::Tensor> choice{at::tensor({chosen}, at::kLong)};
    comm.broadcast(choice, 0)->wait();
    chosen = choice[0].item<int64_t>();
    if (chosen >= 0) resumePath = checkpoints->pathFor(chosen);
  }
  if (!resumePath.empty()) {
    torch::serialize::InputArchive archive;
    loadArchive(resumePath, archive);
    CheckpointInfo info;
    try {
      torch::serialize::InputArchive modelArchive;
      archive.read("model", modelArchive);
      model->load(modelArchive);
      torch::serialize::InputArchive optimizerArchive;
      archive.read("optimizer", optimizerArchive);
      loadOptimizer(*optimizer, o.optimizer, optimizerArchive);
      at::Tensor rngState;
      archive.read("meta/rng", rngState);
      auto gen = cpuGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rngState);
      info = readInfo(archive);
    } catch (const std::exception& e) {
      throw CheckpointError(fmt::format("cannot resume from {}: {}", resumePath, std::string(e.what()).substr(0, 300)));
    }
    step = info.step;
    epoch = info.epoch;
    batchInEpoch = info.batchInEpoch;
    if (info.worldSize != world || info.batchSize != o.batchSize) {
      // Keep the position in samples: the same global sample count, re-divided.
      int64_t consumed = info.batchInEpoch * info.batchSize * info.worldSize;
      batchInEpoch = consumed / (o.batchSize * world);
      batchInEpoch -= batchInEpoch % o.accumulation;
      log::warn(fmt::format("resuming a run of {} workers x batch {} with {} workers x batch {}: continuing epoch {} "
                            "at micro-batch {}", info.worldSize, info.batchSize, world, o.batchSize, epoch, batchInEpoch));
    }
    result.resumedFromStep = step;
    if (master) {
      log::info(fmt::format("resumed from {}: step {}, epoch {}, micro-batch {} of the epoch", resumePath, step, epoch,
                            batchInEpoch));
    }
  }

  DdpOptions ddpOptions;
  ddpOptions.bucketCapMb = o.bucketCapMb;
  ddpOptions.firstBucketCapMb = o.firstBucketCapMb;
  ddpOptions.findUnusedParameters = o.findUnusedParameters;
  ddpOptions.compression = o.compression;
  ddpOptions.broadcastBuffersEachSync = o.broadcastBuffers;
  DistributedDataParallel ddp(model, comm_, ddpOptions);

  if (master) {
    log::info(fmt::format(
        "training on {} worker(s): {} samples, per-worker batch {}{}, global batch {}; lr {} scaled to {} ({} rule, base "
        "batch {}){}; {} optimizer steps ({} per epoch); DDP {} bucket(s), {} compression",
        world, n, o.batchSize, o.accumulation > 1 ? fmt::format(" x {} accumulated", o.accumulation) : "",
        globalBatch, o.lr, scaledLearningRate(o.lr, globalBatch, scaling), toString(scaling.rule), scaling.baseBatch,
        scaling.warmupSteps > 0 ? fmt::format(", warmup {} steps", scaling.warmupSteps) : "", totalSteps,
        stepsPerEpoch, ddp.numBuckets(), toString(o.compression)));
  }
  if (observed) {
    FitInfo info;
    info.rank = rank;
    info.worldSize = world;
    info.totalSteps = totalSteps;
    info.startStep = step;
    info.stepsPerEpoch = stepsPerEpoch;
    info.epochs = o.maxSteps > 0 ? (totalSteps + stepsPerEpoch - 1) / stepsPerEpoch : o.epochs;
    info.globalBatch = globalBatch;
    info.origin = origin;
    info.unixTimeAtOrigin = unixTimeAtOrigin;
    for (const auto& c : callbacks) c->onFitStart(info);
  }

  int64_t savedStep = -1;
  auto saveCheckpoint = [&]() {
    if (!checkpoints) return;
    savedStep = step;
    if (master) {
      torch::serialize::OutputArchive archive;
      torch::serialize::OutputArchive modelArchive;
      model->save(modelArchive);
      archive.write("model", modelArchive);
      torch::serialize::OutputArchive optimizerArchive;
      saveOptimizer(*optimizer, optimizerArchive);
      archive.write("optimizer", optimizerArchive);
      at::Tensor rngState;
      {
        auto gen = cpuGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        rngState = gen.get_state();
      }
      archive.write("meta/rng", rngState, /*is_buffer=*/true);
      archive.write("meta/step", c10::IValue(step));
      archive.write("meta/epoch", c10::IValue(epoch));
      archive.write("meta/batch_in_epoch", c10::IValue(batchInEpoch));
      archive.write("meta/world_size", c10::IValue(static_cast<int64_t>(world)));
      archive.write("meta/batch_size", c10::IValue(o.batchSize));
      std::string keys;
      for (const auto& [key, value] : o.checkpointExtras) {
        keys += key + "\n";
        archive.write("extra/" + key, c10::IValue(value));
      }
      archive.write("meta/extra_keys", c10::IValue(keys));
      result.lastCheckpoint = checkpoints->save(step, serialise(archive));
      log::info(fmt::format("checkpoint {} written (step {})", result.lastCheckpoint, step));
    }
    if (o.crashAfterStep > 0 && step == o.crashAfterStep) {
      // Every rank gets here; the barrier keeps the others alive until rank 0
      // wrote the file (a rank killed first would make the launcher stop rank 0 mid-write).
      comm.barrier()->wait();
      log::warn(fmt::format("fault injection: killing this worker after step {}", step));
      ::raise(SIGKILL);
    }
  };

  DataLoader loader(train, o.loader);
  auto validate = [&]() {
    at::NoGradGuard noGrad;
    model->eval();
    int64_t rows = validation->size();
    double sum = 0;
    int64_t count = 0;
    int64_t right = 0;
    std::vector<std::vector<int64_t>> plan;
    for (int64_t i = rank; i < rows; i += world) {
      if (plan.empty() || static_cast<int64_t>(plan.back().size()) == o.batchSize) plan.emplace_back();
      plan.back().push_back(i);
    }
    DataLoader validationLoader(*validation, o.loader);
    size_t batches = plan.size();
    validationLoader.start(std::move(plan), 0);
    for (size_t k = 0; k < batches; ++k) {
      Batch batch = validationLoader.next();
      int64_t rowsHere = batch.inputs.size(0);
      sum += lossFn(*model, batch).item<double>() * static_cast<double>(rowsHere);
      if (correct) right += correct(*model, batch);
      count += rowsHere;
    }
    model->train();
    std::vector<at::Tensor> totals{at::tensor({sum, static_cast<double>(count), static_cast<double>(right)}, at::kDouble)};
    comm.allreduce(totals, ReduceOp::kSum)->wait();
    double total = totals[0][1].item<double>();
    result.lastValidationLoss = total > 0 ? totals[0][0].item<double>() / total : -1;
    if (correct && total > 0) result.lastValidationAccuracy = totals[0][2].item<double>() / total;
  };

  int64_t validatedStep = -1;
  auto runValidation = [&](const std::string& when, int64_t ofEpoch) {
    validate();
    validatedStep = step;
    if (observed) {
      ValidationRecord record{step, ofEpoch, result.lastValidationLoss, result.lastValidationAccuracy,
                              sinceOrigin(Clock::now())};
      for (const auto& c : callbacks) c->onValidation(record);
    }
    if (master) {
      std::string accuracy = result.lastValidationAccuracy >= 0
                                 ? fmt::format(", accuracy {:.2f}%", 100 * result.lastValidationAccuracy)
                                 : "";
      log::info(fmt::format("{} validation loss {:.4f}{}", when, result.lastValidationLoss, accuracy));
    }
  };

  // ---- the loop ---------------------------------------------------------------
  model->train();
  double windowLoss = 0;
  int64_t windowSteps = 0;
  auto windowStart = Clock::now();
  Clock::time_point timedStart;
  Clock::time_point timedEnd;
  int64_t timedSteps = -1;  // the first step of the run warms up and is not timed
  // Phase timing: consecutive clock reads, so the phases tile the step.
  std::array<double, kPhaseCount> phaseUs{};       // this step
  std::array<double, kPhaseCount> phaseTotalUs{};  // timed steps
  double stepTotalUs = 0;
  double commTotalUs = 0;
  StepRecord record;  // reused: no allocation per step once its vectors have grown
  Clock::time_point mark;
  auto endPhase = [&](Phase phase) {
    auto now = Clock::now();
    double us = std::chrono::duration<double, std::micro>(now - mark).count();
    phaseUs[static_cast<size_t>(phase)] += us;
    if (observed) record.phases.push_back(PhaseSpan{phase, sinceOrigin(mark), us});
    mark = now;
  };
  auto runStart = Clock::now();
  while (step < totalSteps) {
    sampler.setEpoch(epoch);
    {
      // The loader prepares this epoch's remaining micro-batches (at most up to the last step).
      int64_t stepsLeft = totalSteps - step;
      int64_t last = std::min(microPerEpoch - (microPerEpoch - batchInEpoch) % o.accumulation,
                              batchInEpoch + stepsLeft * o.accumulation);
      std::vector<std::vector<int64_t>> plan;
      for (int64_t b = batchInEpoch; b < last; ++b) plan.push_back(sampler.batch(b, o.batchSize));
      loader.start(std::move(plan), epoch);
    }
    while (batchInEpoch + o.accumulation <= microPerEpoch && step < totalSteps) {
      const double lr = learningRateAt(step, o.lr, globalBatch, scaling);
      setLearningRate(*optimizer, lr);
      // Undefined rather than zeroed (LibTorch 1.13's zero_grad() fills zeros): autograd then
      // hands its gradient over without a copy, and DDP has no zeros to add into its
      // buckets (80 MB of them per step on a 20M-parameter model).
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
      double stepLoss = 0;
      phaseUs.fill(0);
      if (observed) {
        record.phases.clear();
        record.buckets.clear();
      }
      mark = Clock::now();
      const auto stepStart = mark;
      for (int64_t m = 0; m < o.accumulation; ++m) {
        Batch batch = loader.next();
        endPhase(Phase::kDataWait);
        at::Tensor loss = lossFn(*model, batch) / static_cast<double>(o.accumulation);
        stepLoss += loss.item<double>();
        endPhase(Phase::kForward);
        if (m + 1 < o.accumulation) {
          auto guard = ddp.noSync();
          loss.backward();
        } else {
          loss.backward();
        }
        endPhase(Phase::kBackward);
      }
      ddp.finishGradientSync();
      endPhase(Phase::kCommWait);
      if (o.clipGradNorm > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), o.clipGradNorm);
      optimizer->step();
      endPhase(Phase::kOptimizer);
      const double stepUs = std::chrono::duration<double, std::micro>(mark - stepStart).count();
      // Communication time: the union of the buckets' [launch, completion]
      // intervals (they are launched in order, so one sweep merges them).
      double commUs = 0;
      if (world > 1) {
        const auto& timings = ddp.lastSyncTimings();
        Clock::time_point coveredUntil{};
        int64_t bytes = 0;
        for (const auto& t : timings) {
          auto begin = std::max(t.launched, coveredUntil);
          if (t.completed > begin) commUs += std::chrono::duration<double, std::micro>(t.completed - begin).count();
          coveredUntil = std::max(coveredUntil, t.completed);
          bytes += t.bytes;
          if (observed) record.buckets.push_back(BucketSpan{t.bucket, t.bytes, sinceOrigin(t.launched),
                                                            sinceOrigin(t.completed)});
        }
        result.breakdown.buckets = static_cast<int>(timings.size());
        result.breakdown.bucketBytes = bytes;
      }
      batchInEpoch += o.accumulation;
      ++step;
      if (timedSteps < 0) {
        timedStart = Clock::now();
        timedSteps = 0;
      } else {
        timedEnd = Clock::now();
        ++timedSteps;
        for (size_t p = 0; p < phaseUs.size(); ++p) phaseTotalUs[p] += phaseUs[p];
        stepTotalUs += stepUs;
        commTotalUs += commUs;
      }
      if (observed) {
        record.step = step;
        record.epoch = epoch;
        record.startUs = sinceOrigin(stepStart);
        record.durationUs = stepUs;
        record.loss = stepLoss;
        record.lr = lr;
        for (const auto& c : callbacks) c->onStepEnd(record);
      }
      windowLoss += stepLoss;
      ++windowSteps;
      if (step % o.logEvery == 0 || step == totalSteps) {
        std::vector<at::Tensor> l{at::tensor({windowLoss / static_cast<double>(windowSteps)}, at::kDouble)};
        comm.allreduce(l, ReduceOp::kAvg)->wait();
        result.lastTrainLoss = l[0].item<double>();
        auto now = Clock::now();
        double seconds = std::chrono::duration<double>(now - windowStart).count();
        double samplesPerSecond = static_cast<double>(windowSteps * globalBatch) / seconds;
        if (master) {
          log::info(fmt::format("step {}/{} epoch {} loss {:.4f} lr {:.3g} {:.0f} samples/s", step, totalSteps, epoch + 1,
                                result.lastTrainLoss, lr, samplesPerSecond));
        }
        if (observed) {
          LogRecord logRecord{step, totalSteps, epoch, result.lastTrainLoss, lr, samplesPerSecond,
                              seconds / static_cast<double>(windowSteps), sinceOrigin(now)};
          for (const auto& c : callbacks) c->onLog(logRecord);
        }
        windowLoss = 0;
        windowSteps = 0;
        windowStart = Clock::now();
      }
      if (o.checkpointEvery > 0 && step % o.checkpointEvery == 0) saveCheckpoint();
    }
    if (batchInEpoch + o.accumulation > microPerEpoch) {
      // The epoch is complete.
      epoch += 1;
      batchInEpoch = 0;
      if (o.validate && validation) runValidation(fmt::format("epoch {}", epoch), epoch - 1);
      if (o.checkpointEvery == 0) saveCheckpoint();
    }
  }
  // A run that stops inside an epoch is still measured at its end.
  if (o.validate && validation && validatedStep != step && step > result.resumedFromStep) {
    runValidation(fmt::format("step {}", step), epoch);
  }
  if (checkpoints && savedStep != step) saveCheckpoint();
  result.steps = step;
  result.worldSize = world;
  result.globalBatch = globalBatch;
  result.dataWaitSeconds = loader.waitSeconds();
  result.seconds = std::chrono::duration<double>(Clock::now() - runStart).count();
  StepBreakdown& b = result.breakdown;
  if (timedSteps > 0) {
    // From the end of the first step to the end of the last: the final
    // validation and checkpoint are not training throughput.
    double timed = std::chrono::duration<double>(timedEnd - timedStart).count();
    result.samplesPerSecond = static_cast<double>(timedSteps * globalBatch) / timed;
    const double perStep = 1e-6 / static_cast<double>(timedSteps);
    b.steps = timedSteps;
    for (size_t p = 0; p < phaseTotalUs.size(); ++p) b.phaseSeconds[p] = phaseTotalUs[p] * perStep;
    b.stepSeconds = stepTotalUs * perStep;
    b.commSeconds = commTotalUs * perStep;
    b.commExposedSeconds = b.phase(Phase::kCommWait);
    if (world > 1 && b.commSeconds > 0) {
      b.commHiddenFraction = std::clamp(1.0 - b.commExposedSeconds / b.commSeconds, 0.0, 1.0);
    }
  }
  b.stepSecondsMax = b.stepSeconds;
  b.commExposedSecondsMax = b.commExposedSeconds;
  if (world > 1) {
    std::vector<at::Tensor> slowest{at::tensor({b.stepSeconds, b.commExposedSeconds}, at::kDouble)};
    comm.allreduce(slowest, ReduceOp::kMax)->wait();
    b.stepSecondsMax = slowest[0][0].item<double>();
    b.commExposedSecondsMax = slowest[0][1].item<double>();
  }
  if (master) {
    log::info(fmt::format("done: {} steps in {:.1f} s, {:.0f} samples/s (global, after the first step), {:.1f} s "
                          "waiting for data", step, result.seconds, result.samplesPerSecond, result.dataWaitSeconds));
    if (b.steps > 0) {
      std::string commText = b.commHiddenFraction >= 0
                             ? fmt::format("; allreduce {:.1f} ms per step, {:.0f}% hidden behind backward",
                                           1e3 * b.commSeconds, 100 * b.commHiddenFraction)
                             : "";
      log::info(fmt::format("per step (rank 0, mean of {}): {:.1f} ms = data wait {:.1f} + forward {:.1f} + backward "
                            "{:.1f} + comm wait {:.1f} + optimizer {:.1f}{}", b.steps, 1e3 * b.stepSeconds,
                            1e3 * b.phase(Phase::kDataWait), 1e3 * b.phase(Phase::kForward),
                            1e3 * b.phase(Phase::kBackward), 1e3 * b.phase(Phase::kCommWait),
                            1e3 * b.phase(Phase::kOptimizer), commText));
    }
  }
  for (const auto& c : callbacks) c->onFitEnd(result);
  return result;
}

}  // namespace lockstep
