// run_fixture.h — writes a run directory in the monitor layer's format
// (docs/dashboard.md), so the dashboard's tests read real files.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace lockstep::test {

struct RunFixture {
  int ranks = 2;
  int steps = 40;
  int valEvery = 10;
  std::string status = "finished";
  bool gpu = false;
  bool memory = true;    ///< run.json "memory", as a finished run writes it
  bool ps = false;       ///< run.json "ps" of an async_ps run: updates by staleness 0/1/2: 5, 3, 1
  bool elastic = false;  ///< run.json "generations": 4 -> 3 workers after step 12 (0.25 s), 3 -> 2 after 30 (0.5 s)
  std::string config = "model:\n  type: charlstm\ntrainer:\n  max_steps: 40\n";
};

inline double fixtureNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline void writeText(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline void appendText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << text;
}

inline std::string trainLine(int step, double t) {
  return nlohmann::json{{"kind", "train"},
                        {"step", step},
                        {"epoch", step / 20},
                        {"time", t},
                        {"loss", 3.0 / std::sqrt(step)},
                        {"lr", 0.01},
                        {"samples_per_sec", 900.0 + step},
                        {"step_time", 0.05}}
             .dump() +
         "\n";
}

/// Writes run.json, config.yaml, metrics.jsonl and per-rank system, phases and
/// timeline files under `dir` (created).
inline void writeRunFixture(const std::string& dir, const RunFixture& f = {}) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  double t0 = fixtureNow() - 10.0 * f.steps;
  nlohmann::json run{{"name", fs::path(dir).filename().string()},
                     {"start_time", t0},
                     {"updated_time", t0 + 10.0 * f.steps},
                     {"world_size", f.ranks},
                     {"hostname", "fixture-host"},
                     {"status", f.status},
                     {"total_steps", f.steps},
                     {"step", f.steps},
                     {"global_batch", 32 * f.ranks}};
  if (f.memory) {
    run["memory"] = nlohmann::json::array();
    for (int r = 0; r < f.ranks; ++r) {
      // rank r: 1+r MB parameters, 1 MB gradients, 2 MB optimizer; model state 4+r MB
      run["memory"].push_back({{"rank", r},
                               {"parameter_bytes", 1000000 * (1 + r)},
                               {"gradient_bytes", 1000000},
                               {"optimizer_bytes", 2000000},
                               {"comm_buffer_bytes", 0},
                               {"step_peak_bytes", nullptr},
                               {"peak_rss_bytes", 300000000}});
    }
  }
  if (f.ps) { run["ps"] = {{"staleness_bound", 2}, {"staleness", {5, 3, 1}}, {"wait_seconds", {0.5, 1.25}}}; }
  if (f.elastic) {
    run["generations"] = {{{"generation", 1},
                           {"step", 12},
                           {"time", t0 + 120},
                           {"world_size", 3},
                           {"previous_world_size", 4},
                           {"recovery_seconds", 0.25}},
                          {{"generation", 2},
                           {"step", 30},
                           {"time", t0 + 300},
                           {"world_size", 2},
                           {"previous_world_size", 3},
                           {"recovery_seconds", 0.5}}};
  }
  writeText(dir + "/run.json", run.dump(2) + "\n");
  writeText(dir + "/config.yaml", f.config);
  std::string metrics;
  for (int s = 1; s <= f.steps; ++s) {
    metrics += trainLine(s, t0 + 10.0 * s);
    if (s % f.valEvery == 0) {
      metrics += nlohmann::json{{"kind", "val"},
                                {"step", s},
                                {"epoch", s / 20},
                                {"time", t0 + 10.0 * s},
                                {"val_loss", 3.2 / std::sqrt(s)},
                                {"val_accuracy", nullptr}}
                     .dump() +
                 "\n";
    }
  }
  writeText(dir + "/metrics.jsonl", metrics);
  for (int r = 0; r < f.ranks; ++r) {
    std::string system;
    std::string phases;
    for (int i = 0; i < f.steps; ++i) {
      nlohmann::json sample{{"time", t0 + 10.0 * i},
                            {"rank", r},
                            {"pid", 1000 + r},
                            {"cpu_percent", 95.0 + r},
                            {"rss_bytes", 200000000 + i * 1000},
                            {"threads", 4}};
      if (f.gpu) {  // as NVML reports an 80 GiB GPU per worker
        sample["gpu_index"] = r;
        sample["gpu_util"] = 50.0 + r;
        sample["gpu_mem_bytes"] = 1000000000 + int64_t{100000000} * i;
        sample["gpu_mem_total_bytes"] = int64_t{80} << 30;
        sample["gpu_power_watts"] = 300.0 + r;
        sample["gpu_sm_clock_mhz"] = 1980;
        sample["gpu_temp_c"] = 40 + i % 3;
      }
      system += sample.dump() + "\n";
      phases += nlohmann::json{{"step", i + 1},       {"time", t0 + 10.0 * i},
                               {"data_wait_ms", 1.0}, {"forward_ms", 10.0 + r},
                               {"backward_ms", 20.0}, {"comm_wait_ms", 3.0},
                               {"optimizer_ms", 2.0}, {"step_ms", 38.0 + r},
                               {"comm_ms", 15.0},     {"buckets", 4}}
                    .dump() +
                "\n";
    }
    writeText(dir + "/system/rank" + std::to_string(r) + ".jsonl", system);
    writeText(dir + "/phases/rank" + std::to_string(r) + ".jsonl", phases);
    writeText(dir + "/timeline/rank" + std::to_string(r) + ".trace.json", "{\"traceEvents\":[]}\n");
  }
}

}  // namespace lockstep::test
