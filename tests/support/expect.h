// expect.h — small assertions shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "lockstep/common/comm_error.h"
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

/// True under LOCKSTEP_REQUIRE_ALL_TESTS=1 (.ci/run sets it): a test that cannot run fails instead of skipping.
inline bool requireAllTests() {
  const char* value = std::getenv("LOCKSTEP_REQUIRE_ALL_TESTS");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace lockstep::test

/// Skips the test unless `cond`, naming the missing prerequisite; under
/// LOCKSTEP_REQUIRE_ALL_TESTS=1 fails it instead, so CI cannot go green on a
/// test that did not run. The only way tests here may skip.
#define LOCKSTEP_SKIP_UNLESS(cond, prerequisite)                                                            \
  do {                                                                                                      \
    if (!(cond)) {                                                                                          \
      if (::lockstep::test::requireAllTests()) {                                                            \
        FAIL() << "this test could not run and LOCKSTEP_REQUIRE_ALL_TESTS=1 forbids skipping it: it needs " \
               << prerequisite;                                                                             \
      }                                                                                                     \
      GTEST_SKIP() << "needs " << prerequisite;                                                             \
    }                                                                                                       \
  } while (0)

/// Expects `needle` inside the string `haystack`, printing the haystack otherwise.
#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)
