#include "lockstep/data/names.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/names_parsing.h"
#include "lockstep/common/error.h"

namespace lockstep {

const std::vector<std::string> kNameStopList = {
    "unknown", "unk", "no name", "noname",    "none",      "na",           "nan",
    "null",    "nil", "unnamed", "not named", "not given", "not provided", "tbd",
};

namespace detail {
namespace {

namespace fs = std::filesystem;

bool isLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char toLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
char toUpper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }
bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

std::string lower(std::string s) {
  for (char& c : s) c = toLower(c);
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && isSpace(s[b])) ++b;
  while (e > b && isSpace(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool endsWithNoCase(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && lower(s.substr(s.size() - suffix.size())) == suffix;
}

}  // namespace

std::vector<std::vector<std::string>> parseCsv(const std::string& text, const std::string& what) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;    // this field had an opening quote
  bool inQuotes = false;  // between the opening and closing quote
  size_t line = 1, quoteLine = 0;
  size_t i = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;

  auto endField = [&] {
    row.push_back(std::move(field));
    field.clear();
  };
  auto endRow = [&] {
    const bool blank = row.empty() && field.empty();
    endField();
    if (!blank) rows.push_back(std::move(row));
    row.clear();
    quoted = false;
  };

  while (i < text.size()) {
    const char c = text[i];
    if (inQuotes) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          i += 2;
          continue;
        }
        inQuotes = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      ++i;
      continue;
    }
    if (c == '"' && !quoted && trim(field).empty()) {
      // Opening quote (spaces before it are dropped).
      field.clear();
      quoted = inQuotes = true;
      quoteLine = line;
    } else if (c == ',') {
      endField();
      quoted = false;
    } else if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      endRow();
      ++line;
    } else {
      field += c;  // includes text after a closing quote, kept as is
    }
    ++i;
  }
  if (inQuotes) {
    throw Error(fmt::format("{}: line {}: a quoted field is not closed (missing '\"')", what, quoteLine));
  }
  if (!row.empty() || !field.empty()) endRow();
  return rows;
}

std::vector<std::string> csvColumn(const std::string& text, const std::string& column, const std::string& what) {
  const auto rows = parseCsv(text, what);
  if (rows.empty()) {
    throw Error(fmt::format("{}: the CSV file is empty; expected a header row with a column \"{}\"", what, column));
  }
  const auto& header = rows.front();
  size_t col = header.size();
  for (size_t k = 0; k < header.size() && col == header.size(); ++k) {
    if (header[k] == column) col = k;
  }
  for (size_t k = 0; k < header.size() && col == header.size(); ++k) {
    if (lower(trim(header[k])) == lower(trim(column))) col = k;
  }
  if (col == header.size()) {
    std::string found;
    for (const auto& h : header) found += fmt::format("{}\"{}\"", found.empty() ? "" : ", ", h);
    throw Error(
        fmt::format("{}: no column \"{}\" in the CSV header; columns found: {} "
                    "(choose one with NamesOptions::csvColumn, data.csv_column in a config)",
                    what, column, found));
  }
  std::vector<std::string> values;
  values.reserve(rows.size() - 1);
  for (size_t r = 1; r < rows.size(); ++r) values.push_back(col < rows[r].size() ? rows[r][col] : std::string());
  return values;
}

