// cmd_bench.cpp — `lockstep bench <what>`: argument parsing for the benchmarks.
#include <CLI/CLI.hpp>

#include <cctype>
#include <iostream>
#include <optional>
#include <utility>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"

namespace lockstep::cli {

int64_t parseBytes(const std::string& text, const std::string& what) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) throw ConfigError(what + " '" + text + "': expected a size such as 4, 4K, 1M or 64MiB");
  int64_t value = parseInt(text.substr(0, digits), what, 0, INT64_MAX / (int64_t(1) << 30));
  std::string unit = text.substr(digits);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.empty() || unit == "B") return value;
  if (unit == "K" || unit == "KB" || unit == "KIB") return value << 10;
  if (unit == "M" || unit == "MB" || unit == "MIB") return value << 20;
  if (unit == "G" || unit == "GB" || unit == "GIB") return value << 30;
  throw ConfigError(what + " '" + text + "': unknown unit '" + text.substr(digits) + "'; expected B, K, M or G");
}

namespace {
constexpr const char* kBenchUsage =
    "usage: lockstep bench allreduce [--bytes LIST | --min-bytes B --max-bytes B --factor F]\n"
    "                                [--dtype float32|float64|float16|bfloat16] [--op sum|avg|max|min]\n"
    "                                [--device auto|cpu|cuda] [--iters N] [--warmup N] [--no-check] [--json]\n"
    "run it under `lockstep run -np N -- lockstep bench allreduce` to measure N workers\n"
    "       lockstep bench loader CONFIG.yaml [key=value ...] [--batches N]   (image loader vs trainer)\n"
    "       lockstep bench scaling CONFIG.yaml --np 1,2[,...] [--steps N] [--threads T] [--backend NAME] [--json]\n"
    "                              [key=value ...]   (training throughput and step phases per world size)\n"
    "       lockstep bench memory CONFIG.yaml --np 1,2[,...] [--strategies ddp,zero1,zero2,zero3] [--steps N] "
    "[--json]\n"
    "                             [key=value ...]   (bytes per rank and strategy, next to the theory)\n"
    "       lockstep bench predict CONFIG.yaml [--link 10gbit,1gbit,100mbit] [--workers 2,4,8,64,512] [--json]\n"
    "                              [--html FILE] [key=value ...]   (step time and efficiency on N machines)\n"
    "       lockstep bench sampler [--objective branin|hartmann6] [--algorithm tpe|random] [--trials N] [--seeds S]\n"
    "                              [--json]   (the sweep's samplers on synthetic objectives)";

/// `bench allreduce`'s arguments as AllreduceBenchOptions; an exit code when it should stop now.
std::optional<int> parseAllreduceArgs(const std::vector<std::string>& args, AllreduceBenchOptions& o) {
  std::string bytesList;
  std::string minBytes = "4";
  std::string maxBytes = "64M";
  int factor = 2;
  bool noCheck = false;
  CLI::App app{"Time allreduce for a range of message sizes", "lockstep bench allreduce"};
  app.add_option("--bytes", bytesList, "comma-separated sizes, e.g. 4K,1M,32M (overrides the range)");
  app.add_option("--min-bytes", minBytes, "smallest size (default 4)");
  app.add_option("--max-bytes", maxBytes, "largest size (default 64M)");
  app.add_option("--factor", factor, "size multiplier between steps (default 2)")->check(CLI::Range(2, 1024));
  app.add_option("--dtype", o.dtype, "element type")
      ->check(CLI::IsMember({"float32", "float64", "float16", "bfloat16"}));
  app.add_option("--op", o.op, "reduction")->check(CLI::IsMember({"sum", "avg", "max", "min"}));
  app.add_option("--device", o.device,
                 "where the buffers are: auto (the rank's GPU over nccl, else the CPU), cpu, or cuda (over gloo "
                 "or mpi staged through host memory)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--iters", o.iters, "timed iterations per size (default: by size, 5..50)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", o.warmup, "untimed iterations per size")->check(CLI::Range(0, 1000000));
  app.add_flag("--no-check", noCheck, "skip the check of the reduced values");
  app.add_flag("--json", o.json, "print one JSON document instead of the table");
  if (auto exit = parseArgs(app, args, "bench allreduce", kBenchUsage)) return exit;
  o.check = !noCheck;
  if (!bytesList.empty()) {
    size_t start = 0;
    while (start <= bytesList.size()) {
      size_t comma = bytesList.find(',', start);
      o.sizes.push_back(parseBytes(bytesList.substr(start, comma - start), "--bytes"));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    int64_t lo = parseBytes(minBytes, "--min-bytes");
    int64_t hi = parseBytes(maxBytes, "--max-bytes");
    if (lo < 1 || hi < lo) throw ConfigError("--min-bytes must be at least 1 and at most --max-bytes");
    for (int64_t b = lo; b <= hi; b *= factor) o.sizes.push_back(b);
  }
  return std::nullopt;
}

int allreduceCommand(const std::vector<std::string>& args) {
  AllreduceBenchOptions o;
  try {
    if (auto exit = parseAllreduceArgs(args, o)) return *exit;
  } catch (const ConfigError& e) {
    std::cerr << "lockstep bench allreduce: error: " << e.what() << "\n" << kBenchUsage << "\n";
    return kExitUsage;
  }
  return benchAllreduce(o);
}

}  // namespace

int benchCommand(const std::vector<std::string>& args) {
  using Bench = int (*)(const std::vector<std::string>&);
  static const std::pair<const char*, Bench> kBenches[] = {
      {"allreduce", &allreduceCommand}, {"loader", &benchLoader},   {"scaling", &benchScaling},
      {"memory", &benchMemory},         {"predict", &benchPredict}, {"sampler", &benchSampler}};
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::cout << kBenchUsage << "\n";
    return kExitOk;
  }
  for (const auto& [name, bench] : kBenches) {
    if (args.empty() || args[0] != name) continue;
    try {
      return bench(std::vector<std::string>(args.begin() + 1, args.end()));
    } catch (const ConfigError& e) {
      std::cerr << "lockstep bench " << name << ": error: " << e.what() << "\n";
      return kExitUsage;
    } catch (const std::exception& e) {
      std::cerr << "lockstep bench " << name << ": " << e.what() << "\n";
      return kExitFailure;
    }
  }
  std::cerr << "lockstep bench: error: "
            << (args.empty() ? "missing benchmark name" : "unknown benchmark '" + args[0] + "'") << "\n"
            << kBenchUsage << "\n";
  return kExitUsage;
}

}  // namespace lockstep::cli
