#include "lockstep/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <signal.h>
#include <torch/nn/module.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string_view>

#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/data/sampler.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/tensor_archive.h"

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

// ---- checkpoint payload ------------------------------------------------------
// A checkpoint's TensorArchive holds:
//   model/<name>                    every parameter and buffer (named_parameters, named_buffers)
//   optimizer/type                  sgd, adam or adamw
//   optimizer/groups                number of parameter groups
//   optimizer/group<g>/params       number of parameters in group g
//   optimizer/group<g>/<option>     lr, weight_decay, and momentum, dampening, nesterov (sgd)
//                                   or beta1, beta2, eps, amsgrad (adam, adamw)
//   optimizer/param<i>/present      whether the i-th parameter (over all groups) has state
//   optimizer/param<i>/<state>      momentum_buffer (sgd); step, exp_avg, exp_avg_sq,
//                                   max_exp_avg_sq when defined (adam, adamw)
//   meta/step, meta/epoch, meta/batch_in_epoch, meta/world_size, meta/batch_size, meta/rng
//   extra/<key>                     TrainerOptions::checkpointExtras
// Optimizer state is keyed by parameter position: LibTorch keys it by the
// tensor's address, which differs between processes. A checkpoint is then a
// pure function of the training state, and resumed runs can be compared to
// uninterrupted ones byte for byte.

std::string describe(const at::Tensor& t) {
  std::string shape;
  for (int64_t d = 0; d < t.dim(); ++d) shape += (d ? ", " : "") + std::to_string(t.size(d));
  return fmt::format("{}[{}]", c10::toString(t.scalar_type()), shape);
}

constexpr std::string_view kModelPrefix = "model/";

/// Every defined parameter and buffer of `model`, keyed "model/<name>".
std::vector<std::pair<std::string, at::Tensor>> modelTensors(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    if (p.value().defined()) out.emplace_back(std::string(kModelPrefix) + p.key(), p.value());
  }
  for (const auto& b : model.named_buffers(/*recurse=*/true)) {
    if (b.value().defined()) out.emplace_back(std::string(kModelPrefix) + b.key(), b.value());
  }
  return out;
}

void saveModel(const torch::nn::Module& model, TensorArchive& archive) {
  for (const auto& [key, tensor] : modelTensors(model)) archive.putTensor(key, tensor);
}

/// Checks every tensor of `model` against the archive first, then copies:
/// a checkpoint that does not fit leaves the model untouched.
void loadModel(const TensorArchive& archive, torch::nn::Module& model) {
  auto misfit = [&](const std::string& what) {
    return CheckpointError(fmt::format("checkpoint {} does not fit this model: {}", archive.label(), what));
  };
  auto targets = modelTensors(model);
  std::set<std::string> expected;
  std::vector<at::Tensor> sources;
  for (const auto& [key, target] : targets) {
    std::string name = key.substr(kModelPrefix.size());
    expected.insert(key);
    if (!archive.contains(key)) throw misfit(fmt::format("it has no '{}' ({} here)", name, describe(target)));
    if (archive.kind(key) != TensorArchive::Kind::kTensor) {
      throw misfit(fmt::format("'{}' is not a tensor but a value of kind {}", name, toString(archive.kind(key))));
    }
    at::Tensor source = archive.getTensor(key);
    if (source.scalar_type() != target.scalar_type() || !source.sizes().equals(target.sizes())) {
      throw misfit(fmt::format("'{}' is {} here but {} in the file", name, describe(target), describe(source)));
    }
    sources.push_back(std::move(source));
  }
  for (const auto& key : archive.keys(kModelPrefix)) {
    if (!expected.count(key)) {
      throw misfit(fmt::format("it has '{}', which this model lacks", key.substr(kModelPrefix.size())));
    }
  }
  at::NoGradGuard noGrad;
  for (size_t i = 0; i < targets.size(); ++i) targets[i].second.copy_(sources[i]);
}

