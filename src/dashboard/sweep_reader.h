// sweep_reader.h — reads the directory `lockstep sweep` writes (docs/sweeps.md#results) for the
// dashboard's sweep page: trials.jsonl, one JSON object per trial, rewritten atomically by the
// sweep (so a reader never sees half a file).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace lockstep::dashboard {

/// {"name": the directory's name, "metric", "mode" (from the trials), "trials": [trial objects]}, or
/// nullopt when `dir` holds no trials.jsonl. A line that is not a JSON object with "trial",
/// "params" and "status" throws RunFormatError naming the file and line.
std::optional<nlohmann::json> readSweep(const std::string& dir);

}  // namespace lockstep::dashboard
