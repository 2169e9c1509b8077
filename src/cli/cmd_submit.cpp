// cmd_submit.cpp — `lockstep submit [sbatch options] -- PROGRAM ARGS...`: an
// sbatch script for a training run, written and submitted (docs/sweeps.md#slurm).
#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "common/posix_io.h"
#include "lockstep/common/error.h"
#include "sweep/slurm.h"

namespace lockstep::cli {

namespace {

constexpr const char* kSubmitUsage =
    "usage: lockstep submit [--nodes N] [--ntasks-per-node K] [--cpus-per-task C] [--time T] [--partition P]\n"
    "                       [--job-name NAME] [--output FILE] [--script FILE] [--wait] [--dry-run] -- PROGRAM "
    "[ARGS...]";

/// The job's name: the option, else the config file's stem of `lockstep train CONFIG`, else "lockstep".
std::string jobName(const std::string& given, const std::vector<std::string>& command) {
  if (!given.empty()) return given;
  for (size_t i = 0; i + 1 < command.size(); ++i) {
    if (command[i] == "train" && command[i + 1].find('=') == std::string::npos) {
      return std::filesystem::path(command[i + 1]).stem().string();
    }
  }
  return "lockstep";
}

}  // namespace

int submitCommand(const std::vector<std::string>& args) {
  sweep::BatchOptions o;
  std::string script;
  bool wait = false, dryRun = false;
  std::vector<std::string> command;
  CLI::App app{"Write an sbatch script that runs PROGRAM once per task (every task a worker) and submit it",
               "lockstep submit"};
  app.add_option("--nodes", o.nodes, "nodes (sbatch --nodes)")->check(CLI::Range(1, 100000));
  app.add_option("--ntasks-per-node", o.ntasksPerNode, "workers per node")->check(CLI::Range(1, 4096));
  app.add_option("--cpus-per-task", o.cpusPerTask, "cores per worker; also its thread count")
      ->check(CLI::Range(1, 4096));
  app.add_option("--time", o.time, "time limit (sbatch --time, e.g. 01:30:00)");
  app.add_option("--partition", o.partition, "partition (sbatch --partition)");
  app.add_option("--job-name", o.jobName, "job name (default: the config file's stem)");
  app.add_option("--output", o.output, "the job's output file (default runs/<job name>/slurm-%j.out)");
  app.add_option("--script", script, "where the script is written (default runs/<job name>/job.sbatch)");
  app.add_flag("--wait", wait, "wait for the job to end; exit with its exit code");
  app.add_flag("--dry-run", dryRun, "print the script, submit nothing");
  app.add_option("command", command, "the program each task runs, after --")->required();
  if (auto exit = parseArgs(app, args, "submit", kSubmitUsage)) return *exit;
  try {
    // `lockstep` in the command means this very build.
    if (command[0] == "lockstep") command[0] = std::filesystem::read_symlink("/proc/self/exe").string();
    o.jobName = jobName(o.jobName, command);
    const std::string dir = "runs/" + o.jobName;
    if (o.output.empty()) o.output = dir + "/slurm-%j.out";
    if (script.empty()) script = dir + "/job.sbatch";
    o.chdir = std::filesystem::current_path().string();
    const std::string text = sweep::batchScript(o, command);
    if (dryRun) {
      std::cout << text;
      return kExitOk;
    }
    sweep::requireSlurmCommands({"sbatch"}, "lockstep submit");
    std::filesystem::create_directories(
        std::filesystem::path(o.output).parent_path().empty() ? "." : std::filesystem::path(o.output).parent_path());
    detail::writeFileAtomically(script, {text}, detail::Durability::kMachineCrash);
    if (!wait) {
      std::string id = sweep::submitBatch(script);
      std::cout << fmt::format("lockstep submit: job {} submitted ({}; output {})\n", id, script, o.output);
      return kExitOk;
    }
    auto [rc, out] = sweep::runCapture({"sbatch", "--wait", script});
    std::cout << out;
    std::cout << fmt::format("lockstep submit: the job of {} ended with exit code {}\n", script, rc);
    return rc;
  } catch (const ConfigError& e) {
    std::cerr << "lockstep submit: error: " << e.what() << "\n" << kSubmitUsage << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "lockstep submit: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace lockstep::cli
