// c10d_errors.h — turning c10d/Gloo exceptions into CommError.
#pragma once

#include <exception>
#include <string>

#include "lockstep/comm/comm_error.h"

namespace lockstep::detail {

/// The message of `e` without c10's C++ backtrace.
std::string backendMessage(const std::exception& e);
/// Classifies a backend message: timeouts, closed connections, the rest.
CommErrorKind classifyBackendMessage(const std::string& message);

}  // namespace lockstep::detail
