// commands.h — the subcommands of the `lockstep` binary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lockstep {
class TrainerCallback;
}

namespace lockstep::cli {

/// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int runCommand(const std::vector<std::string>& args);
int benchCommand(const std::vector<std::string>& args);
int trainCommand(const std::vector<std::string>& args);
int generateCommand(const std::vector<std::string>& args);
/// `lockstep dashboard --logdir DIR [--port P] [--host H]` (cmd_dashboard.cpp).
int dashboardCommand(const std::vector<std::string>& args);
/// `lockstep report RUN_DIR -o FILE.html` (cmd_report.cpp).
int reportCommand(const std::vector<std::string>& args);
/// `lockstep samples DIR [--json]`: audits a trainer.sample_log (cmd_samples.cpp).
int samplesCommand(const std::vector<std::string>& args);
/// `lockstep sweep SPEC.yaml [-j J] [--dir DIR] [--resume]` (cmd_sweep.cpp).
int sweepCommand(const std::vector<std::string>& args);
/// `lockstep submit [sbatch options] -- PROGRAM ARGS...` (cmd_submit.cpp).
int submitCommand(const std::vector<std::string>& args);

struct AllreduceBenchOptions {
  std::vector<int64_t> sizes;  ///< bytes
  std::string dtype = "float32";
  std::string op = "sum";
  /// auto: the rank's GPU over nccl, else the CPU; cuda over gloo or mpi stages through host memory
  std::string device = "auto";
  int iters = 0;  ///< 0: chosen per size
  int warmup = 3;
  bool json = false;
  bool check = true;
};
int benchAllreduce(const AllreduceBenchOptions& options);

/// `lockstep bench loader CONFIG [key=value ...] [--batches N]`.
int benchLoader(const std::vector<std::string>& args);

/// `lockstep bench scaling CONFIG --np 1,2 [--steps N] [--threads T] [--backend NAME] [--json] [key=value ...]`.
int benchScaling(const std::vector<std::string>& args);

/// `lockstep bench sampler [--objective branin|hartmann6] [--algorithm tpe|random] [--trials N] [--seeds S]`.
int benchSampler(const std::vector<std::string>& args);

/// `lockstep bench memory CONFIG --np 1,2 [--strategies ddp,zero1] [--steps N] [--json] [key=value ...]`.
int benchMemory(const std::vector<std::string>& args);

/// `lockstep bench predict CONFIG [--link L,...] [--workers N,...] [--json] [--html FILE] [key=value ...]`.
int benchPredict(const std::vector<std::string>& args);

/// The callback behind `lockstep train --result-json PATH`: at the end of fit(),
/// rank 0 writes the FitResult (throughput, per-step phase breakdown,
/// communication figures, world size, threads) to PATH as one JSON object,
/// atomically. `lockstep bench scaling` reads these files.
std::shared_ptr<TrainerCallback> makeResultJsonWriter(const std::string& path, int threadsPerWorker);

/// "4", "4K", "1M", "64MiB", "2G" -> bytes. Throws ConfigError naming `what`.
int64_t parseBytes(const std::string& text, const std::string& what);

}  // namespace lockstep::cli
