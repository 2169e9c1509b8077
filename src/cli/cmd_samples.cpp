// cmd_samples.cpp — `lockstep samples DIR [--json]`: whether every sample of each epoch was trained
// exactly once in the steps a run kept (trainer.sample_log; sample_audit.h).
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/sample_audit.h"
#include "lockstep/common/error.h"

namespace lockstep::cli {

namespace {
constexpr const char* kSamplesUsage = "usage: lockstep samples SAMPLE_LOG_DIR [--json]";
}

int samplesCommand(const std::vector<std::string>& args) {
  std::string dir;
  bool asJson = false;
  CLI::App app{
      "Audit a run's trainer.sample_log: every sample of each epoch trained exactly once in the steps "
      "the run kept, through lost workers, newcomers and restarts; exit 1 when not",
      "lockstep samples"};
  app.add_option("dir", dir, "the directory trainer.sample_log named")->required();
  app.add_flag("--json", asJson, "one JSON object instead of text");
  if (auto exit = parseArgs(app, args, "samples", kSamplesUsage)) return *exit;
  try {
    const SampleAudit audit = auditSampleLog(dir);
    std::cout << (asJson ? sampleAuditJson(audit) + "\n" : formatSampleAudit(audit));
    return audit.ok() ? kExitOk : kExitFailure;
  } catch (const ConfigError& e) {
    std::cerr << "lockstep samples: error: " << e.what() << "\n" << kSamplesUsage << "\n";
    return kExitUsage;
  }
}

}  // namespace lockstep::cli
