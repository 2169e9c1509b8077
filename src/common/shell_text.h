// shell_text.h — command lines and logs as people read them: an argv quoted for a shell (logs,
// error messages, scripts), the last lines of a log file (error messages about a child).
// Internal to lockstep (not installed).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace lockstep::detail {

/// `word` as one shell word: as is when it holds only safe characters, else in single quotes
/// (a quote inside becomes '\'').
std::string shellQuote(const std::string& word);
/// argv as one shell line, each word quoted as needed.
std::string shellJoin(const std::vector<std::string>& argv);
/// The last `count` lines of a file, each prefixed with `indent`, joined by newlines (a trailing
/// newline after each line when `indent` is not empty); empty when it cannot be read.
std::string lastLines(const std::string& path, size_t count, const std::string& indent = "");

}  // namespace lockstep::detail
