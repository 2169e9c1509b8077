// report.h — `lockstep report`: one self-contained HTML file for one run.
//
// The report is the dashboard page with its CSS and JS inlined and the run's
// data (the same JSON as GET /api/runs/<name>) embedded in a
// <script type="application/json" id="lockstep-data"> element; the page draws
// from it instead of fetching, so the file opens from disk with no server and
// no network.
#pragma once

#include <string>

namespace lockstep::dashboard {

/// The report page of run directory `runDir`. Throws RunNotFound when `runDir`
/// is not a run directory (no run.json), RunFormatError for a malformed file.
std::string buildReport(const std::string& runDir);

/// Builds the report, then writes it to `output` atomically: a temporary file
/// in the same directory, fsync, rename. An existing `output` is replaced only
/// once the report was built and written; on any error it is left untouched.
void writeReport(const std::string& runDir, const std::string& output);

}  // namespace lockstep::dashboard
