// gtest_main.cpp — the main() of every test binary: GoogleTest's, plus how a
// skip reaches CTest. A binary whose tests all passed but some skipped exits
// 77, which CTest reports as "Skipped" (SKIP_RETURN_CODE, set by
// lockstep_add_test), not as a pass; under LOCKSTEP_REQUIRE_ALL_TESTS=1
// (.ci/run) it exits 1 instead, naming the skipped tests, so CI cannot go
// green on a test that did not run.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "support/expect.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (rc != 0) return rc;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (unit.skipped_test_count() == 0) return 0;
  std::string names;
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(t);
      if (info.result()->Skipped()) names += std::string(names.empty() ? "" : ", ") + suite.name() + "." + info.name();
    }
  }
  if (lockstep::test::requireAllTests()) {
    std::cerr << unit.skipped_test_count() << " test(s) skipped under LOCKSTEP_REQUIRE_ALL_TESTS=1: " << names
              << "; their output above says what they need\n";
    return 1;
  }
  std::cerr << unit.skipped_test_count() << " test(s) skipped: " << names << "\n";
  return 77;
}
