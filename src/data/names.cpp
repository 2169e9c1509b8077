#include "lockstep/data/names.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/names_parsing.h"
#include "lockstep/common/error.h"

namespace lockstep {

const std::vector<std::string> kNameStopList = {
    "unknown", "unk",     "no name",   "noname",       "none",      "na",  "nan",
    "null",    "nil",     "unnamed",   "not named",    "not given", "not provided", "tbd",
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

void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Four hex digits at text[pos]; throws naming `what` when malformed.
uint32_t parseHex4(const std::string& text, size_t pos, const std::string& what) {
  if (pos + 4 > text.size()) throw Error(fmt::format("{}: truncated \\u escape", what));
  uint32_t v = 0;
  for (size_t k = pos; k < pos + 4; ++k) {
    const char c = text[k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
    else throw Error(fmt::format("{}: bad \\u escape \"{}\"", what, text.substr(pos, 4)));
  }
  return v;
}

/// A double-quoted string (JSON or YAML) starting at text[pos] == '"'; leaves pos after the closing quote.
std::string parseDoubleQuoted(const std::string& text, size_t& pos, const std::string& what) {
  std::string out;
  ++pos;
  while (pos < text.size()) {
    const char c = text[pos++];
    if (c == '"') return out;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (pos >= text.size()) break;
    const char e = text[pos++];
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'u': {
        uint32_t cp = parseHex4(text, pos, what);
        pos += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && pos + 6 <= text.size() && text[pos] == '\\' && text[pos + 1] == 'u') {
          const uint32_t low = parseHex4(text, pos + 2, what);
          if (low >= 0xDC00 && low < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            pos += 6;
          }
        }
        appendUtf8(out, cp);
        break;
      }
      default: out += e; break;  // \" \\ \/ and YAML's others: the character itself
    }
  }
  throw Error(fmt::format("{}: a double-quoted string is not closed", what));
}

/// A YAML single-quoted scalar starting at text[pos] == '\''; '' is a quote.
std::string parseSingleQuoted(const std::string& text, size_t& pos, const std::string& what) {
  std::string out;
  ++pos;
  while (pos < text.size()) {
    const char c = text[pos++];
    if (c != '\'') {
      out += c;
    } else if (pos < text.size() && text[pos] == '\'') {
      out += '\'';
      ++pos;
    } else {
      return out;
    }
  }
  throw Error(fmt::format("{}: a single-quoted string is not closed", what));
}

/// A YAML scalar of a block item (`- value`): quoted, or plain up to a ` #` comment.
std::string yamlBlockScalar(const std::string& body, const std::string& what) {
  size_t pos = 0;
  if (!body.empty() && body[0] == '"') return parseDoubleQuoted(body, pos, what);
  if (!body.empty() && body[0] == '\'') return parseSingleQuoted(body, pos, what);
  std::string plain = body;
  if (auto hash = plain.find(" #"); hash != std::string::npos) plain.resize(hash);
  return trim(plain);
}

/// Parses a flow sequence starting at text[pos] == '['. Returns nullopt when
/// `text` ends before the closing bracket (the caller appends the next line).
std::optional<std::vector<std::string>> yamlFlowSequence(const std::string& text, const std::string& what) {
  std::vector<std::string> items;
  size_t pos = 1;
  for (;;) {
    while (pos < text.size() && isSpace(text[pos])) ++pos;
    if (pos >= text.size()) return std::nullopt;
    char c = text[pos];
    if (c == ']') return items;
    if (c == '[' || c == '{') throw Error(fmt::format("{}: nested collections are not supported in a name list", what));
    std::string item;
    if (c == '"' || c == '\'') {
      // An unclosed quote may continue on the next line.
      if (text.find(c, pos + 1) == std::string::npos) return std::nullopt;
      item = c == '"' ? parseDoubleQuoted(text, pos, what) : parseSingleQuoted(text, pos, what);
    } else {
      const size_t end = text.find_first_of(",]", pos);
      if (end == std::string::npos) return std::nullopt;
      item = trim(text.substr(pos, end - pos));
      pos = end;
    }
    while (pos < text.size() && isSpace(text[pos])) ++pos;
    if (pos >= text.size()) return std::nullopt;
    c = text[pos];
    if (c != ',' && c != ']') throw Error(fmt::format("{}: expected ',' or ']' after \"{}\" in a list", what, item));
    if (!item.empty()) items.push_back(std::move(item));
    if (c == ',') ++pos;
  }
}

struct Line {
  int indent = 0;
  std::string body;  // without indentation and trailing spaces/CR
};

std::vector<Line> yamlLines(const std::string& text) {
  std::vector<Line> lines;
  std::istringstream in(text);
  std::string raw;
  while (std::getline(in, raw)) {
    Line line;
    size_t i = 0;
    while (i < raw.size() && raw[i] == ' ') ++i;
    line.indent = static_cast<int>(i);
    size_t e = raw.size();
    while (e > i && isSpace(raw[e - 1])) --e;
    line.body = raw.substr(i, e - i);
    lines.push_back(std::move(line));
  }
  return lines;
}

bool yamlSkippable(const Line& line) {
  return line.body.empty() || line.body[0] == '#' || line.body == "---";
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
    throw Error(fmt::format("{}: no column \"{}\" in the CSV header; columns found: {} "
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
  const auto lines = yamlLines(text);
  std::vector<std::pair<int, std::string>> stack;  // (indent, key) of the enclosing mappings
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& line = lines[i];
    if (yamlSkippable(line) || line.body[0] == '-') continue;
    // `key: value` or `"key": value`
    std::string key;
    size_t colon = std::string::npos;
    if (line.body[0] == '"' || line.body[0] == '\'') {
      size_t pos = 0;
      key = line.body[0] == '"' ? parseDoubleQuoted(line.body, pos, what) : parseSingleQuoted(line.body, pos, what);
      if (pos < line.body.size() && line.body[pos] == ':') colon = pos;
    } else {
      for (size_t k = 0; k < line.body.size(); ++k) {
        if (line.body[k] == ':' && (k + 1 == line.body.size() || line.body[k + 1] == ' ')) {
          colon = k;
          break;
        }
      }
      if (colon != std::string::npos) key = trim(line.body.substr(0, colon));
    }
    if (colon == std::string::npos) continue;  // a continuation of a multi-line scalar
    while (!stack.empty() && stack.back().first >= line.indent) stack.pop_back();
    stack.emplace_back(line.indent, key);
    if (stack.size() != keyPath.size()) continue;
    bool match = true;
    for (size_t k = 0; k < keyPath.size() && match; ++k) match = stack[k].second == keyPath[k];
    if (!match) continue;

    const std::string path = fmt::format("{}", fmt::join(keyPath, "."));
    std::string value = trim(line.body.substr(colon + 1));
    if (!value.empty() && value[0] == '#') value.clear();
    if (!value.empty() && value[0] == '[') {
      for (size_t j = i + 1;; ++j) {
        if (auto items = yamlFlowSequence(value, fmt::format("{} ({})", what, path))) return items;
        if (j >= lines.size()) throw Error(fmt::format("{}: the list {} is not closed with ']'", what, path));
        value += ' ' + lines[j].body;
      }
    }
    if (!value.empty()) throw Error(fmt::format("{}: {} is \"{}\", expected a list of names", what, path, value));
    std::vector<std::string> items;
    for (size_t j = i + 1; j < lines.size(); ++j) {
      const Line& item = lines[j];
      if (yamlSkippable(item)) continue;
      if (item.indent < line.indent || item.body[0] != '-') break;
      if (item.body.size() > 1 && item.body[1] != ' ') break;  // "-x" is a plain scalar, not an item
      const std::string scalar = yamlBlockScalar(trim(item.body.substr(1)), what);
      if (!scalar.empty()) items.push_back(scalar);
    }
    return items;
  }
  return std::nullopt;
}

std::vector<std::string> parseJsonStringArray(const std::string& text, const std::string& what) {
  std::vector<std::string> items;
  size_t pos = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  auto skipSpace = [&] {
    while (pos < text.size() && isSpace(text[pos])) ++pos;
  };
  auto fail = [&](const char* expected) {
    return Error(fmt::format("{}: expected {} at byte {} of a JSON array of strings", what, expected, pos));
  };
  skipSpace();
  if (pos >= text.size() || text[pos] != '[') throw fail("'['");
  ++pos;
  skipSpace();
  if (pos < text.size() && text[pos] == ']') return items;
  for (;;) {
    skipSpace();
    if (pos >= text.size() || text[pos] != '"') throw fail("a string");
    items.push_back(parseDoubleQuoted(text, pos, what));
    skipSpace();
    if (pos < text.size() && text[pos] == ',') {
      ++pos;
      continue;
    }
    if (pos < text.size() && text[pos] == ']') return items;
    throw fail("',' or ']'");
  }
}

}  // namespace detail

namespace {

namespace fs = std::filesystem;
using detail::lower;

/// The file's bytes; a missing file throws naming it and `provider` (how to get it).
std::string readFile(const std::string& path, const std::string& source, const std::string& provider) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) {
    throw Error(fmt::format("names source \"{}\": {} not found{}", source, path, provider));
  }
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
  return fmt::format("; the Debian package {} provides it: install it with scripts/setup.sh "
                     "(or apt-get install {})", package, package);
}

