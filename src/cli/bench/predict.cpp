// bench/predict.cpp — `lockstep bench predict CONFIG --link 10gbit,1gbit
// --workers 2,8,64,512`: will data parallelism pay on N machines?
//
// Profiles the config twice on this machine, like `bench scaling`:
//   lockstep run -np 1 --threads T --backend B -- lockstep train CONFIG ... --result-json single.json
//   lockstep run -np 2 --threads T --backend B -- lockstep train CONFIG ... --result-json pair.json
// (per-step phases, the buckets' sizes, release moments and service times),
// measures the backend's own cost per byte between two workers,
//   lockstep run -np 2 --threads T --backend B -- lockstep bench allreduce --bytes 64K,16M --json
// then predicts step time, samples/s and efficiency for each (link, N) with
// the model of scaling_model.h, and prints them as a table, JSON or an HTML
// page with a plot (predict_report.cpp).
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "cli/bench/child_runs.h"
#include "cli/bench/predict_report.h"
#include "cli/bench/scaling_model.h"
#include "cli/commands.h"
#include "cli/parse_args.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/train/config.h"

namespace lockstep::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kPredictUsage =
    "usage: lockstep bench predict CONFIG.yaml [--link 10gbit,1gbit,100mbit] [--workers 2,4,8,64,512]\n"
    "                              [--latency 25us] [--backend gloo|mpi] [--threads T] [--steps N]\n"
    "                              [--shared-cores C] [--profile-dir DIR] [--json] [--html FILE] [key=value ...]";

struct PredictOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string links = "10gbit,1gbit,100mbit";
  std::string workers = "2,4,8,64,512";
  std::string latency = "25us";
  std::string backend = "gloo";
  int threads = 0;  ///< per worker; 0: max(1, cores / 2)
  int64_t steps = 30;
  int sharedCores = 0;
  std::string profileDir;
  bool json = false;
  std::string html;
};

std::optional<int> parsePredictArgs(const std::vector<std::string>& args, PredictOptions& o) {
  CLI::App app{
      "Profiles a config with one and two workers on this machine and predicts step time, samples/s and "
      "scaling efficiency of N workers over the given links",
      "lockstep bench predict"};
  std::vector<std::string> words;
  app.add_option("CONFIG.yaml key.path=value", words, "a training config, then overrides of its keys");
  app.add_option("--link", o.links,
                 "link speeds, comma-separated: 10gbit,1gbit,100mbit; NAME@LATENCY sets one's "
                 "one-way latency per message (25gbit@20us)");
  app.add_option("--workers", o.workers, "worker counts to predict, comma-separated (default 2,4,8,64,512)");
  app.add_option("--latency", o.latency, "one-way latency per message of a link given without one (default 25us)");
  app.add_option("--backend", o.backend,
                 "the backend between the machines, profiled on this one (default gloo, "
                 "what lockstep run picks across nodes)")
      ->check(CLI::IsMember({"gloo", "mpi"}));
  app.add_option("--threads", o.threads, "threads per worker (default max(1, cores / 2))")->check(CLI::Range(1, 4096));
  app.add_option("--steps", o.steps, "training steps per profile run (default 30)")
      ->check(CLI::Range(int64_t(3), int64_t(100000000)));
  app.add_option("--shared-cores", o.sharedCores,
                 "the workers are emulated hosts sharing C cores (bench/emulated_links.sh): compute stretches by "
                 "N x threads / C (default 0: every worker has its own cores)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--profile-dir", o.profileDir,
                 "keep the measurements here (single.json, pair.json, allreduce.json) and reuse them when "
                 "they are already there");
  app.add_flag("--json", o.json, "print the prediction as JSON instead of a table");
  app.add_option("--html", o.html, "also write a self-contained HTML page with the table and a plot");
  if (auto exit = parseArgs(app, args, "bench predict", kPredictUsage)) return exit;
  auto [file, overrides] = splitConfigArgs(words);
  if (file.empty()) throw ConfigError("missing CONFIG.yaml");
  o.config = file;
  o.overrides = overrides;
  return std::nullopt;
}

/// A `lockstep train --result-json` file as a StepProfile; Error naming the file otherwise.
StepProfile readProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("cannot read the profile {}", path));
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    StepProfile p;
    p.workers = j.at("world_size").get<int>();
    p.threadsPerWorker = j.at("threads_per_worker").get<int>();
    p.globalBatch = j.at("global_batch").get<int64_t>();
    p.samplesPerSecond = j.at("samples_per_second").get<double>();
    const auto& phases = j.at("phases_seconds");
    p.dataWait = phases.at("data_wait").get<double>();
    p.forward = phases.at("forward").get<double>();
    p.backward = phases.at("backward").get<double>();
    p.optimizer = phases.at("optimizer").get<double>();
    if (p.samplesPerSecond > 0) {  // the wall time a step took beyond its phases (which sum to step_seconds)
      p.betweenSteps =
          std::max(0.0, static_cast<double>(p.globalBatch) / p.samplesPerSecond - j.at("step_seconds").get<double>());
    }
    for (const auto& b : j.at("comm").at("bucket_profile")) {
      p.buckets.push_back(ProfiledBucket{b.at("bytes").get<int64_t>(), b.at("ready_seconds").get<double>(),
                                         b.at("comm_seconds").get<double>()});
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{} is not a lockstep train --result-json file: {}", path, e.what()));
  }
}

