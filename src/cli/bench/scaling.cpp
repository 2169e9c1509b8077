// bench/scaling.cpp — `lockstep bench scaling CONFIG --np 1,2[,...]`: does
// adding workers help, and if not, why?
//
// For each world size k it runs, one after the other,
//   lockstep run -np k --threads T [--backend B] -- lockstep train CONFIG [overrides]
//       trainer.max_steps=N trainer.validate=false checkpoint.resume=none
//       checkpoint.dir=TMP/npK-checkpoints --result-json TMP/npK.json
// reads back rank 0's step breakdown (trainer.h: StepBreakdown) and prints
// throughput, speed-up, scaling efficiency and where a step's time went, with
// one line per under-scaling row naming the phase that grew the most.
#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "cli/bench/child_runs.h"
#include "cli/commands.h"
#include "cli/parse_args.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/train/config.h"

namespace lockstep::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kScalingUsage =
    "usage: lockstep bench scaling CONFIG.yaml --np 1,2[,...] [--steps N] [--threads T] [--backend NAME] [--json]\n"
    "                              [key=value ...]";

constexpr double kGoodEfficiency = 0.95;

struct ScalingOptions {
  std::string config;
  std::vector<int> worldSizes;
  int64_t steps = 30;
  int threads = 0;  ///< per worker; 0: max(1, cores / k)
  std::string backend;
  bool json = false;
  std::vector<std::string> overrides;
};

/// The per-phase order of the table, as named in the result files.
constexpr std::array<const char*, 5> kPhases{"data_wait", "forward", "backward", "comm_wait", "optimizer"};

struct Row {
  int np = 0;
  int threads = 0;
  double samplesPerSecond = 0;
  double speedup = 1;
  double efficiency = 1;
  int64_t globalBatch = 0;
  int64_t timedSteps = 0;
  double runSeconds = 0;
  double wallStepMs = 0;  ///< global batch / samples per second: what the throughput implies
  double stepMs = 0;      ///< the measured step span, = sum of the phases
  std::array<double, 5> phaseMs{};
  double commTotalMs = 0;
  double commExposedMaxMs = 0;
  double commHidden = -1;  ///< fraction; -1 without communication
  int buckets = 0;
  int64_t bucketBytes = 0;
  double otherCores = -1;  ///< cores' worth of CPU other processes used during the run (-1: unknown)

  double phase(const std::string& name) const {
    for (size_t i = 0; i < kPhases.size(); ++i) {
      if (name == kPhases[i]) return phaseMs[i];
    }
    return 0;
  }
  double computeMs() const { return phase("forward") + phase("backward"); }
};

/// Parses `bench scaling`'s arguments into `o`; an exit code when the command
/// should stop now (help, a CLI11 error), ConfigError for a bad value.
std::optional<int> parseScalingArgs(const std::vector<std::string>& args, ScalingOptions& o) {
  CLI::App app{
      "Runs `lockstep run -np K -- lockstep train CONFIG` for each K with trainer.max_steps=N and compares "
      "samples/s and the per-step phases",
      "lockstep bench scaling"};
  std::vector<std::string> words;
  std::string np;
  app.add_option("CONFIG.yaml key.path=value", words, "a training config, then overrides of its keys");
  auto* npOption = app.add_option("-n,--np", np, "the world sizes to compare, comma-separated (e.g. 1,2,4)");
  app.add_option("--steps", o.steps, "training steps per run (default 30)")
      ->check(CLI::Range(int64_t(2), int64_t(100000000)));
  app.add_option("--threads", o.threads, "threads per worker (default max(1, cores / K))")->check(CLI::Range(1, 4096));
  app.add_option("--backend", o.backend, "passed to lockstep run --backend")->check([](const std::string& v) {
    return v.empty() ? std::string("needs a name") : std::string();
  });
  app.add_flag("--json", o.json, "print the result as JSON instead of a table");
  std::vector<std::string> spelled;
  for (const auto& a : args) spelled.push_back(a == "-np" ? "--np" : a);  // mpirun's spelling
  if (auto exit = parseArgs(app, spelled, "bench scaling", kScalingUsage)) return exit;
  if (npOption->count() == 0) throw ConfigError("missing --np, the world sizes to compare (e.g. --np 1,2)");
  o.worldSizes = parseWorldSizes(np);
  auto [file, overrides] = splitConfigArgs(words);
  if (file.empty()) throw ConfigError("missing CONFIG.yaml");
  o.config = file;
  o.overrides = overrides;
  return std::nullopt;
}

