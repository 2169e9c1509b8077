// The dashboard's HTTP server (in this process, port 0, cpp-httplib's client)
// and the `lockstep dashboard` / `lockstep report` commands as real processes:
// JSON of runs, the embedded page, path traversal refused, malformed files
// reported with file and line, live growth, CLI errors and exit codes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "dashboard/dashboard_process.h"
#include "dashboard/run_fixture.h"
#include "dashboard/server.h"
#include "support/subprocess.h"

namespace lockstep::dashboard {
namespace {

namespace fs = std::filesystem;

/// A DashboardServer answering on its own thread for the test's lifetime.
class InProcessServer {
 public:
  explicit InProcessServer(const std::string& logdir) : server_(ServerOptions{logdir, "127.0.0.1", 0}) {
    port_ = server_.bind();
    thread_ = std::thread([this] { server_.serve(); });
  }
  ~InProcessServer() {
    server_.stop();
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c;
  }
  const DashboardServer& server() const { return server_; }
  int port() const { return port_; }

 private:
  DashboardServer server_;
  int port_ = -1;
  std::thread thread_;
};

nlohmann::json getJson(httplib::Client& client, const std::string& path, int expectedStatus) {
  auto res = client.Get(path.c_str());
  EXPECT_TRUE(res) << path << ": " << httplib::to_string(res.error());
  if (!res) return nullptr;
  EXPECT_EQ(res->status, expectedStatus) << path << ": " << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json") << path;
  return nlohmann::json::parse(res->body);
}

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// DNS rebinding: a page of attacker.example whose name now resolves to 127.0.0.1
// sends "Host: attacker.example"; only names of this machine are served.
TEST(DashboardServer, RefusesRequestsForAnotherHostName) {
  std::string logdir = test::makeTempDir();
  test::writeRunFixture(logdir + "/a");
  InProcessServer server(logdir);
  auto client = server.client();
  const std::string port = std::to_string(server.port());
  char self[256] = {};
  ASSERT_EQ(::gethostname(self, sizeof(self) - 1), 0);
  for (const std::string& host : std::vector<std::string>{"localhost:" + port, "127.0.0.1:" + port, "LocalHost",
                                                          "[::1]:" + port, std::string(self) + ":" + port}) {
    auto res = client.Get("/api/runs", {{"Host", host}});
    ASSERT_TRUE(res) << host;
    EXPECT_EQ(res->status, 200) << host << ": " << res->body;
  }
  for (const std::string& host :
       std::vector<std::string>{"attacker.example:" + port, "attacker.example", "localhost.attacker.example"}) {
    for (const char* path : {"/", "/api/runs", "/api/runs/a"}) {
      auto res = client.Get(path, {{"Host", host}});
      ASSERT_TRUE(res) << host;
      EXPECT_EQ(res->status, 403) << host << " " << path;
      EXPECT_NE(res->body.find("Host '" + host.substr(0, host.find(':')) + "' is not a name of this dashboard"),
                std::string::npos)
          << res->body;
    }
  }
}

TEST(DashboardServer, ServesRunsAndTheirData) {
  std::string logdir = test::makeTempDir() + "/runs";
  test::writeRunFixture(logdir + "/tiny");
  InProcessServer server(logdir);
  EXPECT_EQ(server.server().runCount(), 1u);
  auto client = server.client();

  nlohmann::json runs = getJson(client, "/api/runs", 200);
  EXPECT_EQ(runs["logdir"], logdir);
  ASSERT_EQ(runs["runs"].size(), 1u);
  EXPECT_EQ(runs["runs"][0]["name"], "tiny");
  EXPECT_EQ(runs["runs"][0]["run"]["world_size"], 2);
  EXPECT_EQ(runs["runs"][0]["run"]["status"], "finished");

  nlohmann::json tiny = getJson(client, "/api/runs/tiny", 200);
  EXPECT_EQ(tiny["train"]["loss"].size(), 40u);
  EXPECT_EQ(tiny["system"].size(), 2u);
  EXPECT_EQ(tiny["phases"].size(), 2u);

  // Live: lines appended by a running training show up in the next answer.
  test::appendText(logdir + "/tiny/metrics.jsonl", test::trainLine(41, test::fixtureNow()));
  EXPECT_EQ(getJson(client, "/api/runs/tiny", 200)["train"]["loss"].size(), 41u);

  auto trace = client.Get("/api/runs/tiny/timeline/1");
  ASSERT_TRUE(trace);
  EXPECT_EQ(trace->status, 200);
  EXPECT_EQ(trace->body, "{\"traceEvents\":[]}\n");
  EXPECT_NE(trace->get_header_value("Content-Disposition").find("tiny-rank1.trace.json"), std::string::npos);
  EXPECT_EQ(getJson(client, "/api/runs/tiny/timeline/7", 404)["error"], "run 'tiny' has no timeline for rank 7");
  getJson(client, "/api/runs/tiny/timeline/x", 400);
}

TEST(DashboardServer, ServesThePageFromTheBinary) {
  std::string logdir = test::makeTempDir();
  InProcessServer server(logdir);
  auto client = server.client();
  auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->body.find("<title>lockstep dashboard</title>"), std::string::npos);
  EXPECT_NE(page->body.find("id=\"loss-chart\""), std::string::npos);
  auto js = client.Get("/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(js->body, readAll(LOCKSTEP_SOURCE_DIR "/src/dashboard/assets/app.js")) << "the embedded copy is stale";
  auto charts = client.Get("/charts.js");
  ASSERT_TRUE(charts);
  EXPECT_EQ(charts->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(charts->body, readAll(LOCKSTEP_SOURCE_DIR "/src/dashboard/assets/charts.js"))
      << "the embedded copy is stale";
  auto css = client.Get("/style.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->body, readAll(LOCKSTEP_SOURCE_DIR "/src/dashboard/assets/style.css"));
  // Nothing is served from disk: only the embedded files exist.
  auto other = client.Get("/etc/passwd");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  // An empty log directory is served; the list is empty.
  EXPECT_TRUE(getJson(client, "/api/runs", 200)["runs"].empty());
}

TEST(DashboardServer, RefusesRunNamesOutsideTheLogDirectory) {
  std::string tmp = test::makeTempDir();
  test::writeRunFixture(tmp + "/outside");  // a real run next to the log directory
  std::string logdir = tmp + "/runs";
  test::writeRunFixture(logdir + "/tiny");
  InProcessServer server(logdir);
  auto client = server.client();
  for (const char* path : {"/api/runs/..%2f..", "/api/runs/%2e%2e", "/api/runs/..%2foutside",
                           "/api/runs/..%2f..%2f..%2fetc%2fpasswd", "/api/runs/.hidden", "/api/runs/"}) {
    nlohmann::json body = getJson(client, path, 400);
    EXPECT_NE(body.value("error", "").find("invalid run name"), std::string::npos) << path << ": " << body;
  }
  EXPECT_NE(getJson(client, "/api/runs/nope", 404)["error"].get<std::string>().find("no run 'nope'"),
            std::string::npos);
  // Without decoding (a client that sends "../" literally) the answer is the same.
  httplib::Client raw = server.client();
  auto res = raw.Get("/api/runs/../outside");
  ASSERT_TRUE(res);
  EXPECT_NE(res->status, 200) << res->body;
}

TEST(DashboardServer, MalformedFileIsAnErrorWithFileAndLine) {
  std::string logdir = test::makeTempDir() + "/runs";
  test::writeRunFixture(logdir + "/bad");
  test::writeText(logdir + "/bad/system/rank1.jsonl",
                  "{\"time\":1,\"cpu_percent\":5,\"rss_bytes\":10}\n{\"time\":2,\"cpu_percent\":\n"
                  "{\"time\":3,\"cpu_percent\":5,\"rss_bytes\":10}\n");
  InProcessServer server(logdir);
  auto client = server.client();
  nlohmann::json body = getJson(client, "/api/runs/bad", 500);
  EXPECT_EQ(body["file"], "bad/system/rank1.jsonl");
  EXPECT_EQ(body["line"], 2);
  EXPECT_NE(body["error"].get<std::string>().find("bad/system/rank1.jsonl:2: not valid JSON"), std::string::npos)
      << body;
  // The list still works and names the run.
  EXPECT_EQ(getJson(client, "/api/runs", 200)["runs"][0]["name"], "bad");
}

TEST(DashboardCommand, ServesUntilSigtermAndExitsZero) {
  std::string logdir = test::makeTempDir() + "/runs";
  test::writeRunFixture(logdir + "/tiny");
  test::DashboardProcess dashboard(logdir);
  EXPECT_NE(dashboard.out().find("serving 1 run from " + logdir), std::string::npos) << dashboard.out();
  httplib::Client client("127.0.0.1", dashboard.port());
  nlohmann::json runs = getJson(client, "/api/runs", 200);
  EXPECT_EQ(runs["runs"][0]["name"], "tiny");
  EXPECT_EQ(dashboard.stop(), 0) << dashboard.err();
}

TEST(DashboardCommand, EmptyLogDirectoryIsServedWithAWarning) {
  std::string logdir = test::makeTempDir();
  test::DashboardProcess dashboard(logdir);
  EXPECT_NE(dashboard.out().find("serving 0 runs"), std::string::npos) << dashboard.out();
  EXPECT_EQ(dashboard.stop(), 0);
  EXPECT_NE(dashboard.err().find("no runs in '" + logdir + "' yet"), std::string::npos) << dashboard.err();
}

TEST(DashboardCommand, BadLogDirectoryOrPortFailsWithExit2) {
  std::string tmp = test::makeTempDir();
  test::writeText(tmp + "/file", "x");
  std::string bin = test::lockstepBin();
  auto missing = test::runProcess({bin, "dashboard", "--logdir", tmp + "/nope", "--port", "0"});
  EXPECT_EQ(missing.exitCode, 2);
  EXPECT_NE(missing.err.find("log directory '" + tmp + "/nope' does not exist"), std::string::npos) << missing.err;
  auto file = test::runProcess({bin, "dashboard", "--logdir", tmp + "/file", "--port", "0"});
  EXPECT_EQ(file.exitCode, 2);
  EXPECT_NE(file.err.find("is not a directory"), std::string::npos) << file.err;
  auto noFlag = test::runProcess({bin, "dashboard"});
  EXPECT_EQ(noFlag.exitCode, 2);
  EXPECT_NE(noFlag.err.find("--logdir"), std::string::npos) << noFlag.err;
  auto badPort = test::runProcess({bin, "dashboard", "--logdir", tmp, "--port", "70000"});
  EXPECT_EQ(badPort.exitCode, 2) << badPort.err;
  // A port in use is named (exit 1: nothing wrong with the arguments).
  InProcessServer taken(tmp);
  auto busy = test::runProcess({bin, "dashboard", "--logdir", tmp, "--port", std::to_string(taken.port())});
  EXPECT_EQ(busy.exitCode, 1);
  EXPECT_NE(busy.err.find("cannot listen on 127.0.0.1:" + std::to_string(taken.port())), std::string::npos) << busy.err;
}

TEST(ReportCommand, WritesOneSelfContainedFile) {
  std::string tmp = test::makeTempDir();
  test::RunFixture f;
  f.config = "note: \"</script><script>alert(1)</script>\"\n";  // must not break out of the data element
  test::writeRunFixture(tmp + "/runs/tiny", f);
  std::string out = tmp + "/report.html";
  test::writeText(out, "old report");
  auto result = test::runProcess({test::lockstepBin(), "report", tmp + "/runs/tiny", "-o", out});
  ASSERT_EQ(result.exitCode, 0) << result.err;
  std::string page = readAll(out);
  EXPECT_NE(page.find("<script type=\"application/json\" id=\"lockstep-data\">"), std::string::npos);
  EXPECT_EQ(page.find("src=\"app.js\""), std::string::npos) << "the script must be inlined";
  EXPECT_EQ(page.find("src=\"charts.js\""), std::string::npos) << "the chart script must be inlined";
  EXPECT_NE(page.find("const LockstepCharts = (function () {"), std::string::npos) << "the chart script is missing";
  EXPECT_EQ(page.find("href=\"style.css\""), std::string::npos) << "the CSS must be inlined";
  // Nothing loads from anywhere: no src/href attributes, no CSS imports (the
  // SVG namespace URI in the script is a name, not a download).
  EXPECT_EQ(page.find("src=\""), std::string::npos);
  EXPECT_EQ(page.find("href=\""), std::string::npos);
  EXPECT_EQ(page.find("@import"), std::string::npos);
  EXPECT_NE(page.find("<\\/script><script>alert(1)<\\/script>"), std::string::npos);
  // Exactly four script elements close: the data, the chart code, the sweep section's code and the page's code.
  size_t closes = 0;
  for (size_t at = page.find("</script>"); at != std::string::npos; at = page.find("</script>", at + 1)) ++closes;
  EXPECT_EQ(closes, 4u);
  EXPECT_EQ(page.find("src=\"sweep.js\""), std::string::npos) << "the sweep script must be inlined";
  // The embedded data is the run's JSON.
  size_t start = page.find('>', page.find("id=\"lockstep-data\"")) + 1;
  nlohmann::json data = nlohmann::json::parse(page.substr(start, page.find("</script>", start) - start));
  EXPECT_EQ(data["details"]["tiny"]["train"]["loss"].size(), 40u);
  EXPECT_EQ(data["details"]["tiny"]["config"], f.config);
  EXPECT_EQ(data["runs"][0]["run"]["world_size"], 2);
  // No temporary files left beside the report.
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(tmp)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1u);
}

TEST(ReportCommand, BadRunDirectoryFailsWithExit2AndKeepsTheOldFile) {
  std::string tmp = test::makeTempDir();
  test::writeRunFixture(tmp + "/runs/a");
  test::writeRunFixture(tmp + "/runs/b");
  std::string out = tmp + "/report.html";
  test::writeText(out, "old report");
  std::string bin = test::lockstepBin();
  auto missing = test::runProcess({bin, "report", tmp + "/nope", "-o", out});
  EXPECT_EQ(missing.exitCode, 2);
  EXPECT_NE(missing.err.find("run directory '" + tmp + "/nope' does not exist"), std::string::npos) << missing.err;
  auto logdir = test::runProcess({bin, "report", tmp + "/runs", "-o", out});
  EXPECT_EQ(logdir.exitCode, 2);
  EXPECT_NE(logdir.err.find("holding the runs a, b"), std::string::npos) << logdir.err;
  test::appendText(tmp + "/runs/a/metrics.jsonl", "{\"kind\":\"train\"}\n");
  auto malformed = test::runProcess({bin, "report", tmp + "/runs/a", "-o", out});
  EXPECT_EQ(malformed.exitCode, 2);
  EXPECT_NE(malformed.err.find("a/metrics.jsonl:45: a \"train\" record needs the number \"step\""), std::string::npos)
      << malformed.err;
  auto noOutput = test::runProcess({bin, "report", tmp + "/runs/a"});
  EXPECT_EQ(noOutput.exitCode, 2);
  EXPECT_EQ(readAll(out), "old report");
}

}  // namespace
}  // namespace lockstep::dashboard
