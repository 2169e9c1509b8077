// The dashboard's reader of run directories, on files the test writes: every
// file kind, a last line still being written, malformed lines named by file
// and line, incremental reading of a growing file, and log-directory errors.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "dashboard/run_fixture.h"
#include "dashboard/run_reader.h"
#include "support/subprocess.h"

namespace lockstep::dashboard {
namespace {

namespace fs = std::filesystem;
using test::appendText;
using test::writeRunFixture;
using test::writeText;

std::string freshLogDir() { return test::makeTempDir() + "/runs"; }

TEST(RunReader, ReadsEveryFileOfARun) {
  std::string logdir = freshLogDir();
  test::RunFixture f;
  f.config = "model:\n  type: charlstm\n";
  writeRunFixture(logdir + "/tiny", f);
  RunReader reader(logdir + "/tiny", "tiny");
  reader.refresh();
  EXPECT_EQ(reader.info()["status"], "finished");
  EXPECT_EQ(reader.info()["world_size"], 2);
  nlohmann::json j = reader.toJson();
  EXPECT_EQ(j["name"], "tiny");
  EXPECT_EQ(j["config"], "model:\n  type: charlstm\n");
  ASSERT_EQ(j["train"]["step"].size(), 40u);
  EXPECT_DOUBLE_EQ(j["train"]["step"][39].get<double>(), 40);
  EXPECT_NEAR(j["train"]["loss"][3].get<double>(), 3.0 / 2.0, 1e-12);
  ASSERT_EQ(j["val"]["val_loss"].size(), 4u);
  EXPECT_FALSE(j["val"].contains("val_accuracy")) << "all-null optional columns are left out";
  ASSERT_EQ(j["system"].size(), 2u);
  EXPECT_EQ(j["system"][1]["rank"], 1);
  EXPECT_EQ(j["system"][1]["cpu_percent"].size(), 40u);
  EXPECT_FALSE(j["system"][0].contains("gpu_util")) << "no GPU fields written, none reported";
  ASSERT_EQ(j["phases"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["phases"][1]["forward_ms"][0].get<double>(), 11.0);
  ASSERT_EQ(j["timelines"].size(), 2u);
  EXPECT_EQ(j["timelines"][1]["rank"], 1);
  EXPECT_GT(j["timelines"][1]["bytes"].get<int>(), 0);
}

TEST(RunReader, GpuFieldsAppearWhenWritten) {
  std::string logdir = freshLogDir();
  test::RunFixture f;
  f.gpu = true;
  writeRunFixture(logdir + "/gpu", f);
  RunReader reader(logdir + "/gpu", "gpu");
  reader.refresh();
  nlohmann::json j = reader.toJson();
  ASSERT_TRUE(j["system"][0].contains("gpu_util"));
  EXPECT_DOUBLE_EQ(j["system"][1]["gpu_util"][0].get<double>(), 51.0);
  EXPECT_EQ(j["system"][1]["gpu_mem_bytes"].size(), 40u);
}

TEST(RunReader, LastLineWithoutNewlineIsIgnoredUntilComplete) {
  std::string dir = freshLogDir() + "/live";
  writeRunFixture(dir);
  RunReader reader(dir, "live");
  reader.refresh();
  ASSERT_EQ(reader.toJson()["train"]["step"].size(), 40u);
  std::string line = test::trainLine(41, test::fixtureNow());
  appendText(dir + "/metrics.jsonl", line.substr(0, line.size() / 2));  // a writer mid-line
  appendText(dir + "/system/rank0.jsonl", "{\"time\":1");
  EXPECT_NO_THROW(reader.refresh());
  EXPECT_EQ(reader.toJson()["train"]["step"].size(), 40u);
  appendText(dir + "/metrics.jsonl", line.substr(line.size() / 2));
  reader.refresh();
  auto steps = reader.toJson()["train"]["step"];
  ASSERT_EQ(steps.size(), 41u);
  EXPECT_DOUBLE_EQ(steps[40].get<double>(), 41);
}

TEST(RunReader, MalformedCompleteLineNamesFileAndLine) {
  std::string dir = freshLogDir() + "/bad";
  writeRunFixture(dir);
  std::string good = test::trainLine(1, 1.0);
  writeText(dir + "/metrics.jsonl", good + good + "{\"kind\":\"train\",\"step\": 3, \"loss\": oops}\n" + good);
  RunReader reader(dir, "bad");
  try {
    reader.refresh();
    FAIL() << "a malformed line must throw";
  } catch (const RunFormatError& e) {
    EXPECT_EQ(e.file(), "bad/metrics.jsonl");
    EXPECT_EQ(e.line(), 3);
    EXPECT_NE(std::string(e.what()).find("bad/metrics.jsonl:3: not valid JSON"), std::string::npos) << e.what();
  }
  // The same error again on the next refresh: the bad line is not skipped.
  EXPECT_THROW(reader.refresh(), RunFormatError);
}

TEST(RunReader, WrongTypesAndMissingFieldsAreErrors) {
  std::string dir = freshLogDir() + "/types";
  writeRunFixture(dir);
  auto expectError = [&](const std::string& file, const std::string& text, const std::string& expected) {
    writeText(dir + "/" + file, text);
    RunReader reader(dir, "types");
    try {
      reader.refresh();
      ADD_FAILURE() << "no error for " << text;
    } catch (const RunFormatError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    writeRunFixture(dir);  // restore
  };
  expectError("metrics.jsonl", "{\"kind\":\"train\",\"step\":1,\"loss\":\"high\"}\n",
              "types/metrics.jsonl:1: field \"loss\" is string, expected a number");
  expectError("metrics.jsonl", "{\"kind\":\"train\",\"loss\":1.5}\n",
              "types/metrics.jsonl:1: a \"train\" record needs the number \"step\"");
  expectError("metrics.jsonl", "[1,2]\n", "types/metrics.jsonl:1: expected a JSON object, got array");
  expectError("phases/rank1.jsonl", "{\"step\":1,\"step_ms\":30}\n{\"step\":2}\n",
              "types/phases/rank1.jsonl:2: a record needs the number \"step_ms\"");
  expectError("run.json", "{\"name\": \"x\",\n \"status\": 3}\n", "types/run.json: \"status\" is number");
  expectError("run.json", "{\"name\": \"x\",\n oops}\n", "types/run.json:2: not valid JSON");
  expectError("run.json", "{\"name\": \"x\", \"memory\": {}}\n",
              "types/run.json: \"memory\" is object, expected an array");
  expectError("run.json", "{\"name\": \"x\", \"memory\": [{\"rank\": 0, \"gradient_bytes\": \"1 MB\"}]}\n",
              "types/run.json: \"memory\"[0].gradient_bytes is string, expected a number");
  expectError("run.json", "{\"name\": \"x\", \"ps\": [1]}\n", "types/run.json: \"ps\" is array, expected an object");
  expectError("run.json", "{\"name\": \"x\", \"ps\": {\"staleness\": [3, \"2\"]}}\n",
              "types/run.json: \"ps\".staleness[1] is string, expected a number");
  expectError("run.json", "{\"name\": \"x\", \"generations\": {}}\n",
              "types/run.json: \"generations\" is object, expected an array");
  expectError("run.json", "{\"name\": \"x\", \"generations\": [{\"step\": 5, \"world_size\": \"3\"}]}\n",
              "types/run.json: \"generations\"[0].world_size is string, expected a number");
}

TEST(RunReader, MemoryOfAFinishedRunIsPassedOn) {
  std::string dir = freshLogDir() + "/mem";
  writeRunFixture(dir);
  RunReader reader(dir, "mem");
  reader.refresh();
  nlohmann::json j = reader.toJson();
  ASSERT_EQ(j["run"]["memory"].size(), 2u);
  EXPECT_EQ(j["run"]["memory"][1]["parameter_bytes"].get<int64_t>(), 2000000);
  EXPECT_TRUE(j["run"]["memory"][1]["step_peak_bytes"].is_null());
}

TEST(RunReader, NullLossAndUnknownKindsAreAccepted) {
  std::string dir = freshLogDir() + "/nan";
  writeRunFixture(dir);
  // A diverged run: the monitor writes a NaN loss as null. Newer writers may add kinds.
  writeText(dir + "/metrics.jsonl",
            "{\"kind\":\"train\",\"step\":1,\"loss\":null}\n{\"kind\":\"event\",\"what\":\"checkpoint\"}\n\n" +
                test::trainLine(2, 2.0));
  RunReader reader(dir, "nan");
  reader.refresh();
  auto train = reader.toJson()["train"];
  ASSERT_EQ(train["loss"].size(), 2u);
  EXPECT_TRUE(train["loss"][0].is_null());
}

TEST(RunReader, ReadsOnlyWhatWasAppended) {
  std::string dir = freshLogDir() + "/long";
  writeRunFixture(dir);
  std::string text;
  for (int s = 1; s <= 10000; ++s) text += test::trainLine(s, s);
  writeText(dir + "/metrics.jsonl", text);
  RunReader reader(dir, "long");
  reader.refresh();
  ASSERT_EQ(reader.toJson()["train"]["step"].size(), 10000u);
  // Garble line 5 in place (same size, same inode): a reader that parsed the
  // file again would fail; an incremental one only reads the appended line.
  int fd = ::open((dir + "/metrics.jsonl").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  std::string garbage(test::trainLine(5, 5).size() - 1, '#');
  off_t at = static_cast<off_t>(text.find(test::trainLine(5, 5)));
  ASSERT_EQ(::pwrite(fd, garbage.data(), garbage.size(), at), static_cast<ssize_t>(garbage.size()));
  ::close(fd);
  appendText(dir + "/metrics.jsonl", test::trainLine(10001, 10001));
  reader.refresh();
  EXPECT_EQ(reader.toJson()["train"]["step"].size(), 10001u);
  // A file replaced by a shorter one is read again from its start.
  writeText(dir + "/metrics.jsonl", test::trainLine(1, 1) + test::trainLine(2, 2));
  reader.refresh();
  EXPECT_EQ(reader.toJson()["train"]["step"].size(), 2u);
}

TEST(RunReader, NewRankFilesArePickedUp) {
  std::string dir = freshLogDir() + "/grow";
  test::RunFixture f;
  f.ranks = 1;
  writeRunFixture(dir, f);
  RunReader reader(dir, "grow");
  reader.refresh();
  EXPECT_EQ(reader.toJson()["system"].size(), 1u);
  writeText(dir + "/system/rank1.jsonl", "{\"time\":1,\"rank\":1,\"cpu_percent\":50,\"rss_bytes\":1000}\n");
  writeText(dir + "/system/notes.txt", "not a rank file\n");
  reader.refresh();
  auto system = reader.toJson()["system"];
  ASSERT_EQ(system.size(), 2u);
  EXPECT_EQ(system[1]["rank"], 1);
}

TEST(LogDir, MissingOrNotADirectoryIsAnErrorNamingThePath) {
  std::string tmp = test::makeTempDir();
  try {
    LogDir missing(tmp + "/nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp + "/nope' does not exist"), std::string::npos) << e.what();
  }
  writeText(tmp + "/file", "x");
  try {
    LogDir file(tmp + "/file");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a directory"), std::string::npos) << e.what();
  }
  writeRunFixture(tmp + "/runs/one");
  try {
    LogDir runItself(tmp + "/runs/one/");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a run directory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--logdir " + fs::path(tmp + "/runs").lexically_normal().string()),
              std::string::npos)
        << e.what();
  }
}

TEST(LogDir, ListsRunsNewestFirstAndReportsBrokenOnes) {
  std::string logdir = freshLogDir();
  test::RunFixture older;
  older.steps = 10;  // start/updated times are "now"-based: fewer steps, same updated time
  writeRunFixture(logdir + "/a-old", older);
  writeRunFixture(logdir + "/b-new");
  // Make a-old clearly older.
  auto run = nlohmann::json::parse(std::ifstream(logdir + "/a-old/run.json"));
  run["updated_time"] = run["updated_time"].get<double>() - 1000;
  writeText(logdir + "/a-old/run.json", run.dump());
  writeText(logdir + "/broken/run.json", "{\"status\": ");
  fs::create_directories(logdir + "/not-a-run");
  fs::create_directories(logdir + "/.hidden");
  writeText(logdir + "/.hidden/run.json", "{}");
  LogDir dir(logdir);
  EXPECT_EQ(dir.runNames(), (std::vector<std::string>{"a-old", "b-new", "broken"}));
  nlohmann::json list = dir.listRuns();
  EXPECT_EQ(list["logdir"], logdir);
  ASSERT_EQ(list["runs"].size(), 3u);
  EXPECT_EQ(list["runs"][0]["name"], "b-new");
  EXPECT_EQ(list["runs"][1]["name"], "a-old");
  EXPECT_EQ(list["runs"][2]["name"], "broken");
  EXPECT_NE(list["runs"][2]["error"].get<std::string>().find("broken/run.json:1: not valid JSON"), std::string::npos)
      << list["runs"][2];
  EXPECT_EQ(dir.run("b-new").toJson()["train"]["step"].size(), 40u);
  EXPECT_THROW(dir.run("not-a-run"), RunNotFound);
  EXPECT_THROW(dir.run(".."), RunNotFound);
  EXPECT_THROW(dir.run("../runs/b-new"), RunNotFound);
  EXPECT_THROW(dir.run(".hidden"), RunNotFound);
  EXPECT_THROW(dir.run("broken"), RunFormatError);
}

TEST(LogDir, AnEmptyLogDirectoryHasNoRuns) {
  std::string logdir = freshLogDir();
  fs::create_directories(logdir);
  LogDir dir(logdir);
  EXPECT_TRUE(dir.runNames().empty());
  EXPECT_TRUE(dir.listRuns()["runs"].empty());
}

TEST(LogDir, RunNamesThatCouldLeaveTheDirectoryAreInvalid) {
  EXPECT_TRUE(isValidRunName("tiny"));
  EXPECT_TRUE(isValidRunName("fashion convnet 2024-01-01"));
  for (const char* bad : {"", ".", "..", "../etc", "a/b", "a\\b", ".hidden", "x\ny"}) {
    EXPECT_FALSE(isValidRunName(bad)) << bad;
  }
  EXPECT_FALSE(isValidRunName(std::string(256, 'a')));
}

}  // namespace
}  // namespace lockstep::dashboard
