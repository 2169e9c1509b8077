// Quoting command lines and the end of a log (shell_text.h).
#include "common/shell_text.h"

#include <deque>
#include <fstream>

namespace lockstep::detail {

std::string shellQuote(const std::string& word) {
  static const char* kSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=,:@+%";
  if (!word.empty() && word.find_first_not_of(kSafe) == std::string::npos) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string shellJoin(const std::vector<std::string>& argv) {
  std::string text;
  for (const auto& a : argv) text += (text.empty() ? "" : " ") + shellQuote(a);
  return text;
}

std::string lastLines(const std::string& path, size_t count, const std::string& indent) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > count) lines.pop_front();
  }
  std::string text;
  for (const auto& l : lines) {
    if (indent.empty()) {
      text += (text.empty() ? "" : "\n") + l;
    } else {
      text += indent + l + "\n";
    }
  }
  return text;
}

}  // namespace lockstep::detail
