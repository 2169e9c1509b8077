// failure.h — the errors every backend raises the same way after a timeout or an earlier failure.
#pragma once

#include <chrono>
#include <exception>
#include <string>

#include "lockstep/common/comm_error.h"

namespace lockstep::detail {

/// The words of a failure c10d or its backend raised (they report exceptions with text only),
/// without the C++ backtrace c10 appends.
std::string backendMessage(const std::exception& e);

/// A backend factory's arguments: a world of at least one, the rank in it, a positive timeout (Error otherwise).
void checkMembership(int rank, int worldSize, std::chrono::milliseconds timeout);

/// `info` turned into a kTimeout error; `extra` is appended to the common explanation.
CommError timeoutError(CommErrorInfo info, const std::string& extra = "");
/// The kAborted error of operation `info` on a communicator poisoned by `first`.
std::exception_ptr abortedError(CommErrorInfo info, const CommErrorInfo& first);

/// Makes a write to a connection a dead peer closed fail with EPIPE instead of killing the process
/// with SIGPIPE (some transports write without MSG_NOSIGNAL), so the error names the peer. Changes
/// the process's SIGPIPE disposition only while it is the default; called by every backend's factory.
void ignoreBrokenPipeSignal();

}  // namespace lockstep::detail