template <typename Options>
void saveAdamOptions(const Options& o, TensorArchive& archive, const std::string& prefix) {
  archive.putDouble(prefix + "lr", o.lr());
  archive.putDouble(prefix + "beta1", std::get<0>(o.betas()));
  archive.putDouble(prefix + "beta2", std::get<1>(o.betas()));
  archive.putDouble(prefix + "eps", o.eps());
  archive.putDouble(prefix + "weight_decay", o.weight_decay());
  archive.putBool(prefix + "amsgrad", o.amsgrad());
}

template <typename State>
void saveAdamState(const State& s, TensorArchive& archive, const std::string& prefix) {
  archive.putInt(prefix + "step", s.step());
  archive.putTensor(prefix + "exp_avg", s.exp_avg());
  archive.putTensor(prefix + "exp_avg_sq", s.exp_avg_sq());
  if (s.max_exp_avg_sq().defined()) archive.putTensor(prefix + "max_exp_avg_sq", s.max_exp_avg_sq());
}

template <typename T>
T& as(torch::optim::OptimizerOptions& o) {
  auto* p = dynamic_cast<T*>(&o);
  LOCKSTEP_ASSERT(p != nullptr, "optimizer options of an unexpected type");
  return *p;
}

template <typename T>
const T& as(const torch::optim::OptimizerParamState& s) {
  auto* p = dynamic_cast<const T*>(&s);
  LOCKSTEP_ASSERT(p != nullptr, "optimizer state of an unexpected type");
  return *p;
}

void saveOptimizer(torch::optim::Optimizer& optimizer, const std::string& type, TensorArchive& archive) {
  archive.putString("optimizer/type", type);
  archive.putInt("optimizer/groups", static_cast<int64_t>(optimizer.param_groups().size()));
  int64_t index = 0;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    auto& group = optimizer.param_groups()[g];
    const std::string prefix = fmt::format("optimizer/group{}/", g);
    archive.putInt(prefix + "params", static_cast<int64_t>(group.params().size()));
    if (type == "sgd") {
      const auto& o = as<torch::optim::SGDOptions>(group.options());
      archive.putDouble(prefix + "lr", o.lr());
      archive.putDouble(prefix + "momentum", o.momentum());
      archive.putDouble(prefix + "dampening", o.dampening());
      archive.putDouble(prefix + "weight_decay", o.weight_decay());
      archive.putBool(prefix + "nesterov", o.nesterov());
    } else if (type == "adam") {
      saveAdamOptions(as<torch::optim::AdamOptions>(group.options()), archive, prefix);
    } else {
      saveAdamOptions(as<torch::optim::AdamWOptions>(group.options()), archive, prefix);
    }
    for (const auto& p : group.params()) {
      const std::string param = fmt::format("optimizer/param{}/", index++);
      auto it = optimizer.state().find(stateKey(p));
      const bool present = it != optimizer.state().end();
      archive.putBool(param + "present", present);
      if (!present) continue;
      if (type == "sgd") {
        const auto& s = as<torch::optim::SGDParamState>(*it->second);
        if (s.momentum_buffer().defined()) archive.putTensor(param + "momentum_buffer", s.momentum_buffer());
      } else if (type == "adam") {
        saveAdamState(as<torch::optim::AdamParamState>(*it->second), archive, param);
      } else {
        saveAdamState(as<torch::optim::AdamWParamState>(*it->second), archive, param);
      }
    }
  }
}

/// Reads the optimizer entries of a checkpoint, checking each against the
/// parameter it belongs to, and remembers which entries it used.
class OptimizerReader {
 public:
  explicit OptimizerReader(const TensorArchive& archive) : archive_(archive) {}

