// predict_report.h — how `lockstep bench predict` shows its prediction: a
// table, a JSON document, or a self-contained HTML page with a plot of
// samples/s and efficiency against the number of workers, one line per link.
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "cli/bench/scaling_model.h"

namespace lockstep::cli {

struct PredictReport {
  std::string config;
  std::string backend;
  int threadsPerWorker = 1;
  ModelInputs inputs;
  std::vector<Prediction> rows;  ///< link by link, each over the worker counts
  std::vector<LinkSpec> links;
};

/// The model's assumptions in words (every output carries them).
std::vector<std::string> predictAssumptions(const PredictReport& report);
nlohmann::json predictJson(const PredictReport& report);
void printPredictTable(const PredictReport& report, std::ostream& out);
/// Writes the page atomically; Error naming the file when it cannot.
void writePredictHtml(const PredictReport& report, const std::string& path);

}  // namespace lockstep::cli
