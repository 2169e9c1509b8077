// The small parsers behind loadNames (names.cpp): just enough CSV, YAML and
// JSON for the files the name sources use. Internal; tested directly.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace lockstep::detail {

/// RFC 4180 CSV: comma-separated fields, fields in double quotes may hold
/// commas, line breaks and doubled quotes (""); LF, CRLF or CR line endings;
/// a leading UTF-8 BOM is skipped; blank lines are skipped. Throws
/// lockstep::Error naming `what` and the line for an unterminated quote.
std::vector<std::vector<std::string>> parseCsv(const std::string& text, const std::string& what);

/// The values of column `column` of CSV `text` whose first row is the header.
/// The column matches exactly, else ignoring case and surrounding spaces.
/// Short rows give "". Throws lockstep::Error listing the columns when absent.
std::vector<std::string> csvColumn(const std::string& text, const std::string& column,
                                   const std::string& what);

/// The sequence under the mapping keys `keyPath` (e.g. {"en","faker","name",
/// "male_first_name"}) of a block-style YAML document, given either as a flow
/// sequence (`key: [a, "b", 'c']`, may span lines) or as block items
/// (`- a` lines below the key). Plain, single- and double-quoted scalars.
/// nullopt when the key path is absent; throws lockstep::Error for a value
/// that is not such a sequence.
std::optional<std::vector<std::string>> parseYamlList(const std::string& text,
                                                      const std::vector<std::string>& keyPath,
                                                      const std::string& what);

/// A JSON array of strings (`["a", "b\u00e9"]`); \u escapes become UTF-8.
std::vector<std::string> parseJsonStringArray(const std::string& text, const std::string& what);

}  // namespace lockstep::detail