std::string npmHint(const char* package, const std::string& npmDir) {
  return fmt::format("; the npm package {} provides it, installed into {} by scripts/setup.sh "
                     "(scripts/setup_data.sh): run it, or point NamesOptions::npmDir at your copy",
                     package, npmDir);
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

std::vector<std::string> readNpmJson(const NamesOptions& options, const char* package,
                                     std::initializer_list<const char*> files) {
  std::vector<std::string> out;
  for (const char* file : files) {
    const std::string path = fmt::format("{}/node_modules/{}/{}", options.npmDir, package, file);
    auto items = detail::parseJsonStringArray(readFile(path, package, npmHint(package, options.npmDir)), path);
    out.insert(out.end(), std::make_move_iterator(items.begin()), std::make_move_iterator(items.end()));
  }
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
  if (source == names::kDogNames) return readNpmJson(options, names::kDogNames, {"male-dog-names.json", "female-dog-names.json"});
  if (source == names::kCatNames) return readNpmJson(options, names::kCatNames, {"cat-names.json"});
  if (!looksLikePath(source)) {
    throw Error(fmt::format("unknown names source \"{}\": expected {}, {}, {}, {}, {} or a path to a .txt or .csv file",
                            source, names::kWamerican, names::kFaker, names::kFakerPets, names::kDogNames,
                            names::kCatNames));
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
                 names::kWamerican, ", ", names::kFaker, ", ", names::kFakerPets, ", ", names::kDogNames, ", ",
                 names::kCatNames, " or a path to a .txt/.csv file");
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
    throw Error(fmt::format("no names left from sources [{}] after cleaning (letters, space, hyphen and apostrophe "
                            "only, length {}..{}); see docs/data.md",
                            fmt::join(options.sources, ", "), options.minLength, options.maxLength));
  }
  return out;
}

}  // namespace lockstep