  int64_t getInt(const std::string& key) {
    used_.insert(key);
    return archive_.getInt(key);
  }
  double getDouble(const std::string& key) {
    used_.insert(key);
    return archive_.getDouble(key);
  }
  bool getBool(const std::string& key) {
    used_.insert(key);
    return archive_.getBool(key);
  }
  const std::string& getString(const std::string& key) {
    used_.insert(key);
    return archive_.getString(key);
  }
  bool has(const std::string& key) const { return archive_.contains(key); }
  /// A state tensor of parameter `p`: same dtype and shape as the parameter.
  at::Tensor getLike(const std::string& key, const at::Tensor& p) {
    used_.insert(key);
    at::Tensor t = archive_.getTensor(key);
    if (t.scalar_type() != p.scalar_type() || !t.sizes().equals(p.sizes())) {
      throw CheckpointError(fmt::format("checkpoint {}: optimizer state '{}' is {} but its parameter is {}",
                                        archive_.label(), key, describe(t), describe(p)));
    }
    return t;
  }
  /// Throws unless every optimizer/ entry of the file was used.
  void checkAllUsed() const {
    for (const auto& key : archive_.keys("optimizer/")) {
      if (!used_.count(key)) {
        throw CheckpointError(fmt::format("checkpoint {} has an optimizer entry '{}' that this run's optimizer does "
                                          "not have", archive_.label(), key));
      }
    }
  }

 private:
  const TensorArchive& archive_;
  std::set<std::string> used_;
};

void warnIfChanged(bool report, const std::string& label, const std::string& option, double stored,
                   double configured) {
  if (report && stored != configured) {
    log::warn(fmt::format("resuming with the optimizer's {} from {}: {} (this run's config says {})", option, label,
                          stored, configured));
  }
}

template <typename Options, typename State>
std::unique_ptr<torch::optim::OptimizerParamState> loadAdam(OptimizerReader& r, Options& stored,
                                                            const std::string& param, const at::Tensor& p) {
  auto s = std::make_unique<State>();
  int64_t step = r.getInt(param + "step");
  if (step < 0) throw CheckpointError(fmt::format("optimizer state '{}step' is negative ({})", param, step));
  s->step(step);
  s->exp_avg(r.getLike(param + "exp_avg", p));
  s->exp_avg_sq(r.getLike(param + "exp_avg_sq", p));
  if (r.has(param + "max_exp_avg_sq") || stored.amsgrad()) s->max_exp_avg_sq(r.getLike(param + "max_exp_avg_sq", p));
  return s;
}

template <typename Options>
void loadAdamOptions(OptimizerReader& r, Options& stored, const Options& configured, const std::string& prefix,
                     bool report, const std::string& label) {
  stored.lr(r.getDouble(prefix + "lr"));
  stored.betas({r.getDouble(prefix + "beta1"), r.getDouble(prefix + "beta2")});
  stored.eps(r.getDouble(prefix + "eps"));
  stored.weight_decay(r.getDouble(prefix + "weight_decay"));
  stored.amsgrad(r.getBool(prefix + "amsgrad"));
  warnIfChanged(report, label, "beta1", std::get<0>(stored.betas()), std::get<0>(configured.betas()));
  warnIfChanged(report, label, "beta2", std::get<1>(stored.betas()), std::get<1>(configured.betas()));
  warnIfChanged(report, label, "eps", stored.eps(), configured.eps());
  warnIfChanged(report, label, "weight_decay", stored.weight_decay(), configured.weight_decay());
  warnIfChanged(report, label, "amsgrad", stored.amsgrad(), configured.amsgrad());
}

