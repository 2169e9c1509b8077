// The table, JSON and HTML page of predict_report.h.
#include "cli/bench/predict_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/byte_text.h"
#include "common/posix_io.h"
#include "lockstep/common/error.h"

namespace lockstep::cli {

namespace {

std::string profileLine(const PredictReport& r) {
  const ModelInputs& in = r.inputs;
  int64_t bytes = 0;
  for (const auto& b : in.pair.buckets) bytes += b.bytes;
  return fmt::format(
      "profile: 1 worker {:.0f} samples/s (step {:.1f} ms); 2 workers on this machine: compute {:.1f} ms a step "
      "(backward {:.1f}), {} bucket(s) of {} in all; the backend's own cost {:.2f} ns/byte moved + {:.0f} us a call",
      in.single.samplesPerSecond, 1e3 * in.single.computeSeconds(), 1e3 * in.pair.computeSeconds(),
      1e3 * in.pair.backward, in.pair.buckets.size(), detail::formatBytes(bytes), 1e9 * in.software.perByteSeconds,
      1e6 * in.software.perCallSeconds);
}

/// x: log2 of the workers; y: efficiency 0..1. One polyline per link.
std::string svgPlot(const PredictReport& r) {
  const double width = 640, height = 360, left = 60, right = 150, top = 20, bottom = 50;
  int maxWorkers = 2;
  for (const auto& p : r.rows) maxWorkers = std::max(maxWorkers, p.workers);
  const double xMax = std::log2(static_cast<double>(maxWorkers));
  auto x = [&](int n) { return left + (width - left - right) * std::log2(static_cast<double>(n)) / xMax; };
  auto y = [&](double e) { return top + (height - top - bottom) * (1 - std::clamp(e, 0.0, 1.0)); };
  static const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  std::string svg = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}">)", width, height);
  for (int tick = 0; tick <= 4; ++tick) {
    double e = tick / 4.0;
    svg += fmt::format(R"(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="#ddd"/>)"
                       R"(<text x="{}" y="{:.1f}" font-size="11" text-anchor="end">{:.0f}%</text>)",
                       left, width - right, y(e), y(e), left - 6, y(e) + 4, 100 * e);
  }
  for (int n = 1; n <= maxWorkers; n *= 2) {
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" text-anchor="middle">{}</text>)", x(n),
                       height - bottom + 16, n);
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">workers</text>)",
                     (left + width - right) / 2, height - 10);
  svg += fmt::format(R"svg(<text x="14" y="{}" font-size="12" transform="rotate(-90 14 {})" text-anchor="middle">)svg"
                     "scaling efficiency</text>",
                     height / 2, height / 2);
  for (size_t l = 0; l < r.links.size(); ++l) {
    std::string points = fmt::format("{:.1f},{:.1f}", x(1), y(1.0));
    for (const auto& p : r.rows) {
      if (p.link == r.links[l].name) points += fmt::format(" {:.1f},{:.1f}", x(p.workers), y(p.efficiency));
    }
    const char* colour = kColours[l % std::size(kColours)];
    svg += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>)", colour, points);
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="12" fill="{}">{}</text>)", width - right + 10,
                       top + 16 * (l + 1), colour, r.links[l].name);
  }
  return svg + "</svg>";
}

std::string htmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> predictAssumptions(const PredictReport& r) {
  std::vector<std::string> notes{
      fmt::format("each worker computes as the 2-worker profile's rank 0 did ({} thread(s) per worker, backend {})",
                  r.threadsPerWorker, r.backend),
      fmt::format("gradients are allreduced bucket by bucket as backward releases them, one allreduce at a time, "
                  "{}",
                  toString(r.inputs.algorithm)),
      "the backend's own cost per byte (copies, reduction, TCP stack) is the one measured between two workers of "
      "this machine, wire time adds to it; each bucket's fixed cost (per call, waiting for the others) stays as "
      "profiled with two workers",
      "every link between workers has the given speed and latency, full duplex, with no other traffic; no "
      "stragglers"};
  if (r.inputs.sharedCores > 0) {
    notes.push_back(
        fmt::format("the workers share {} cores (emulated hosts): compute and the backend's cost "
                    "stretch by N x threads / {}",
                    r.inputs.sharedCores, r.inputs.sharedCores));
  }
  return notes;
}

