// parse_args.h — how every subcommand reports a CLI11 parse outcome.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "lockstep/common/error.h"

namespace lockstep::cli {

/// Parses `args` into `app`. Returns an exit code when the command should stop
/// now: kExitOk after printing --help, kExitUsage after "lockstep NAME: error: ..."
/// and `usage` on stderr; nothing when parsing succeeded.
inline std::optional<int> parseArgs(CLI::App& app, const std::vector<std::string>& args, const std::string& name,
                                    const std::string& usage) {
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help() << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "lockstep " << name << ": error: " << e.what() << "\n" << usage << "\n";
    return kExitUsage;
  }
  return std::nullopt;
}

/// The words "CONFIG.yaml key.path=value ...": the one config file (the word
/// without '='; may be absent) and the overrides, in order. A second file is a
/// ConfigError naming it.
struct ConfigArgs {
  std::string file;
  std::vector<std::string> overrides;
};

inline ConfigArgs splitConfigArgs(const std::vector<std::string>& words) {
  ConfigArgs out;
  for (const auto& word : words) {
    if (word.find('=') != std::string::npos) {
      out.overrides.push_back(word);
    } else if (out.file.empty()) {
      out.file = word;
    } else {
      throw ConfigError("unexpected argument '" + word + "' (one config file, then key.path=value overrides)");
    }
  }
  return out;
}

}  // namespace lockstep::cli