/// Restores the group options and per-parameter state written by saveOptimizer.
/// Everything is read and checked before the optimizer is changed. The
/// checkpoint's options win over the configured ones (an exact resume); rank 0
/// (`report`) warns about each that differs, except lr, which the schedule sets every step.
void loadOptimizer(torch::optim::Optimizer& optimizer, const std::string& type, const TensorArchive& archive,
                   bool report) {
  const std::string& label = archive.label();
  OptimizerReader r(archive);
  const std::string stored = r.getString("optimizer/type");
  if (stored != type) {
    throw CheckpointError(fmt::format("checkpoint {} holds {} optimizer state, but this run uses {}", label, stored,
                                      type));
  }
  auto& groups = optimizer.param_groups();
  int64_t groupCount = r.getInt("optimizer/groups");
  if (groupCount != static_cast<int64_t>(groups.size())) {
    throw CheckpointError(fmt::format("checkpoint {} has {} optimizer parameter groups, this run has {}", label,
                                      groupCount, groups.size()));
  }
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> states;
  int64_t index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    auto& group = groups[g];
    const std::string prefix = fmt::format("optimizer/group{}/", g);
    int64_t params = r.getInt(prefix + "params");
    if (params != static_cast<int64_t>(group.params().size())) {
      throw CheckpointError(fmt::format("checkpoint {}: optimizer group {} has {} parameters, this run's has {}",
                                        label, g, params, group.params().size()));
    }
    auto restored = group.options().clone();
    if (type == "sgd") {
      auto& o = as<torch::optim::SGDOptions>(*restored);
      const auto& c = as<torch::optim::SGDOptions>(group.options());
      o.lr(r.getDouble(prefix + "lr"));
      o.momentum(r.getDouble(prefix + "momentum"));
      o.dampening(r.getDouble(prefix + "dampening"));
      o.weight_decay(r.getDouble(prefix + "weight_decay"));
      o.nesterov(r.getBool(prefix + "nesterov"));
      warnIfChanged(report, label, "momentum", o.momentum(), c.momentum());
      warnIfChanged(report, label, "dampening", o.dampening(), c.dampening());
      warnIfChanged(report, label, "weight_decay", o.weight_decay(), c.weight_decay());
      warnIfChanged(report, label, "nesterov", o.nesterov(), c.nesterov());
    } else if (type == "adam") {
      loadAdamOptions(r, as<torch::optim::AdamOptions>(*restored), as<torch::optim::AdamOptions>(group.options()),
                      prefix, report, label);
    } else {
      loadAdamOptions(r, as<torch::optim::AdamWOptions>(*restored), as<torch::optim::AdamWOptions>(group.options()),
                      prefix, report, label);
    }
    for (const auto& p : group.params()) {
      const std::string param = fmt::format("optimizer/param{}/", index++);
      std::unique_ptr<torch::optim::OptimizerParamState> state;
      if (r.getBool(param + "present")) {
        if (type == "sgd") {
          auto s = std::make_unique<torch::optim::SGDParamState>();
          s->momentum_buffer(r.getLike(param + "momentum_buffer", p));
          state = std::move(s);
        } else if (type == "adam") {
          state = loadAdam<torch::optim::AdamOptions, torch::optim::AdamParamState>(
              r, as<torch::optim::AdamOptions>(*restored), param, p);
        } else {
          state = loadAdam<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
              r, as<torch::optim::AdamWOptions>(*restored), param, p);
        }
      }
      states.push_back(std::move(state));
    }
    options.push_back(std::move(restored));
  }
  r.checkAllUsed();
  index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].set_options(std::move(options[g]));
    for (const auto& p : groups[g].params()) {
      auto& state = states[index++];
      if (state) optimizer.state()[stateKey(p)] = std::move(state);
      else optimizer.state().erase(stateKey(p));
    }
  }
}

at::Generator cpuGenerator() { return at::detail::getDefaultCPUGenerator(); }