std::optional<std::vector<std::string>> parseYamlList(const std::string& text, const std::vector<std::string>& keyPath,
                                                      const std::string& what) {
  const std::string path = fmt::format("{}", fmt::join(keyPath, "."));
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(
        fmt::format("{} is not valid YAML at line {}, column {}: {}", what, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  for (const auto& key : keyPath) {
    if (!node.IsMap()) return std::nullopt;
    node = node[key];
    if (!node.IsDefined() || node.IsNull()) return std::nullopt;
  }
  if (!node.IsSequence()) throw Error(fmt::format("{}: {} is not a sequence; expected a list of names", what, path));
  std::vector<std::string> items;
  for (const auto& item : node) {
    if (!item.IsScalar())
      throw Error(fmt::format("{}: {} holds a non-scalar item; expected a list of names", what, path));
    items.push_back(item.Scalar());
  }
  return items;
}

}  // namespace detail

namespace {

namespace fs = std::filesystem;
using detail::lower;

/// The file's bytes; a missing file throws naming it and `provider` (how to get it).
std::string readFile(const std::string& path, const std::string& source, const std::string& provider) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) { throw Error(fmt::format("names source \"{}\": {} not found{}", source, path, provider)); }
  if (fs::is_directory(status)) {
    throw Error(fmt::format("names source \"{}\": {} is a directory, expected a file", source, path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("names source \"{}\": cannot read {}", source, path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string debianHint(const char* package) {
  return fmt::format(
      "; the Debian package {} provides it: install it with scripts/setup.sh "
      "(or apt-get install {})",
      package, package);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(std::move(line));
  return out;
}

/// "1.10.2" -> {1, 10, 2}; non-numeric parts count as 0.
std::vector<long> versionKey(const std::string& version) {
  std::vector<long> key;
  std::istringstream in(version);
  std::string part;
  while (std::getline(in, part, '.')) key.push_back(std::strtol(part.c_str(), nullptr, 10));
  return key;
}

std::string fakerLocaleDir(const NamesOptions& options) {
  if (!options.fakerLocaleDir.empty()) return options.fakerLocaleDir;
  const std::string gems = names::kDefaultGemsDir;
  std::string best;
  std::vector<long> bestKey;
  std::error_code ec;
  for (fs::directory_iterator it(gems, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("faker-", 0) != 0 || name.size() < 7 || name[6] < '0' || name[6] > '9') continue;
    const fs::path locale = it->path() / "lib" / "locales" / "en";
    if (!fs::exists(locale / "name.yml")) continue;
    auto key = versionKey(name.substr(6));
    if (best.empty() || key > bestKey) {
      best = locale.string();
      bestKey = std::move(key);
    }
  }
  if (best.empty()) {
    throw Error(fmt::format("names source \"faker\": no faker-*/lib/locales/en/name.yml under {}{}", gems,
                            debianHint("ruby-faker")));
  }
  return best;
}

/// Appends the list at `keyPath` of a faker YAML file; a missing required key throws.
void appendFakerList(std::vector<std::string>& out, const std::string& file, const std::string& source,
                     const std::vector<std::string>& keyPath, bool required) {
  const std::string text = readFile(file, source, debianHint("ruby-faker"));
  auto items = detail::parseYamlList(text, keyPath, file);
  if (!items) {
    if (!required) return;
    throw Error(fmt::format("names source \"{}\": {} has no list {} (unexpected ruby-faker version?)", source, file,
                            fmt::join(keyPath, ".")));
  }
  for (auto& item : *items) {
    if (item.find("#{") == std::string::npos) out.push_back(std::move(item));  // skip "#{male_first_name}" references
  }
}

std::vector<std::string> readFaker(const NamesOptions& options, const std::string& source, bool people) {
  const std::string dir = fakerLocaleDir(options);
  std::vector<std::string> out;
  if (people) {
    const std::string file = dir + "/name.yml";
    appendFakerList(out, file, source, {"en", "faker", "name", "first_name"}, false);
    appendFakerList(out, file, source, {"en", "faker", "name", "male_first_name"}, true);
    appendFakerList(out, file, source, {"en", "faker", "name", "female_first_name"}, true);
    appendFakerList(out, file, source, {"en", "faker", "name", "neutral_first_name"}, false);
  }
  appendFakerList(out, dir + "/dog.yml", source, {"en", "faker", "creature", "dog", "name"}, true);
  appendFakerList(out, dir + "/cat.yml", source, {"en", "faker", "creature", "cat", "name"}, true);
  return out;
}

std::vector<std::string> readWamerican(const NamesOptions& options) {
  std::vector<std::string> out;
  for (auto& word : lines(readFile(options.dictFile, names::kWamerican, debianHint("wamerican")))) {
    if (!word.empty() && word.back() == '\r') word.pop_back();
    // Given-name shape: "Xxxx", letters only (so no possessive "'s" entries).
    bool shaped = word.size() >= 2 && word[0] >= 'A' && word[0] <= 'Z';
    for (size_t k = 1; k < word.size() && shaped; ++k) shaped = word[k] >= 'a' && word[k] <= 'z';
    if (shaped) out.push_back(std::move(word));
  }
  return out;
}

bool looksLikePath(const std::string& source) {
  std::error_code ec;
  return source.find('/') != std::string::npos || detail::endsWithNoCase(source, ".csv") ||
         detail::endsWithNoCase(source, ".txt") || fs::is_regular_file(source, ec);
}

}  // namespace

std::vector<std::string> readNameSource(const std::string& source, const NamesOptions& options) {
  if (source == names::kWamerican) return readWamerican(options);
  if (source == names::kFaker) return readFaker(options, source, true);
  if (source == names::kFakerPets) return readFaker(options, source, false);
  if (!looksLikePath(source)) {
    throw Error(fmt::format("unknown names source \"{}\": expected {}, {}, {} or a path to a .txt or .csv file", source,
                            names::kWamerican, names::kFaker, names::kFakerPets));
  }
  const std::string text = readFile(source, source, " (a user file: check the path)");
  if (detail::endsWithNoCase(source, ".csv")) return detail::csvColumn(text, options.csvColumn, source);
  return lines(text);
}

std::optional<std::string> normaliseName(const std::string& raw, const NamesOptions& options) {
  using detail::isLetter;
  using detail::isSpace;
  std::string s;
  s.reserve(raw.size());
  bool pendingSpace = false;
  for (size_t i = 0; i < raw.size();) {
    char c = raw[i];
    if (raw.compare(i, 3, "\xE2\x80\x99") == 0) {  // U+2019 right single quotation mark
      c = '\'';
      i += 3;
    } else if (raw.compare(i, 3, "\xEF\xBB\xBF") == 0) {  // byte order mark
      i += 3;
      continue;
    } else {
      ++i;
    }
    if (isSpace(c)) {
      pendingSpace = true;
      continue;
    }
    if (pendingSpace && !s.empty()) s += ' ';
    pendingSpace = false;
    s += c;
  }
  auto edge = [](char c) { return c == ' ' || c == '-' || c == '\''; };
  size_t b = 0, e = s.size();
  while (b < e && edge(s[b])) ++b;
  while (e > b && edge(s[e - 1])) --e;
  s = s.substr(b, e - b);
  if (s.empty()) return std::nullopt;
  for (char c : s) {
    if (!isLetter(c) && !edge(c)) return std::nullopt;
  }
  const std::string folded = lower(s);
  if (std::find(kNameStopList.begin(), kNameStopList.end(), folded) != kNameStopList.end()) return std::nullopt;
  if (options.lowercase) {
    s = folded;
  } else {
    bool wordStart = true;
    for (char& c : s) {
      if (isLetter(c)) {
        c = wordStart ? detail::toUpper(c) : detail::toLower(c);
        wordStart = false;
      } else {
        wordStart = c == ' ' || c == '-';
      }
    }
  }
  const auto length = static_cast<int64_t>(s.size());
  if (length < options.minLength || length > options.maxLength) return std::nullopt;
  return s;
}

std::vector<std::string> loadNames(const NamesOptions& options) {
  LOCKSTEP_CHECK(!options.sources.empty(), "NamesOptions.sources is empty; expected at least one of ",
                 names::kWamerican, ", ", names::kFaker, ", ", names::kFakerPets, " or a path to a .txt/.csv file");
  LOCKSTEP_CHECK(options.minLength >= 1, "NamesOptions.minLength = ", options.minLength, ", expected >= 1");
  LOCKSTEP_CHECK(options.maxLength >= options.minLength, "NamesOptions.maxLength = ", options.maxLength,
                 ", expected >= minLength = ", options.minLength);
  std::vector<std::string> out;
  for (const auto& source : options.sources) {
    for (const auto& raw : readNameSource(source, options)) {
      if (auto name = normaliseName(raw, options)) out.push_back(std::move(*name));
    }
  }
  // Cleaning fixed the case of every name, so equal-ignoring-case names are now equal.
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) {
    throw Error(
        fmt::format("no names left from sources [{}] after cleaning (letters, space, hyphen and apostrophe "
                    "only, length {}..{}); see docs/data.md",
                    fmt::join(options.sources, ", "), options.minLength, options.maxLength));
  }
  return out;
}

}  // namespace lockstep
