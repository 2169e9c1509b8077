#include "train/training_state.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <fmt/format.h>

#include <mutex>
#include <optional>

#include "lockstep/common/logging.h"

namespace lockstep::detail {

namespace {

at::Generator cpuGenerator() { return at::detail::getDefaultCPUGenerator(); }

/// Rank 0 picks the newest checkpoint of `dir` that reads back whole and
/// broadcasts its step; returns its path ("" for none) and, on rank 0, the
/// verified bytes so they are not read twice. A damaged file is skipped; one
/// of an older format stops every rank: starting afresh beside it would let
/// rotation delete the new checkpoints.
std::string chooseNewest(CheckpointDir& dir, Communicator& comm, std::optional<std::string>& verified) {
  const bool master = comm.rank() == 0;
  int64_t chosen = -1;
  std::string refusal;
  if (master) {
    auto entries = dir.list();
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      try {
        verified = readCheckpoint(it->path);
        chosen = it->step;
        break;
      } catch (const ObsoleteCheckpointError& e) {
        refusal = e.what();
        chosen = -2;
        break;
      } catch (const CheckpointError& e) { log::warn(fmt::format("skipping unusable checkpoint: {}", e.what())); }
    }
  }
  std::vector<at::Tensor> choice{at::tensor({chosen}, at::kLong)};
  comm.broadcast(choice, 0)->wait();
  chosen = choice[0].item<int64_t>();
  if (chosen == -2) {
    throw ObsoleteCheckpointError(
        fmt::format("{}; move the old checkpoints out of {} (or set checkpoint.dir elsewhere) to start afresh",
                    master ? refusal : "rank 0 found a checkpoint of an older format", dir.dir()));
  }
  return chosen >= 0 ? dir.pathFor(chosen) : std::string();
}

/// Restores model, optimizer and RNG from `archive`; everything is checked first.
CheckpointInfo restore(const TensorArchive& archive, const StateLoader& load, bool report) {
  try {
    CheckpointInfo info = readCheckpointMeta(archive);
    at::Tensor rngState = archive.getTensor("meta/rng");
    load(archive, report);
    auto gen = cpuGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rngState);
    return info;
  } catch (const CheckpointError&) { throw; } catch (const std::exception& e) {
    throw CheckpointError(
        fmt::format("cannot resume from {}: {}", archive.label(), std::string(e.what()).substr(0, 300)));
  }
}

}  // namespace

CheckpointInfo readCheckpointMeta(const TensorArchive& archive) {
  CheckpointInfo info;
  auto readCount = [&](const char* key, int64_t minimum) {
    int64_t v = archive.getInt(key);
    if (v < minimum) {
      throw CheckpointError(
          fmt::format("checkpoint {}: '{}' is {}, expected at least {}", archive.label(), key, v, minimum));
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

namespace {

RunMetrics::Reported readReported(const TensorArchive& archive, const std::string& prefix) {
  return {archive.getDouble(prefix + "train_loss"), archive.getDouble(prefix + "validation_loss"),
          archive.getDouble(prefix + "validation_accuracy")};
}

void putReported(TensorArchive& archive, const std::string& prefix, const RunMetrics::Reported& r) {
  archive.putDouble(prefix + "train_loss", r.trainLoss);
  archive.putDouble(prefix + "validation_loss", r.validationLoss);
  archive.putDouble(prefix + "validation_accuracy", r.validationAccuracy);
}

RunMetrics readRunMetrics(const TensorArchive& archive) {
  RunMetrics m;
  if (!archive.contains("metrics/last_train_loss")) return m;  // written before lockstep kept them
  m.regular = readReported(archive, "metrics/last_");
  if (archive.contains("metrics/final_train_loss")) m.final = readReported(archive, "metrics/final_");
  m.windowSteps = archive.getInt("metrics/window_steps");
  at::Tensor window = archive.getTensor("metrics/window_loss").to(at::kDouble).contiguous();
  m.windowLoss.assign(window.data_ptr<double>(), window.data_ptr<double>() + window.numel());
  return m;
}

}  // namespace

void putTrainingMeta(TensorArchive& archive, const Position& at, int64_t worldSize, const TrainerOptions& options,
                     const RunMetrics& metrics) {
  putReported(archive, "metrics/last_", metrics.regular);
  if (metrics.final) putReported(archive, "metrics/final_", *metrics.final);
  archive.putInt("metrics/window_steps", metrics.windowSteps);
  archive.putTensor("metrics/window_loss", at::tensor(metrics.windowLoss, at::kDouble));
  {
    auto gen = cpuGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.putTensor("meta/rng", gen.get_state());
  }
  archive.putInt("meta/step", at.step);
  archive.putInt("meta/epoch", at.epoch);
  archive.putInt("meta/batch_in_epoch", at.batchInEpoch);
  archive.putInt("meta/world_size", worldSize);
  archive.putInt("meta/batch_size", options.batchSize);
  for (const auto& [key, value] : options.checkpoint.extras) archive.putString("extra/" + key, value);
}

Position resumeTraining(const TrainerOptions& o, CheckpointDir* dir, Communicator& comm, const StateLoader& load,
                        RunMetrics& metrics, int64_t dataWorld) {
  const bool master = comm.rank() == 0;
  const int64_t world = dataWorld;
  const std::string& resume = o.checkpoint.resume;
  std::string path;
  std::optional<std::string> verified;  // rank 0's read of the chosen file, parsed without reading it again
  if (resume != "none" && resume != "auto")
    path = resume;
  else if (resume == "auto" && dir)
    path = chooseNewest(*dir, comm, verified);
  if (path.empty()) return {};

  CheckpointInfo info;
  {
    // Rank 0 parses the bytes it already verified; no second read and no copy.
    std::string read;
    if (!verified) read = readCheckpoint(path);
    TensorArchive archive = TensorArchive::parse(verified ? *verified : read, path);
    verified.reset();
    info = restore(archive, load, master);
    metrics = readRunMetrics(archive);
  }
  Position at{info.step, info.epoch, info.batchInEpoch};
  if (info.worldSize != world || info.batchSize != o.batchSize) {
    // Keep the position in samples: the same global sample count, re-divided.
    int64_t consumed = info.batchInEpoch * info.batchSize * info.worldSize;
    at.batchInEpoch = consumed / (o.batchSize * world);
    at.batchInEpoch -= at.batchInEpoch % o.accumulation;
    if (master) {  // every rank computes the same position: one line says it
      log::warn(
          fmt::format("resuming a run of {} workers x batch {} with {} workers x batch {}: continuing epoch {} "
                      "at micro-batch {}",
                      info.worldSize, info.batchSize, world, o.batchSize, at.epoch, at.batchInEpoch));
    }
  }
  if (master) {
    log::info(fmt::format("resumed from {}: step {}, epoch {}, micro-batch {} of the epoch", path, at.step, at.epoch,
                          at.batchInEpoch));
  }
  return at;
}

}  // namespace lockstep::detail
