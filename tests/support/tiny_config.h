// tiny_config.h — the smallest real `lockstep train` job: a 2-layer, 16-wide
// character LSTM on ruby-faker's pet names, for tests that drive the CLI.
#pragma once

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "support/subprocess.h"

namespace lockstep::test {

/// `trainerLines` are extra "  key: value\n" lines of the trainer section;
/// `sections` are whole extra sections (e.g. "checkpoint:\n  dir: ckpt\n").
inline std::string tinyNamesConfig(const std::string& trainerLines = "", const std::string& sections = "") {
  return "model:\n  hidden: 16\n  layers: 2\n  window: 8\n"
         "data:\n  sources: [faker-pets]\n  validation_fraction: 0.1\n"
         "trainer:\n  batch_size: 16\n  seed: 7\n" +
         trainerLines +
         "optimizer:\n  type: adam\n  lr: 0.01\n"
         "generate:\n  samples: 0\n" +
         sections;
}

/// Runs `lockstep run -np N --comm-timeout 60 RUNARGS -- lockstep train tiny.yaml ARGS` inside `dir`.
inline ProcessResult trainTiny(const std::string& dir, int np, const std::string& args, ProcessOptions o = {},
                               const std::string& runArgs = "") {
  auto quote = [](const std::string& s) { return "'" + s + "'"; };
  const std::string bin = lockstepBin();
  const std::string cmd = "cd " + quote(dir) + " && exec " + quote(bin) + " run -np " + std::to_string(np) +
                          " --comm-timeout 60 " + runArgs + " -- " + quote(bin) + " train tiny.yaml " + args;
  o.timeout = std::chrono::seconds(240);
  return runProcess({"sh", "-c", cmd}, o);
}

/// The bytes of the file at `path` (empty when it cannot be read).
inline std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// dir/ckpt/step-NNNNNNNNN.ckpt, the Trainer's checkpoint of `step` under checkpoint.dir ckpt.
inline std::string ckptPath(const std::string& dir, int step) {
  char name[64];
  std::snprintf(name, sizeof(name), "/ckpt/step-%09d.ckpt", step);
  return dir + name;
}

}  // namespace lockstep::test