/// CPU seconds the whole machine spent busy so far (/proc/stat), -1 where unreadable.
double machineBusySeconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu") return -1;
  return (user + nice + system + irq + softirq + steal) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// CPU seconds of our finished children and their waited-for descendants (the workers).
double childrenCpuSeconds() {
  struct rusage usage {};
  ::getrusage(RUSAGE_CHILDREN, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

Row readRow(const std::string& path, int np) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("the run with {} worker(s) exited 0 but wrote no {}", np, path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    Row r;
    r.np = np;
    r.threads = j.at("threads_per_worker").get<int>();
    r.samplesPerSecond = j.at("samples_per_second").get<double>();
    r.globalBatch = j.at("global_batch").get<int64_t>();
    r.timedSteps = j.at("timed_steps").get<int64_t>();
    r.runSeconds = j.at("seconds").get<double>();
    r.stepMs = 1e3 * j.at("step_seconds").get<double>();
    for (size_t i = 0; i < kPhases.size(); ++i)
      r.phaseMs[i] = 1e3 * j.at("phases_seconds").at(kPhases[i]).get<double>();
    const auto& comm = j.at("comm");
    r.commTotalMs = 1e3 * comm.at("seconds").get<double>();
    r.commExposedMaxMs = 1e3 * comm.at("exposed_seconds_max").get<double>();
    r.commHidden = comm.at("hidden_fraction").is_null() ? -1 : comm.at("hidden_fraction").get<double>();
    r.buckets = comm.at("buckets").get<int>();
    r.bucketBytes = comm.at("bucket_bytes").get<int64_t>();
    if (r.samplesPerSecond > 0) r.wallStepMs = 1e3 * static_cast<double>(r.globalBatch) / r.samplesPerSecond;
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(
        fmt::format("{} (written by the run with {} worker(s)) is not a lockstep result: {}", path, np, e.what()));
  }
}

/// One line saying what cost the most when `row` scales worse than kGoodEfficiency against `base`.
std::string explain(const Row& base, const Row& row, int cores) {
  struct Cause {
    double extraMs;
    std::string text;
  };
  auto ms = [](double v) { return fmt::format("{:.1f}", v); };
  std::vector<Cause> causes;
  std::string threadsNote;
  if (row.threads < base.threads) {
    threadsNote = fmt::format(" — each worker has {} thread(s) instead of {}", row.threads, base.threads);
  } else if (row.np * row.threads > cores) {
    threadsNote = fmt::format(" — {} workers x {} thread(s) oversubscribe {} cores", row.np, row.threads, cores);
  } else {
    threadsNote = " — the workers share the cores' caches and memory bandwidth (and any other load on the machine)";
  }
  causes.push_back({row.computeMs() - base.computeMs(),
                    fmt::format("compute per worker got slower: forward+backward went from {} to {} ms per step{}",
                                ms(base.computeMs()), ms(row.computeMs()), threadsNote)});
  double exposed = row.phase("comm_wait");
  std::string hidden = row.commHidden >= 0
                           ? fmt::format("; the allreduce took {} ms, {:.0f}% of it hidden behind backward",
                                         ms(row.commTotalMs), 100 * row.commHidden)
                           : "";
  if (row.buckets == 1) {
    hidden +=
        "; all gradients are in one bucket, which can only start when backward ends: a smaller "
        "ddp.bucket_cap_mb lets communication overlap backward";
  }
  causes.push_back(
      {exposed - base.phase("comm_wait"),
       fmt::format("exposed communication is {:.0f}% of the step ({} of {} ms{})",
                   row.stepMs > 0 ? 100 * exposed / row.stepMs : 0.0, ms(exposed), ms(row.stepMs), hidden)});
  causes.push_back({row.phase("data_wait") - base.phase("data_wait"),
                    fmt::format("waiting for data went from {} to {} ms per step (raise data.num_workers)",
                                ms(base.phase("data_wait")), ms(row.phase("data_wait")))});
  causes.push_back({row.phase("optimizer") - base.phase("optimizer"),
                    fmt::format("the optimizer step went from {} to {} ms", ms(base.phase("optimizer")),
                                ms(row.phase("optimizer")))});
  double outside = row.wallStepMs - row.stepMs;
  double outsideBase = base.wallStepMs - base.stepMs;
  causes.push_back(
      {outside - outsideBase, fmt::format("time between steps (logging, checkpoints) went from {} to {} ms per step",
                                          ms(outsideBase), ms(outside))});
  const Cause& worst = *std::max_element(causes.begin(), causes.end(),
                                         [](const Cause& a, const Cause& b) { return a.extraMs < b.extraMs; });
  return fmt::format("np {}: efficiency {:.0f}%: {}", row.np, 100 * row.efficiency, worst.text);
}

std::string formatHidden(double fraction) {
  return fraction < 0 ? std::string("-") : fmt::format("{:.0f}%", 100 * fraction);
}

void printTable(const ScalingOptions& o, const std::vector<Row>& rows, const std::vector<std::string>& notes,
                int cores) {
  std::cout << fmt::format(
      "scaling of {}: {} steps per run (the first is not timed), batch {} per worker, {} cores{}\n", o.config, o.steps,
      rows[0].globalBatch / rows[0].np, cores, o.backend.empty() ? "" : ", backend " + o.backend);
  std::cout << fmt::format("{:>4} {:>7} {:>10} {:>8} {:>10} | {:>9} {:>8} {:>8} {:>8} {:>9} {:>8} | {:>10} {:>6}\n",
                           "np", "threads", "samples/s", "speed-up", "efficiency", "data ms", "fwd ms", "bwd ms",
                           "comm ms", "optim ms", "step ms", "allreduce", "comm");
  std::cout << fmt::format("{:>4} {:>7} {:>10} {:>8} {:>10} | {:>9} {:>8} {:>8} {:>8} {:>9} {:>8} | {:>10} {:>6}\n", "",
                           "/worker", "", "", "", "wait", "", "", "exposed", "", "", "ms", "hidden");
  for (const Row& r : rows) {
    std::cout << fmt::format(
        "{:>4} {:>7} {:>10.0f} {:>7.2f}x {:>9.0f}% | {:>9.1f} {:>8.1f} {:>8.1f} {:>8.1f} {:>9.1f} {:>8.1f} | {:>10} "
        "{:>6}\n",
        r.np, r.threads, r.samplesPerSecond, r.speedup, 100 * r.efficiency, r.phase("data_wait"), r.phase("forward"),
        r.phase("backward"), r.phase("comm_wait"), r.phase("optimizer"), r.stepMs,
        r.commHidden < 0 ? std::string("-") : fmt::format("{:.1f}", r.commTotalMs), formatHidden(r.commHidden));
  }
  std::cout << "per-step times are rank 0's means over the timed steps; comm exposed = waiting for the gradient "
               "allreduce after backward\n";
  for (const auto& n : notes) std::cout << n << "\n";
}

void printJson(const ScalingOptions& o, const std::vector<Row>& rows, const std::vector<std::string>& notes,
               int cores) {
  nlohmann::json list = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json phases = nlohmann::json::object();
    for (size_t i = 0; i < kPhases.size(); ++i) phases[kPhases[i]] = r.phaseMs[i];
    list.push_back(
        {{"np", r.np},
         {"threads_per_worker", r.threads},
         {"samples_per_second", r.samplesPerSecond},
         {"speedup", r.speedup},
         {"efficiency", r.efficiency},
         {"global_batch", r.globalBatch},
         {"timed_steps", r.timedSteps},
         {"run_seconds", r.runSeconds},
         {"step_ms", r.stepMs},
         {"wall_step_ms", r.wallStepMs},
         {"phases_ms", phases},
         {"comm_exposed_ms", r.phase("comm_wait")},
         {"comm_exposed_max_ms", r.commExposedMaxMs},
         {"comm_total_ms", r.commTotalMs},
         {"comm_hidden_fraction", r.commHidden < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.commHidden)},
         {"buckets", r.buckets},
         {"bucket_bytes", r.bucketBytes},
         {"other_processes_cores", r.otherCores < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.otherCores)}});
  }
  nlohmann::json doc = {{"benchmark", "scaling"},
                        {"config", o.config},
                        {"steps", o.steps},
                        {"cores", cores},
                        {"backend", o.backend.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.backend)},
                        {"overrides", o.overrides},
                        {"rows", list},
                        {"notes", notes}};
  std::cout << doc.dump() << "\n";  // one line: the last line of the output is the document
}

