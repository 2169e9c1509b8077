// End to end: the files of a real 2-worker training, `lockstep dashboard` as a real
// process, and Debian's headless chromium loading the page; the DOM it dumps
// after running the page's JS must show the loss and throughput charts and the
// per-worker panel drawn with data (the data-* attributes app.js sets after
// drawing). The same for the file `lockstep report` writes, opened from disk.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "dashboard/dashboard_process.h"
#include "dashboard/run_fixture.h"
#include "support/subprocess.h"
#include "support/tiny_config.h"

namespace lockstep::dashboard {
namespace {

namespace fs = std::filesystem;

constexpr const char* kChromium = "/usr/bin/chromium";

/// The DOM of `url` after its scripts ran (virtual time: the page's timers fire without waiting).
std::string dumpDom(const std::string& url) {
  if (!fs::exists(kChromium)) {
    ADD_FAILURE() << kChromium << " is missing: scripts/setup.sh installs Debian's chromium package";
    return {};
  }
  std::string profile = test::makeTempDir();
  test::ProcessOptions options;
  options.timeout = std::chrono::seconds(90);
  auto result = test::runProcess(
      {kChromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
       "--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir=" + profile,
       "--window-size=1280,1600", "--virtual-time-budget=10000", "--dump-dom", url},
      options);
  std::error_code ec;
  fs::remove_all(profile, ec);
  EXPECT_EQ(result.exitCode, 0) << "chromium failed on " << url << ":\n" << result.err;
  return result.out;
}

/// The attributes of the first element whose opening tag contains `marker`.
std::map<std::string, std::string> tagAttributes(const std::string& dom, const std::string& marker) {
  std::map<std::string, std::string> attributes;
  size_t at = dom.find(marker);
  if (at == std::string::npos) return attributes;
  size_t open = dom.rfind('<', at);
  size_t close = dom.find('>', at);
  std::string tag = dom.substr(open, close - open);
  static const std::regex kAttribute(R"re(([a-zA-Z-]+)="([^"]*)")re");
  for (std::sregex_iterator it(tag.begin(), tag.end(), kAttribute), end; it != end; ++it) {
    attributes[(*it)[1].str()] = (*it)[2].str();
  }
  return attributes;
}

int intAttribute(const std::map<std::string, std::string>& attributes, const std::string& name) {
  auto it = attributes.find(name);
  return it == attributes.end() || it->second.empty() ? -1 : std::stoi(it->second);
}

/// The geometry of the first line (an SVG path with fill="none") drawn inside the
/// element whose opening tag contains `marker`, up to the next chart: how many
/// points it joins and over how many distinct x pixels.
struct DrawnLine {
  int points = 0;
  int distinctX = 0;
};
DrawnLine drawnLine(const std::string& dom, const std::string& marker) {
  DrawnLine line;
  size_t at = dom.find(marker);
  if (at == std::string::npos) return line;
  size_t end = std::min(dom.find(" id=\"", at + marker.size()), dom.find("data-chart=\"", at + marker.size()));
  static const std::regex kPath(R"re(<path d="([^"]*)" fill="none")re");
  std::smatch m;
  std::string region = dom.substr(at, end == std::string::npos ? std::string::npos : end - at);
  if (!std::regex_search(region, m, kPath)) return line;
  static const std::regex kPoint(R"re([ML](-?[0-9.]+) (-?[0-9.]+))re");
  std::set<std::string> xs;
  const std::string d = m[1].str();
  for (std::sregex_iterator it(d.begin(), d.end(), kPoint), stop; it != stop; ++it) {
    ++line.points;
    xs.insert((*it)[1].str());
  }
  line.distinctX = static_cast<int>(xs.size());
  return line;
}

/// The page drew the loss, throughput and per-worker charts of a 2-rank run with data.
void expectChartsDrawn(const std::string& dom, const std::string& where) {
  SCOPED_TRACE(where);
  ASSERT_FALSE(dom.empty());
  auto loss = tagAttributes(dom, "id=\"loss-chart\"");
  EXPECT_GT(intAttribute(loss, "data-point-count"), 0) << dom.substr(0, 4000);
  EXPECT_GE(intAttribute(loss, "data-series-count"), 1);
  auto throughput = tagAttributes(dom, "id=\"throughput-chart\"");
  EXPECT_GT(intAttribute(throughput, "data-point-count"), 0);
  EXPECT_EQ(intAttribute(throughput, "data-series-count"), 1);
  auto workers = tagAttributes(dom, "class=\"workers");
  EXPECT_EQ(intAttribute(workers, "data-ranks"), 2);
  auto cpu = tagAttributes(dom, "data-chart=\"cpu\"");
  EXPECT_EQ(intAttribute(cpu, "data-series-count"), 2);
  EXPECT_GT(intAttribute(cpu, "data-point-count"), 0);
  auto rss = tagAttributes(dom, "data-chart=\"rss\"");
  EXPECT_EQ(intAttribute(rss, "data-series-count"), 2);
  auto phases = tagAttributes(dom, "class=\"chart phases");
  EXPECT_EQ(intAttribute(phases, "data-ranks"), 2);
  EXPECT_GT(intAttribute(phases, "data-series-count"), 0);
  EXPECT_NE(dom.find("<svg"), std::string::npos);
  // What was drawn, not what app.js counted: each chart holds a line through several points.
  for (const char* chart :
       {"id=\"loss-chart\"", "id=\"throughput-chart\"", "data-chart=\"cpu\"", "data-chart=\"rss\""}) {
    DrawnLine line = drawnLine(dom, chart);
    EXPECT_GE(line.points, 2) << chart << " drew no line";
    EXPECT_GE(line.distinctX, 2) << chart << " drew its points on one x";
  }
  // The finished run's memory per worker: a row per rank, each with a model state of its parameters,
  // gradients and Adam state (DDP: 4 + 4 + 8 bytes per parameter, so well above zero).
  auto memory = tagAttributes(dom, "class=\"memory-table");
  EXPECT_EQ(intAttribute(memory, "data-ranks"), 2);
  EXPECT_EQ(memory.count("hidden"), 0u) << "the memory table is shown for a finished run";
  for (const char* rank : {"<td>0</td>", "<td>1</td>"}) EXPECT_NE(dom.find(rank), std::string::npos) << rank;
  auto state = tagAttributes(dom, "data-model-state=");
  EXPECT_GT(intAttribute(state, "data-model-state"), 0) << "model state of the first row";
}

/// The page drew a GPU panel per worker: utilisation and memory over time, the last memory, power,
/// clock and temperature in the caption (rank 1's is `rank1Caption`).
void expectGpuPanels(const std::string& dom, const std::string& where, const std::string& rank1Caption) {
  SCOPED_TRACE(where);
  auto gpus = tagAttributes(dom, "class=\"gpus");
  EXPECT_EQ(intAttribute(gpus, "data-panels"), 2) << dom.substr(0, 4000);
  EXPECT_EQ(gpus.count("hidden"), 0u);
  for (const char* chart : {"data-chart=\"gpu-0\"", "data-chart=\"gpu-1\""}) {
    auto attributes = tagAttributes(dom, chart);
    EXPECT_EQ(intAttribute(attributes, "data-series-count"), 2) << chart;
    DrawnLine line = drawnLine(dom, chart);
    EXPECT_GE(line.distinctX, 2) << chart << " drew no line over time";
  }
  EXPECT_NE(dom.find(rank1Caption), std::string::npos) << rank1Caption;
}

/// Rank 1's GPU caption of the recorded GPU fixture (run_fixture.h).
std::string fixtureGpuCaption() {
  const test::RunFixture f;
  const double lastMemGiB = (1e9 + 1e8 * (f.steps - 1)) / (1024.0 * 1024 * 1024);
  return fmt::format(
      "rank 1 · GPU 1: utilisation and memory used, % (last: {:.1f} / 80.0 GiB, 301 W, 1980 MHz SM, {} °C)", lastMemGiB,
      40 + (f.steps - 1) % 3);
}

/// Rank 1's GPU caption of the real run under the scripted NVML: CUDA_VISIBLE_DEVICES=1,0 gives
/// rank 1 device 0, which tests/helpers/fake_nvml.cpp makes use 1 GiB at 100 W, 1400 MHz, 40 °C.
const char* kFakeNvmlCaption =
    "rank 1 · GPU 0: utilisation and memory used, % (last: 1.0 / 80.0 GiB, 100 W, 1400 MHz SM, 40 °C)";

const std::string kTinyConfig =
    test::tinyNamesConfig("  max_steps: 120\n  log_every: 2\n", "checkpoint:\n  dir: ckpt\n");

/// The run directory of a real 2-worker training:
/// `lockstep run -np 2 -- lockstep train tiny.yaml monitor.dir=LOGDIR/tiny`, its GPU samples from
/// the suite's scripted NVML (tests/helpers/fake_nvml.cpp) with CUDA_VISIBLE_DEVICES=1,0.
std::string trainTinyRun(const std::string& workDir, const std::string& logdir) {
  test::writeText(workDir + "/tiny.yaml", kTinyConfig);
  std::string bin = test::lockstepBin();
  std::string dir = logdir + "/tiny";
  test::ProcessOptions options;
  options.timeout = std::chrono::seconds(180);
  auto result = test::runProcess(
      {"sh", "-c",
       "cd '" + workDir + "' && LOCKSTEP_NVML_LIBRARY='" + LOCKSTEP_FAKE_NVML + "' CUDA_VISIBLE_DEVICES=1,0 exec '" +
           bin + "' run -np 2 --comm-timeout 60 -- '" + bin + "' train tiny.yaml monitor.dir='" + dir +
           "' monitor.system_interval=0.05 monitor.progress=off"},
      options);
  EXPECT_EQ(result.exitCode, 0) << result.out << result.err;
  return dir;
}

TEST(DashboardEndToEnd, ChromiumRendersTheDashboardAndTheReport) {
  std::string tmp = test::makeTempDir();
  std::string logdir = tmp + "/runs";
  std::string run = trainTinyRun(tmp, logdir);
  ASSERT_TRUE(fs::exists(run + "/run.json"));
  ASSERT_TRUE(fs::exists(run + "/system/rank1.jsonl"));
  // A second run with a malformed line: the page shows the error, not a blank panel.
  test::writeRunFixture(logdir + "/broken");
  test::writeText(logdir + "/broken/metrics.jsonl", test::trainLine(1, 1) + "{\"kind\":\"train\",\"step\":2,\n");

  // A resumed run: steps 31..40 were logged twice; the later lines count.
  test::writeRunFixture(logdir + "/resumed");
  std::string resumedLines;
  for (int step = 31; step <= 50; ++step) resumedLines += test::trainLine(step, test::fixtureNow());
  for (int step : {40, 50}) {
    resumedLines += nlohmann::json{{"kind", "val"}, {"step", step}, {"val_loss", 0.5}}.dump() + "\n";
  }
  test::appendText(logdir + "/resumed/metrics.jsonl", resumedLines);

  // An async_ps run: its staleness histogram.
  test::RunFixture async;
  async.ps = true;
  test::writeRunFixture(logdir + "/async", async);

  // An elastic run that lost two workers: its generations.
  test::RunFixture elastic;
  elastic.elastic = true;
  test::writeRunFixture(logdir + "/elastic", elastic);

  // A run on GPUs (the gpu_* fields NVML gives each worker): one GPU panel per worker.
  test::RunFixture gpu;
  gpu.gpu = true;
  test::writeRunFixture(logdir + "/gpu", gpu);

  {
    test::DashboardProcess dashboard(logdir);
    expectGpuPanels(dumpDom(dashboard.url() + "#runs=gpu"), "dashboard, GPU fixture", fixtureGpuCaption());
    const std::string tinyDom = dumpDom(dashboard.url() + "#runs=tiny");
    expectChartsDrawn(tinyDom, "dashboard");
    expectGpuPanels(tinyDom, "dashboard, real run", kFakeNvmlCaption);
    EXPECT_EQ(tagAttributes(tinyDom, "class=\"staleness-table").count("hidden"), 1u) << "no histogram for DDP";
    const std::string asyncDom = dumpDom(dashboard.url() + "#runs=async");
    EXPECT_EQ(tagAttributes(asyncDom, "class=\"gpus").count("hidden"), 1u) << "no GPU panels without GPU fields";
    auto staleness = tagAttributes(asyncDom, "class=\"staleness-table");
    EXPECT_EQ(staleness.count("hidden"), 0u) << asyncDom.substr(0, 4000);
    EXPECT_EQ(intAttribute(staleness, "data-updates"), 9);
    EXPECT_EQ(intAttribute(staleness, "data-bins"), 3);
    EXPECT_EQ(intAttribute(tagAttributes(asyncDom, "data-staleness=\"1\""), "data-count"), 3);
    EXPECT_NE(asyncDom.find("staleness of the 9 applied updates (bound 2); workers waited 0.5 s, 1.3 s"),
              std::string::npos);
    EXPECT_EQ(tagAttributes(tinyDom, "class=\"generations-table").count("hidden"), 1u) << "no generations";
    const std::string elasticDom = dumpDom(dashboard.url() + "#runs=elastic");
    EXPECT_EQ(intAttribute(tagAttributes(elasticDom, "class=\"generations-table"), "data-changes"), 2);
    EXPECT_NE(elasticDom.find("Elastic: 2 change(s) of the workers, 0.75 s to go on in all"), std::string::npos)
        << elasticDom.substr(0, 4000);
    EXPECT_NE(elasticDom.find("3 → 2"), std::string::npos);
    std::string broken = dumpDom(dashboard.url() + "#runs=broken");
    EXPECT_NE(broken.find("cannot read run broken: broken/metrics.jsonl:2: not valid JSON"), std::string::npos)
        << broken;
    auto resumed = tagAttributes(dumpDom(dashboard.url() + "#runs=resumed"), "id=\"loss-chart\"");
    EXPECT_EQ(intAttribute(resumed, "data-point-count"), 50 + 5) << "train steps 1..50, validation 10..50";
    EXPECT_EQ(dashboard.stop(), 0) << dashboard.err();
  }

  std::string report = tmp + "/report.html";
  auto written = test::runProcess({test::lockstepBin(), "report", run, "-o", report});
  ASSERT_EQ(written.exitCode, 0) << written.err;
  std::string dom = dumpDom("file://" + report);
  expectChartsDrawn(dom, "report");
  expectGpuPanels(dom, "report, real run", kFakeNvmlCaption);
  EXPECT_NE(dom.find("static report"), std::string::npos);
  const std::string gpuReport = tmp + "/gpu-report.html";
  ASSERT_EQ(test::runProcess({test::lockstepBin(), "report", logdir + "/gpu", "-o", gpuReport}).exitCode, 0);
  expectGpuPanels(dumpDom("file://" + gpuReport), "report, GPU fixture", fixtureGpuCaption());
  const std::string elasticReport = tmp + "/elastic-report.html";
  ASSERT_EQ(test::runProcess({test::lockstepBin(), "report", logdir + "/elastic", "-o", elasticReport}).exitCode, 0);
  EXPECT_NE(dumpDom("file://" + elasticReport).find("Elastic: 2 change(s) of the workers"), std::string::npos);
}

/// A sweep directory as `lockstep sweep` writes it: four trials of a 2-parameter space, ASHA rungs on
/// two, one failed.
std::string writeSweepFixture(const std::string& dir) {
  fs::create_directories(dir);
  auto trial = [](int i, const char* status, nlohmann::json objective, nlohmann::json rungs, double lr, int batch) {
    return nlohmann::json{{"trial", i},
                          {"name", fmt::format("trial-{:04d}", i)},
                          {"params", {{"optimizer.lr", lr}, {"trainer.batch_size", batch}}},
                          {"status", status},
                          {"objective", objective},
                          {"metric", "validation_accuracy"},
                          {"mode", "max"},
                          {"rungs", rungs},
                          {"validation_accuracy", objective},
                          {"steps", 100},
                          {"seconds", 1.5 + i},
                          {"exit_code", 0},
                          {"error", ""},
                          {"command", "lockstep run -np 1 -- lockstep train x.yaml"}}
        .dump();
  };
  nlohmann::json twoRungs =
      nlohmann::json::array({{{"resource", 1}, {"objective", 0.7}}, {{"resource", 3}, {"objective", 0.8}}});
  nlohmann::json oneRung = nlohmann::json::array({{{"resource", 1}, {"objective", 0.6}}});
  test::writeText(dir + "/trials.jsonl", trial(0, "done", 0.8, twoRungs, 0.01, 32) + "\n" +
                                             trial(1, "pruned", 0.6, oneRung, 0.1, 64) + "\n" +
                                             trial(2, "failed", nullptr, nlohmann::json::array(), 0.5, 32) + "\n" +
                                             trial(3, "done", 0.75, nlohmann::json::array(), 0.001, 128) + "\n");
  return dir;
}

void expectSweepDrawn(const std::string& dom, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(intAttribute(tagAttributes(dom, "id=\"trials\""), "data-row-count"), 4);
  EXPECT_EQ(intAttribute(tagAttributes(dom, "id=\"sweep-parallel\""), "data-line-count"), 3) << "measured trials";
  EXPECT_EQ(intAttribute(tagAttributes(dom, "data-param=\"optimizer.lr\""), "data-point-count"), 3);
  EXPECT_EQ(intAttribute(tagAttributes(dom, "data-param=\"trainer.batch_size\""), "data-point-count"), 3);
  EXPECT_EQ(intAttribute(tagAttributes(dom, "id=\"sweep-runtime\""), "data-point-count"), 3);
  EXPECT_EQ(intAttribute(tagAttributes(dom, "id=\"sweep-rungs\""), "data-line-count"), 2) << "trials with rungs";
  EXPECT_NE(dom.find("4 trials, 2 done, 1 pruned, 1 failed"), std::string::npos) << dom.substr(0, 4000);
  EXPECT_NE(dom.find("batch 128"), std::string::npos) << "the runtime chart's legend";
}

TEST(DashboardEndToEnd, ChromiumRendersASweepPageAndItsReport) {
  std::string tmp = test::makeTempDir();
  std::string sweep = writeSweepFixture(tmp + "/sweep");
  {
    test::DashboardProcess dashboard(sweep);
    expectSweepDrawn(dumpDom(dashboard.url()), "dashboard");
    EXPECT_EQ(dashboard.stop(), 0) << dashboard.err();
  }
  {  // a log directory without a sweep: the section stays hidden
    test::DashboardProcess dashboard(tmp);
    std::string dom = dumpDom(dashboard.url());
    EXPECT_NE(dom.find("id=\"sweep-section\" hidden"), std::string::npos) << dom.substr(0, 3000);
    EXPECT_EQ(dashboard.stop(), 0) << dashboard.err();
  }
  std::string report = tmp + "/sweep.html";
  auto written = test::runProcess({test::lockstepBin(), "report", sweep, "-o", report});
  ASSERT_EQ(written.exitCode, 0) << written.err;
  expectSweepDrawn(dumpDom("file://" + report), "report");
}

}  // namespace
}  // namespace lockstep::dashboard
