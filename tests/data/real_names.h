// real_names.h — the name sources scripts/setup.sh installs, for the data tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lockstep/common/error.h"
#include "lockstep/data/names.h"

namespace lockstep::test {

/// Loads real sources; a missing package is a test failure that says how to install it.
inline std::vector<std::string> loadReal(const std::vector<std::string>& sources) {
  NamesOptions o;
  o.sources = sources;
  try {
    return loadNames(o);
  } catch (const Error& e) {
    ADD_FAILURE() << "could not load the real name sources; run scripts/setup.sh (it installs them): " << e.what();
    return {};
  }
}

}  // namespace lockstep::test