/// One `lockstep run -np np ... lockstep train` child, timed; its row, or a
/// message (naming its log) when it failed.
Row runOne(const ScalingOptions& o, int np, int threads, const std::string& scratch) {
  const std::string tag = "np" + std::to_string(np);
  TrainChild child;
  child.workers = np;
  child.threads = threads;
  if (!o.backend.empty()) child.runFlags = {"--backend", o.backend};
  child.config = o.config;
  child.overrides = o.overrides;
  // Checkpoints are written as in a real run (their time shows as "between steps").
  child.extra = {"trainer.max_steps=" + std::to_string(o.steps),
                 "checkpoint.dir=" + scratch + "/" + tag + "-checkpoints"};
  child.resultPath = scratch + "/" + tag + ".json";
  child.logPath = scratch + "/" + tag + ".log";
  const double busyBefore = machineBusySeconds();
  const double ownBefore = childrenCpuSeconds();
  auto start = std::chrono::steady_clock::now();
  runTrainChild(child, "bench scaling", fmt::format("the run with {} worker(s) x {} thread(s)", np, threads));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double busyAfter = machineBusySeconds();
  const double own = childrenCpuSeconds() - ownBefore;
  Row row;
  try {
    row = readRow(child.resultPath, np);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}\nthe last lines of its output ({}):\n{}", e.what(), child.logPath,
                            lastLines(child.logPath, 20)));
  }
  if (busyBefore >= 0 && busyAfter >= 0 && seconds > 0) {
    row.otherCores = std::max(0.0, (busyAfter - busyBefore - own) / seconds);
  }
  std::cerr << fmt::format("lockstep bench scaling: {} worker(s): {:.0f} samples/s ({:.1f} s)\n", np,
                           row.samplesPerSecond, seconds);
  return row;
}

