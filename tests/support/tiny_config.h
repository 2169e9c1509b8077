// tiny_config.h — the smallest real `lockstep train` job: a 2-layer, 16-wide
// character LSTM on ruby-faker's pet names, for tests that drive the CLI.
#pragma once

#include <string>

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

}  // namespace lockstep::test
