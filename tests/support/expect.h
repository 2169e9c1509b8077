// expect.h — small assertions shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "lockstep/comm/comm_error.h"
#include "lockstep/common/error.h"

namespace lockstep::test {

/// The message of the lockstep::Error that `fn` throws; a test failure when it throws none.
inline std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) { return e.what(); }
  ADD_FAILURE() << "expected lockstep::Error";
  return {};
}

/// The CommError that `fn` throws; a test failure (and a default error) when it throws none.
inline CommError commErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const CommError& e) { return e; }
  ADD_FAILURE() << "expected a CommError";
  return CommError(CommErrorInfo{});
}

}  // namespace lockstep::test

/// Expects `needle` inside the string `haystack`, printing the haystack otherwise.
#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)