/// Fills speedup and efficiency against the first row; the notes that explain the table.
std::vector<std::string> compareRows(std::vector<Row>& rows, int cores) {
  const Row& base = rows.front();
  std::vector<std::string> notes;
  for (Row& r : rows) {
    r.speedup = base.samplesPerSecond > 0 ? r.samplesPerSecond / base.samplesPerSecond : 0;
    r.efficiency = r.speedup * static_cast<double>(base.np) / static_cast<double>(r.np);
    if (&r != &base && r.efficiency < kGoodEfficiency) notes.push_back(explain(base, r, cores));
  }
  if (notes.empty() && rows.size() > 1) {
    notes.push_back(fmt::format("scaling efficiency is at least {:.0f}% at every size", 100 * kGoodEfficiency));
  }
  // Other work on the machine skews every figure: say so when there was some.
  std::string busy;
  for (const Row& r : rows) {
    if (r.otherCores >= 0.1 * cores) {
      busy += fmt::format("{}{:.1f} during np {}", busy.empty() ? "" : ", ", r.otherCores, r.np);
    }
  }
  if (!busy.empty()) {
    notes.push_back(
        fmt::format("the machine was shared: other processes kept {} of the {} cores busy on average; "
                    "these figures are lower than on an idle machine",
                    busy, cores));
  }
  return notes;
}

}  // namespace

int benchScaling(const std::vector<std::string>& args) {
  ScalingOptions o;
  try {
    if (auto exit = parseScalingArgs(args, o)) return *exit;
    // The config and overrides are checked here, before any run starts.
    std::vector<std::string> all = o.overrides;
    all.push_back("trainer.max_steps=" + std::to_string(o.steps));
    loadTrainConfig(o.config, all);
  } catch (const ConfigError& e) {
    std::cerr << "lockstep bench scaling: error: " << e.what() << "\n" << kScalingUsage << "\n";
    return kExitUsage;
  }

  const int cores = workerThreads(Environment({}), 1);
  std::string scratch;
  try {
    scratch = makeScratchDir("lockstep-scaling");
  } catch (const Error& e) {
    std::cerr << "lockstep bench scaling: " << e.what() << "\n";
    return kExitFailure;
  }

  std::vector<Row> rows;
  try {
    for (int np : o.worldSizes)
      rows.push_back(runOne(o, np, o.threads > 0 ? o.threads : std::max(1, cores / np), scratch));
  } catch (const Error& e) {
    std::cerr << "lockstep bench scaling: " << e.what();
    return kExitFailure;
  }
  std::vector<std::string> notes = compareRows(rows, cores);
  if (o.json) {
    printJson(o, rows, notes, cores);
  } else {
    printTable(o, rows, notes, cores);
  }
  fs::remove_all(scratch);
  return kExitOk;
}

}  // namespace lockstep::cli
