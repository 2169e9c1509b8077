// main.cpp — `lockstep <command>`: dispatches to the subcommands.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {
constexpr const char* kUsage =
    "usage: lockstep <command> [options]\n"
    "commands:\n"
    "  run     start N workers of a program: lockstep run -np N [options] -- PROGRAM [ARGS...]\n"
    "  train   train a built-in model: lockstep train CONFIG.yaml [key=value ...]\n"
    "  generate  sample pet names: lockstep generate --checkpoint FILE -n 20 --temperature 0.8\n"
    "  bench   measure: lockstep bench allreduce [--bytes 4K,1M,32M] [--json]\n"
    "  dashboard  web page of training runs: lockstep dashboard --logdir runs/ [--port 8080]\n"
    "  report  one self-contained HTML file of a run: lockstep report runs/NAME -o report.html\n"
    "  samples audit a run's trainer.sample_log: lockstep samples runs/NAME/samples\n"
    "  sweep   search hyper-parameters: lockstep sweep SPEC.yaml -j 2 [--dir DIR] [--resume] [--scheduler slurm]\n"
    "  submit  submit a training run to Slurm: lockstep submit --nodes 2 --ntasks-per-node 4 -- lockstep train CFG\n"
    "  version print the version\n"
    "`lockstep <command> --help` describes each command.\n";
}

int main(int argc, char** argv) {
  // Workers' stdout is usually a pipe to the launcher: flush per line.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? lockstep::cli::kExitUsage : lockstep::cli::kExitOk;
  }
  std::string command = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "run") return lockstep::cli::runCommand(rest);
  if (command == "bench") return lockstep::cli::benchCommand(rest);
  if (command == "train") return lockstep::cli::trainCommand(rest);
  if (command == "generate") return lockstep::cli::generateCommand(rest);
  if (command == "dashboard") return lockstep::cli::dashboardCommand(rest);
  if (command == "report") return lockstep::cli::reportCommand(rest);
  if (command == "samples") return lockstep::cli::samplesCommand(rest);
  if (command == "sweep") return lockstep::cli::sweepCommand(rest);
  if (command == "submit") return lockstep::cli::submitCommand(rest);
  if (command == "version" || command == "--version") {
    std::cout << "lockstep " << LOCKSTEP_VERSION << "\n";
    return lockstep::cli::kExitOk;
  }
  std::cerr << "lockstep: unknown command '" << command << "'\n" << kUsage;
  return lockstep::cli::kExitUsage;
}
