// run_dir.h — reading back what the monitor wrote (tests only).
#pragma once

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lockstep/train/callbacks.h"

namespace lockstep::test {

inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::vector<std::string> readLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// Every line of a JSONL file, parsed (a parse error fails the test with the line).
inline std::vector<nlohmann::json> readJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (const auto& line : readLines(path)) out.push_back(nlohmann::json::parse(line));
  return out;
}

/// A step of `phases` (each 1000 µs, tiling the step) from `startUs`, with two
/// buckets launched during backward and completed after it.
inline StepRecord syntheticStep(int64_t step, double startUs) {
  StepRecord r;
  r.step = step;
  r.epoch = (step - 1) / 10;
  r.startUs = startUs;
  r.loss = 1.0 / static_cast<double>(step);
  r.lr = 0.01;
  double t = startUs;
  for (Phase p : {Phase::kDataWait, Phase::kForward, Phase::kBackward, Phase::kCommWait, Phase::kOptimizer}) {
    r.phases.push_back(PhaseSpan{p, t, 1000});
    t += 1000;
  }
  r.durationUs = t - startUs;
  // Backward is [2000, 3000), comm wait [3000, 4000) after the start.
  r.buckets.push_back(BucketSpan{0, 4096, startUs + 2200, startUs + 2800});
  r.buckets.push_back(BucketSpan{1, 1024, startUs + 2600, startUs + 3500});
  return r;
}

}  // namespace lockstep::test
