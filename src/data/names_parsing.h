// The parsers behind loadNames (names.cpp): CSV of our own (RFC 4180), and
// the lists inside YAML files through yaml-cpp.
// Internal; tested directly.
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
std::vector<std::string> csvColumn(const std::string& text, const std::string& column, const std::string& what);

/// The sequence under the mapping keys `keyPath` (e.g. {"en","faker","name",
/// "male_first_name"}) of a YAML document, flow or block style. nullopt when
/// the key path is absent; throws lockstep::Error naming `what` for invalid
/// YAML or a value that is not a sequence of scalars.
std::optional<std::vector<std::string>> parseYamlList(const std::string& text, const std::vector<std::string>& keyPath,
                                                      const std::string& what);

}  // namespace lockstep::detail