/// The profile of `workers` workers in `dir` (reused when there), else one run writing it.
StepProfile profile(const PredictOptions& o, int workers, int threads, const std::string& dir) {
  const std::string tag = workers == 1 ? "single" : "pair";
  const std::string resultPath = dir + "/" + tag + ".json";
  if (fs::exists(resultPath)) {
    std::cerr << fmt::format("lockstep bench predict: reusing the profile {}\n", resultPath);
    return readProfile(resultPath);
  }
  TrainChild child;
  child.workers = workers;
  child.threads = threads;
  child.runFlags = {"--backend", o.backend};
  child.config = o.config;
  child.overrides = o.overrides;
  child.extra = {"trainer.max_steps=" + std::to_string(o.steps)};
  child.resultPath = resultPath + ".partial";
  child.logPath = dir + "/" + tag + ".log";
  runTrainChild(child, "bench predict", fmt::format("the profile run with {} worker(s)", workers));
  fs::rename(resultPath + ".partial", resultPath);
  return readProfile(resultPath);
}

/// The backend's cost per byte between two workers of this machine (allreduce.json in `dir`, reused
/// when there): `lockstep bench allreduce` at two sizes, a line through them.
SoftwareCost measureSoftwareCost(const PredictOptions& o, int threads, const std::string& dir) {
  const std::string path = dir + "/allreduce.json";
  if (!fs::exists(path)) {
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    std::vector<std::string> argv{self,        "run",     "-np",         "2",     "--threads", std::to_string(threads),
                                  "--backend", o.backend, "--no-prefix", "--",    self,        "bench",
                                  "allreduce", "--bytes", "64K,16M",     "--json"};
    std::cerr << fmt::format("lockstep bench predict: the backend's own cost: {}\n", shellJoin(argv));
    const std::string logPath = dir + "/allreduce.log";
    int rc = runLogged(argv, logPath);
    if (rc != 0) {
      throw Error(fmt::format("the allreduce benchmark failed (exit code {}); the last lines of its output ({}):\n{}",
                              rc, logPath, lastLines(logPath, 20)));
    }
    // The log holds the launcher's lines too: the document is the last line that is a JSON object.
    std::ifstream log(logPath);
    std::string line, text;
    while (std::getline(log, line)) {
      if (!line.empty() && line.front() == '{') text = line + "\n";
    }
    std::ofstream(path + ".partial") << text;
    fs::rename(path + ".partial", path);
  } else {
    std::cerr << fmt::format("lockstep bench predict: reusing the allreduce timings {}\n", path);
  }
  std::ifstream in(path);
  try {
    std::vector<std::pair<int64_t, double>> timings;
    const nlohmann::json doc = nlohmann::json::parse(in);
    for (const auto& r : doc.at("results")) {
      timings.emplace_back(r.at("bytes").get<int64_t>(), 1e-6 * r.at("time_us").get<double>());
    }
    return fitSoftwareCost(timings);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{} is not a lockstep bench allreduce --json document: {}", path, e.what()));
  }
}

std::vector<int> parseWorkerCounts(const std::string& text) {
  try {
    return parseWorldSizes(text);
  } catch (const ConfigError&) {
    throw ConfigError(
        fmt::format("--workers '{}': expected a comma-separated list of worker counts of at least 1, "
                    "e.g. --workers 2,8,64,512",
                    text));
  }
}

int runPredict(const PredictOptions& o, const std::vector<LinkSpec>& links, const std::vector<int>& counts) {
  const int cores = workerThreads(Environment({}), 1);
  const int threads = o.threads > 0 ? o.threads : std::max(1, cores / 2);
  const bool scratch = o.profileDir.empty();
  const std::string dir = scratch ? makeScratchDir("lockstep-predict") : o.profileDir;
  if (!scratch) fs::create_directories(dir);
  ModelInputs in;
  in.single = profile(o, 1, threads, dir);
  in.pair = profile(o, 2, threads, dir);
  if (in.pair.buckets.empty()) {
    throw Error(
        fmt::format("the two-worker profile ({}/pair.json) has no gradient buckets: bench predict models "
                    "data parallelism (strategy ddp)",
                    dir));
  }
  in.software = measureSoftwareCost(o, threads, dir);
  in.algorithm = o.backend == "mpi" ? AllreduceAlgorithm::kFastest : AllreduceAlgorithm::kRing;
  in.sharedCores = o.sharedCores;
  PredictReport report{o.config, o.backend, threads, in, {}, links};
  for (const LinkSpec& link : links) {
    for (int n : counts) report.rows.push_back(predict(in, link, n));
  }
  if (o.json) {
    std::cout << predictJson(report).dump() << "\n";  // one line: the last line of the output is the document
  } else {
    printPredictTable(report, std::cout);
  }
  if (!o.html.empty()) {
    writePredictHtml(report, o.html);
    std::cerr << fmt::format("lockstep bench predict: wrote {}\n", o.html);
  }
  if (scratch) fs::remove_all(dir);
  return kExitOk;
}

}  // namespace

int benchPredict(const std::vector<std::string>& args) {
  PredictOptions o;
  std::vector<LinkSpec> links;
  std::vector<int> counts;
  try {
    if (auto exit = parsePredictArgs(args, o)) return *exit;
    links = parseLinks(o.links, parseLatencySeconds(o.latency, "--latency"));
    counts = parseWorkerCounts(o.workers);
    std::vector<std::string> all = o.overrides;
    all.push_back("trainer.max_steps=" + std::to_string(o.steps));
    loadTrainConfig(o.config, all);  // a bad config or override fails before any run
  } catch (const ConfigError& e) {
    std::cerr << "lockstep bench predict: error: " << e.what() << "\n" << kPredictUsage << "\n";
    return kExitUsage;
  }
  try {
    return runPredict(o, links, counts);
  } catch (const std::exception& e) {
    std::cerr << "lockstep bench predict: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace lockstep::cli