CheckpointInfo readInfo(const TensorArchive& archive) {
  CheckpointInfo info;
  auto readCount = [&](const char* key, int64_t minimum) {
    int64_t v = archive.getInt(key);
    if (v < minimum) {
      throw CheckpointError(fmt::format("checkpoint {}: '{}' is {}, expected at least {}", archive.label(), key, v,
                                        minimum));
    }
    return v;
  };
  info.step = readCount("meta/step", 0);
  info.epoch = readCount("meta/epoch", 0);
  info.batchInEpoch = readCount("meta/batch_in_epoch", 0);
  info.worldSize = readCount("meta/world_size", 1);
  info.batchSize = readCount("meta/batch_size", 1);
  for (const auto& key : archive.keys("extra/")) info.extras.emplace_back(key.substr(6), archive.getString(key));
  return info;
}

/// Reads, verifies and parses a checkpoint file (or its `payload`, when already
/// read and verified). Never runs code from it.
TensorArchive loadArchive(const std::string& path, const std::optional<std::string>& payload = std::nullopt) {
  if (payload) return TensorArchive::parse(*payload, path);
  return TensorArchive::parse(readCheckpoint(path), path);
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

CheckpointInfo readCheckpointInfo(const std::string& path) { return readInfo(loadArchive(path)); }

CheckpointInfo loadModelFromCheckpoint(const std::string& path, torch::nn::Module& model) {
  TensorArchive archive = loadArchive(path);
  CheckpointInfo info = readInfo(archive);
  loadModel(archive, model);  // checks every tensor before copying: nothing else to catch
  return info;
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
  std::optional<std::string> verifiedPayload;  // rank 0's read of the chosen file, parsed without reading it again
  if (o.resume != "none" && o.resume != "auto") {
    resumePath = o.resume;
  } else if (o.resume == "auto" && checkpoints) {
    // Rank 0 picks the newest checkpoint that reads back whole; everyone loads that one.
    // A damaged file is skipped; one of an older format stops every rank (-2):
    // starting afresh beside it would let rotation delete the new checkpoints.
    int64_t chosen = -1;
    std::string refusal;
    if (master) {
      auto entries = checkpoints->list();
      for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        try {
          verifiedPayload = readCheckpoint(it->path);
          chosen = it->step;
          break;
        } catch (const ObsoleteCheckpointError& e) {
          refusal = e.what();
          chosen = -2;
          break;
        } catch (const CheckpointError& e) {
          log::warn(fmt::format("skipping unusable checkpoint: {}", e.what()));
        }
      }
    }
    std::vector<at::Tensor> choice{at::tensor({chosen}, at::kLong)};
    comm.broadcast(choice, 0)->wait();
    chosen = choice[0].item<int64_t>();
    if (chosen == -2) {
      throw ObsoleteCheckpointError(fmt::format(
          "{}; move the old checkpoints out of {} (or set checkpoint.dir elsewhere) to start afresh",
          master ? refusal : "rank 0 found a checkpoint of an older format", checkpoints->dir()));
    }
    if (chosen >= 0) resumePath = checkpoints->pathFor(chosen);
  }
  if (!resumePath.empty()) {
    TensorArchive archive = loadArchive(resumePath, verifiedPayload);
    verifiedPayload.reset();
    CheckpointInfo info;
    try {
      info = readInfo(archive);
      at::Tensor rngState = archive.getTensor("meta/rng");
      loadModel(archive, *model);
      loadOptimizer(*optimizer, o.optimizer, archive, master);
      auto gen = cpuGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rngState);
    } catch (const CheckpointError&) {
      throw;
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
      TensorArchive archive;
      saveModel(*model, archive);
      saveOptimizer(*optimizer, o.optimizer, archive);
      {
        auto gen = cpuGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        archive.putTensor("meta/rng", gen.get_state());
      }
      archive.putInt("meta/step", step);
      archive.putInt("meta/epoch", epoch);
      archive.putInt("meta/batch_in_epoch", batchInEpoch);
      archive.putInt("meta/world_size", world);
      archive.putInt("meta/batch_size", o.batchSize);
      for (const auto& [key, value] : o.checkpointExtras) archive.putString("extra/" + key, value);
      result.lastCheckpoint = checkpoints->save(step, archive.serialize());
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
