// lockstep/data/names.h — name lists for the pet-name generator (docs/data.md).
//
// Contract:
// - loadNames() reads every source of NamesOptions::sources, cleans each
//   entry (normaliseName), and returns the union: deduplicated
//   case-insensitively and sorted, so the same files give the same list.
// - A source is one of the built-in names below or a path to a user file:
//   "*.csv" is read as CSV with a header row and NamesOptions::csvColumn;
//   any other path is read as text, one name per line.
// - Built-in sources read files installed by scripts/setup.sh (through
//   scripts/setup_data.sh). A missing file throws lockstep::Error naming the
//   path and the package that provides it; so does a missing CSV column
//   (listing the columns found) and an unknown source name.
// - No state, no threads: callable from any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace lockstep {

/// Built-in name sources.
namespace names {
/// Debian `wamerican`: capitalised single words of the word list (mostly given names).
inline constexpr const char* kWamerican = "wamerican";
/// Debian `ruby-faker`: en first names (male, female, neutral) plus dog and cat names.
inline constexpr const char* kFaker = "faker";
/// Debian `ruby-faker`: only its dog and cat names.
inline constexpr const char* kFakerPets = "faker-pets";
/// The word list of Debian's wamerican.
inline constexpr const char* kDefaultDictFile = "/usr/share/dict/american-english";
/// Where Debian installs Ruby gems; ruby-faker's locales are in faker-*/lib/locales/en.
inline constexpr const char* kDefaultGemsDir = "/usr/share/rubygems-integration/all/gems";
}  // namespace names

struct NamesOptions {
  /// Built-in source names (see namespace names) or paths to .txt/.csv files.
  std::vector<std::string> sources = {names::kFaker};
  /// The column of a CSV source that holds the names (matched exactly, else
  /// ignoring case and surrounding spaces).
  std::string csvColumn = "Animal's Name";
  /// The wamerican word list.
  std::string dictFile = names::kDefaultDictFile;
  /// ruby-faker's English locale folder (with name.yml, dog.yml, cat.yml);
  /// empty: the newest faker-*/lib/locales/en under names::kDefaultGemsDir.
  std::string fakerLocaleDir;
  /// Return names in lower case instead of "Title Case".
  bool lowercase = false;
  /// Names shorter or longer than this (in characters, after cleaning) are dropped.
  int minLength = 2;
  int maxLength = 15;
};

/// The cleaned, deduplicated, sorted names of all sources. Throws lockstep::Error
/// for a missing or unreadable source, a bad option, or when nothing is left.
std::vector<std::string> loadNames(const NamesOptions& options);

/// The raw entries of one source, before cleaning (for inspection and tests).
std::vector<std::string> readNameSource(const std::string& source, const NamesOptions& options);

/// Cleans one raw entry, or returns nullopt when it is dropped:
/// - a right single quote (U+2019) becomes an apostrophe; runs of whitespace
///   become one space; leading/trailing spaces, hyphens and apostrophes go;
/// - only ASCII letters, space, hyphen and apostrophe are allowed, and at least
///   one letter: anything else (digits, accents, punctuation) drops the entry;
/// - entries of the stop-list (kNameStopList, compared ignoring case) are dropped;
/// - every word (after a space or hyphen) becomes "Capitalised": "MAX" -> "Max",
///   "mary-LOU" -> "Mary-Lou"; then lower case if options.lowercase;
/// - lengths outside [minLength, maxLength] are dropped.
std::optional<std::string> normaliseName(const std::string& raw, const NamesOptions& options);

/// Placeholders found in pet-licence exports instead of a name (lower case).
extern const std::vector<std::string> kNameStopList;

}  // namespace lockstep
