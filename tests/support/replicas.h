// replicas.h — what every rank of a `lockstep train` run ended with: each logs "final parameters
// of this rank's model: crc32c X over N tensors" (train/task.cpp), prefixed "[R] " by `lockstep
// run`, so a test compares every replica instead of rank 0's checkpoint alone.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>

namespace lockstep::test {

/// Each rank's final parameter checksum in `log` (the run's standard error).
inline std::map<int, std::string> finalChecksums(const std::string& log) {
  static const std::regex kLine(R"(\[(\d+)\] [^\n]*final parameters of this rank's model: crc32c ([0-9a-f]{8}))");
  std::map<int, std::string> checksums;
  for (std::sregex_iterator it(log.begin(), log.end(), kLine), end; it != end; ++it) {
    checksums[std::stoi((*it)[1].str())] = (*it)[2].str();
  }
  return checksums;
}

/// All `ranks` ranks reported their final parameters, and they are the same.
inline ::testing::AssertionResult sameFinalParameters(const std::string& log, int ranks) {
  const auto checksums = finalChecksums(log);
  if (static_cast<int>(checksums.size()) != ranks) {
    return ::testing::AssertionFailure() << checksums.size() << " of " << ranks
                                         << " ranks reported their final parameters";
  }
  for (const auto& [rank, checksum] : checksums) {
    if (checksum != checksums.begin()->second) {
      return ::testing::AssertionFailure() << "rank " << rank << " ended with parameters " << checksum << ", rank "
                                           << checksums.begin()->first << " with " << checksums.begin()->second;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace lockstep::test
