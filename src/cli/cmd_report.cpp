// cmd_report.cpp — `lockstep report RUN_DIR -o FILE.html`: one self-contained page of a run (or a sweep).
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "dashboard/report.h"
#include "dashboard/run_reader.h"
#include "lockstep/common/error.h"

namespace lockstep::cli {

namespace {
constexpr const char* kReportUsage = "usage: lockstep report RUN_DIR|SWEEP_DIR -o REPORT.html";
}

int reportCommand(const std::vector<std::string>& args) {
  std::string runDir;
  std::string output;
  CLI::App app{"Write one self-contained HTML file (charts and data, no server, no network) of a run",
               "lockstep report"};
  app.add_option("run_dir", runDir, "the run's directory (it holds run.json), or a sweep's (trials.jsonl)")->required();
  app.add_option("-o,--output", output, "the HTML file to write (replaced atomically)")->required();
  if (auto exit = parseArgs(app, args, "report", kReportUsage)) return *exit;
  try {
    dashboard::writeReport(runDir, output);
  } catch (const dashboard::RunNotFound& e) {
    std::cerr << "lockstep report: error: " << e.what() << "\n" << kReportUsage << "\n";
    return kExitUsage;
  } catch (const dashboard::RunFormatError& e) {
    std::cerr << "lockstep report: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "lockstep report: " << e.what() << "\n";
    return kExitFailure;
  }
  std::cout << "lockstep report: wrote " << output << "\n";
  return kExitOk;
}

}  // namespace lockstep::cli
