// The local and Slurm trial launchers (trial_launcher.h).
#include "sweep/trial_launcher.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/posix_io.h"
#include "common/shell_text.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/common/token.h"
#include "sweep/slurm.h"
#include "sweep/trial_process.h"

namespace lockstep::sweep {

namespace {

class LocalLauncher : public TrialLauncher {
 public:
  explicit LocalLauncher(std::string bin) : bin_(std::move(bin)) {}
  std::unique_ptr<TrialHandle> start(const TrialLaunch& l, std::string& command) override {
    std::vector<std::string> argv = {
        bin_, "run", "-np", std::to_string(l.workers), "--threads", std::to_string(l.threads), "--"};
    argv.insert(argv.end(), l.train.begin(), l.train.end());
    command = detail::shellJoin(argv);
    return std::make_unique<TrialProcess>(argv, l.dir + "/output.log");
  }
  std::string describe() const override { return "local"; }

 private:
  std::string bin_;
};

/// A job step inside the sweep's own allocation: srun, a child process of the sweep.
class StepLauncher : public TrialLauncher {
 public:
  StepLauncher() {
    // Every step's tasks share one token (the rendezvous admits only its holders) and the sweep's
    // thread count; srun hands the environment on.
    ::setenv(kJobTokenVar, randomToken().c_str(), 1);
  }
  std::unique_ptr<TrialHandle> start(const TrialLaunch& l, std::string& command) override {
    ::setenv(env::kNumThreads, std::to_string(l.threads).c_str(), 1);
    std::vector<std::string> argv = {"srun",
                                     "--exclusive",
                                     "--kill-on-bad-exit=1",
                                     "-n",
                                     std::to_string(l.workers),
                                     "-c",
                                     std::to_string(l.threads),
                                     "--job-name",
                                     l.name};
    argv.insert(argv.end(), l.train.begin(), l.train.end());
    command = detail::shellJoin(argv);
    argv[0] = "/usr/bin/env";  // TrialProcess execs a path: let env find srun on PATH
    argv.insert(argv.begin() + 1, "srun");
    return std::make_unique<TrialProcess>(argv, l.dir + "/output.log");
  }
  std::string describe() const override {
    return fmt::format("slurm (job steps in allocation {})", std::getenv("SLURM_JOB_ID"));
  }
};

/// One sbatch job per trial.
class BatchJob : public TrialHandle {
 public:
  BatchJob(std::string id, std::string dir) : id_(std::move(id)), dir_(std::move(dir)) {}
  ~BatchJob() override {
    if (!ended_) cancelJob(id_);
  }
  bool poll() override {
    if (ended_) return true;
    auto now = std::chrono::steady_clock::now();
    if (now - lastPoll_ < std::chrono::seconds(1)) return false;
    lastPoll_ = now;
    auto active = jobActive(id_);
    if (!active || *active) return false;
    ended_ = true;
    auto end = jobEnd(id_);
    if (!end) {  // Slurm forgot it: the result file tells
      exitCode_ = std::filesystem::exists(dir_ + "/result.json") ? 0 : 1;
    } else {
      exitCode_ = end->exitCode != 0 || end->state == "COMPLETED" ? end->exitCode : 1;
      if (end->state != "COMPLETED") {
        std::ofstream(dir_ + "/output.log", std::ios::app)
            << fmt::format("lockstep sweep: Slurm job {} ended {} (exit code {})\n", id_, end->state, exitCode_);
      }
    }
    return true;
  }
  int exitCode() const override { return exitCode_; }
  void terminate() override { cancelJob(id_); }
  std::string job() const override { return id_; }

 private:
  std::string id_, dir_;
  bool ended_ = false;
  int exitCode_ = 0;
  std::chrono::steady_clock::time_point lastPoll_{};
};

class BatchLauncher : public TrialLauncher {
 public:
  std::unique_ptr<TrialHandle> start(const TrialLaunch& l, std::string& command) override {
    BatchOptions o;
    o.jobName = l.name;
    o.ntasks = l.workers;
    o.cpusPerTask = l.threads;
    o.output = l.dir + "/output.log";
    o.chdir = std::filesystem::current_path().string();
    const std::string script = l.dir + "/job.sbatch";
    detail::writeFileAtomically(script, {batchScript(o, l.train)}, detail::Durability::kProcessCrash);
    std::string id = submitBatch(script);
    command = fmt::format("sbatch {}  # job {}", script, id);
    return std::make_unique<BatchJob>(id, l.dir);
  }
  std::string describe() const override { return "slurm (one sbatch job per trial)"; }
};

}  // namespace

std::unique_ptr<TrialLauncher> makeLocalLauncher(const std::string& lockstepBin) {
  return std::make_unique<LocalLauncher>(lockstepBin);
}

std::unique_ptr<TrialLauncher> makeSlurmLauncher() {
  if (insideSlurmAllocation()) {
    requireSlurmCommands({"srun"}, "--scheduler slurm");
    return std::make_unique<StepLauncher>();
  }
  requireSlurmCommands({"sbatch", "squeue", "scontrol", "scancel"}, "--scheduler slurm");
  return std::make_unique<BatchLauncher>();
}

}  // namespace lockstep::sweep
