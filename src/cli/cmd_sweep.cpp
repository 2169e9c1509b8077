// cmd_sweep.cpp — `lockstep sweep SPEC.yaml [-j J] [--dir DIR] [--resume]`:
// a hyper-parameter search over `lockstep train` runs (docs/sweeps.md).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "lockstep/common/error.h"
#include "sweep/sweep_runner.h"
#include "sweep/sweep_spec.h"

namespace lockstep::cli {

namespace {
constexpr const char* kSweepUsage =
    "usage: lockstep sweep SPEC.yaml [-j JOBS] [--dir DIR] [--resume] [--scheduler local|slurm]   (docs/sweeps.md)";
}

int sweepCommand(const std::vector<std::string>& args) {
  std::string specPath;
  sweep::SweepRunOptions options;
  CLI::App app{"Search hyper-parameters: run trials of a lockstep train config, J at a time", "lockstep sweep"};
  app.add_option("SPEC.yaml", specPath, "the sweep spec: base config, space, objective, budget, algorithm")->required();
  app.add_option("-j,--jobs", options.jobs, "trials at once (default 1); the cores are split between them");
  app.add_option("--dir", options.dir, "the sweep's directory (default runs/<spec file stem>)");
  app.add_flag("--resume", options.resume, "continue the sweep in --dir: keep finished trials, rerun interrupted ones");
  app.add_option("--threads", options.threadsPerTrial, "threads per trial worker (default: cores / (J x workers))");
  app.add_option("--scheduler", options.scheduler,
                 "local (default), or slurm: one sbatch job per trial, or one job step per trial inside an allocation")
      ->check(CLI::IsMember({"local", "slurm"}));
  if (auto exit = parseArgs(app, args, "sweep", kSweepUsage)) return *exit;
  try {
    sweep::SweepSpec spec = sweep::loadSweepSpec(specPath);
    if (options.dir.empty()) options.dir = sweep::defaultSweepDir(specPath);
    options.lockstep = std::filesystem::read_symlink("/proc/self/exe").string();
    return sweep::runSweep(spec, options);
  } catch (const ConfigError& e) {
    std::cerr << "lockstep sweep: error: " << e.what() << "\n" << kSweepUsage << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "lockstep sweep: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace lockstep::cli