nlohmann::json predictJson(const PredictReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : r.rows) {
    rows.push_back({{"link", p.link},
                    {"workers", p.workers},
                    {"step_seconds", p.stepSeconds},
                    {"compute_seconds", p.computeSeconds},
                    {"comm_seconds", p.commSeconds},
                    {"exposed_seconds", p.exposedSeconds},
                    {"samples_per_second", p.samplesPerSecond},
                    {"efficiency", p.efficiency}});
  }
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : r.links)
    links.push_back({{"name", l.name}, {"bits_per_second", l.bitsPerSecond}, {"latency_seconds", l.latencySeconds}});
  const ModelInputs& in = r.inputs;
  return {{"benchmark", "predict"},
          {"config", r.config},
          {"backend", r.backend},
          {"algorithm", toString(in.algorithm)},
          {"threads_per_worker", r.threadsPerWorker},
          {"shared_cores", in.sharedCores},
          {"single_samples_per_second", in.single.samplesPerSecond},
          {"pair_compute_seconds", in.pair.computeSeconds()},
          {"buckets", in.pair.buckets.size()},
          {"software",
           {{"per_byte_seconds", in.software.perByteSeconds}, {"per_call_seconds", in.software.perCallSeconds}}},
          {"links", links},
          {"rows", rows},
          {"assumptions", predictAssumptions(r)}};
}

void printPredictTable(const PredictReport& r, std::ostream& out) {
  out << fmt::format("prediction for {}: backend {}, {} thread(s) per worker, batch {} per worker\n", r.config,
                     r.backend, r.threadsPerWorker, r.inputs.single.globalBatch);
  out << profileLine(r) << "\n";
  out << fmt::format("{:<16} {:>7} {:>9} {:>10} {:>9} {:>11} {:>10} {:>10}\n", "link", "workers", "step ms",
                     "compute ms", "comm ms", "exposed ms", "samples/s", "efficiency");
  for (const auto& p : r.rows) {
    out << fmt::format("{:<16} {:>7} {:>9.1f} {:>10.1f} {:>9.1f} {:>11.1f} {:>10.0f} {:>9.0f}%\n", p.link, p.workers,
                       1e3 * p.stepSeconds, 1e3 * p.computeSeconds, 1e3 * p.commSeconds, 1e3 * p.exposedSeconds,
                       p.samplesPerSecond, 100 * p.efficiency);
  }
  out << "assumptions:\n";
  for (const auto& a : predictAssumptions(r)) out << "  - " << a << "\n";
}

void writePredictHtml(const PredictReport& r, const std::string& path) {
  std::string page =
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>lockstep bench predict: " + htmlEscape(r.config) +
      "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
      "td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #ddd}</style></head><body>\n";
  page += "<h1>Predicted scaling of " + htmlEscape(r.config) + "</h1>\n<p>" + htmlEscape(profileLine(r)) + "</p>\n";
  page += svgPlot(r) +
          "\n<table><tr><th>link</th><th>workers</th><th>step ms</th><th>compute ms</th>"
          "<th>comm ms</th><th>exposed ms</th><th>samples/s</th><th>efficiency</th></tr>\n";
  for (const auto& p : r.rows) {
    page += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td><td>{:.1f}</td><td>{:.1f}</td><td>{:.0f}</td>"
        "<td>{:.0f}%</td></tr>\n",
        htmlEscape(p.link), p.workers, 1e3 * p.stepSeconds, 1e3 * p.computeSeconds, 1e3 * p.commSeconds,
        1e3 * p.exposedSeconds, p.samplesPerSecond, 100 * p.efficiency);
  }
  page += "</table>\n<h2>Assumptions</h2><ul>\n";
  for (const auto& a : predictAssumptions(r)) page += "<li>" + htmlEscape(a) + "</li>\n";
  page += "</ul></body></html>\n";
  try {
    detail::writeFileAtomically(path, {page}, detail::Durability::kProcessCrash);
  } catch (const Error& e) { throw Error(fmt::format("--html: {}", e.what())); }
}

}  // namespace lockstep::cli
