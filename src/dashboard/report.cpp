#include "dashboard/report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>

#include "common/posix_io.h"
#include "dashboard/assets.h"
#include "dashboard/run_reader.h"
#include "dashboard/sweep_reader.h"
#include "monitor/run_files.h"

namespace lockstep::dashboard {

namespace fs = std::filesystem;

namespace {

// index.html loads its CSS and JS with exactly these tags; the report inlines them.
constexpr std::string_view kStyleTag = R"(<link rel="stylesheet" href="style.css">)";
constexpr std::string_view kChartsTag = R"(<script src="charts.js"></script>)";
constexpr std::string_view kSweepTag = R"(<script src="sweep.js"></script>)";
constexpr std::string_view kScriptTag = R"(<script src="app.js"></script>)";

std::string assetBody(std::string_view name) {
  const Asset* asset = findAsset(name);
  LOCKSTEP_ASSERT(asset != nullptr, "asset ", name, " is not embedded");
  return std::string(asset->body);
}

void replaceOnce(std::string& text, std::string_view what, const std::string& with) {
  size_t at = text.find(what);
  LOCKSTEP_ASSERT(at != std::string::npos, "index.html lacks ", what);
  text.replace(at, what.size(), with);
}

/// JSON that can sit inside a <script> element: "</" only occurs inside JSON
/// strings, where "<\/" means the same.
std::string scriptSafeJson(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + 16);
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += '\\';
  }
  return out;
}

}  // namespace

/// The embedded data of a run's report: that run.
nlohmann::json runData(const std::string& runDir) {
  std::error_code ec;
  if (!fs::is_regular_file(runDir + "/run.json", ec)) {
    std::string hint;
    try {
      auto names = LogDir(runDir).runNames();
      if (!names.empty())
        hint = fmt::format("; it is a log directory holding the runs {} — pass one of them", fmt::join(names, ", "));
    } catch (const Error&) {}
    throw RunNotFound(fmt::format("'{}' is not a run directory: it has no run.json{}", runDir, hint));
  }
  RunReader reader(runDir, detail::runNameOf(runDir));
  reader.refresh();
  nlohmann::json data;
  data["runs"] = nlohmann::json::array({{{"name", reader.name()}, {"run", reader.info()}}});
  data["details"] = {{reader.name(), reader.toJson()}};
  return data;
}

std::string buildReport(const std::string& runDir) {
  std::error_code ec;
  if (!fs::exists(runDir, ec)) throw RunNotFound(fmt::format("run directory '{}' does not exist", runDir));
  if (!fs::is_directory(runDir, ec)) throw RunNotFound(fmt::format("'{}' is not a directory", runDir));
  // A sweep's directory: its trials (the page's sweep section), no run panels.
  std::optional<nlohmann::json> sweep =
      fs::is_regular_file(runDir + "/run.json", ec) ? std::nullopt : readSweep(runDir);
  nlohmann::json data =
      sweep
          ? nlohmann::json{{"runs", nlohmann::json::array()}, {"details", nlohmann::json::object()}, {"sweep", *sweep}}
          : runData(runDir);
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  data["report"] = {{"generated_time", now}, {"run_dir", fs::absolute(runDir).lexically_normal().string()}};

  std::string page = assetBody("index.html");
  std::string css = assetBody("style.css");
  std::string charts = assetBody("charts.js");
  std::string sweepJs = assetBody("sweep.js");
  std::string js = assetBody("app.js");
  LOCKSTEP_ASSERT(css.find("</style") == std::string::npos, "style.css cannot be inlined");
  LOCKSTEP_ASSERT(charts.find("</script") == std::string::npos, "charts.js cannot be inlined");
  LOCKSTEP_ASSERT(sweepJs.find("</script") == std::string::npos, "sweep.js cannot be inlined");
  LOCKSTEP_ASSERT(js.find("</script") == std::string::npos, "app.js cannot be inlined");
  replaceOnce(page, kStyleTag, "<style>\n" + css + "</style>");
  replaceOnce(page, kChartsTag, "<script>\n" + charts + "</script>");
  replaceOnce(page, kSweepTag, "<script>\n" + sweepJs + "</script>");
  replaceOnce(page, kScriptTag,
              "<script type=\"application/json\" id=\"lockstep-data\">" + scriptSafeJson(data) +
                  "</script>\n<script>\n" + js + "</script>");
  return page;
}

void writeReport(const std::string& runDir, const std::string& output) {
  detail::writeFileAtomically(output, {buildReport(runDir)}, detail::Durability::kMachineCrash);
}

}  // namespace lockstep::dashboard
