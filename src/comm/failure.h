// failure.h — the errors every backend raises the same way after a timeout or an earlier failure.
#pragma once

#include <exception>
#include <string>

#include "lockstep/comm/comm_error.h"

namespace lockstep::detail {

/// `info` turned into a kTimeout error; `extra` is appended to the common explanation.
CommError timeoutError(CommErrorInfo info, const std::string& extra = "");
/// The kAborted error of operation `info` on a communicator poisoned by `first`.
std::exception_ptr abortedError(CommErrorInfo info, const CommErrorInfo& first);

}  // namespace lockstep::detail
