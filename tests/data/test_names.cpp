// Name sources: the real files scripts/setup.sh installs (Debian wamerican and
// ruby-faker), user .txt/.csv files, the cleaning
// rules and the parsers behind them. A missing package fails, never skips.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "data/names_parsing.h"
#include "data/real_names.h"
#include "lockstep/common/error.h"
#include "lockstep/data/names.h"
#include "support/expect.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using Names = std::vector<std::string>;

using test::loadReal;

bool contains(const Names& names, const std::string& name) {
  return std::binary_search(names.begin(), names.end(), name);
}

using test::errorOf;

/// Each test gets a fresh temporary folder for the files it writes.
class NamesFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "lockstep_names_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  fs::path dir_;
};

void expectClean(const Names& names) {
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  std::set<std::string> folded;
  for (const auto& n : names) {
    std::string f = n;
    for (char& c : f) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_TRUE(folded.insert(f).second) << "duplicate ignoring case: " << n;
    EXPECT_GE(n.size(), 2u) << n;
    EXPECT_LE(n.size(), 15u) << n;
    for (char c : n) EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(c)) || c == ' ' || c == '-' || c == '\'') << n;
  }
}

// ---- the real sources --------------------------------------------------------

TEST(NamesReal, Wamerican) {
  NamesOptions o;
  o.sources = {names::kWamerican};
  Names raw;
  try {
    raw = readNameSource(names::kWamerican, o);
  } catch (const Error& e) { FAIL() << "run scripts/setup.sh to install wamerican: " << e.what(); }
  for (const auto& w : raw) {
    ASSERT_TRUE(std::isupper(static_cast<unsigned char>(w[0]))) << w;
    ASSERT_EQ(w.find('\''), std::string::npos) << "possessives are not names: " << w;
    ASSERT_TRUE(std::all_of(w.begin() + 1, w.end(), [](char c) { return c >= 'a' && c <= 'z'; })) << w;
  }
  const auto names = loadReal({names::kWamerican});
  EXPECT_GT(names.size(), 5000u);
  EXPECT_TRUE(contains(names, "Aaron"));
  EXPECT_TRUE(contains(names, "Abigail"));
  EXPECT_FALSE(contains(names, "Aaron's"));
  EXPECT_FALSE(contains(names, "Table")) << "lower-case words of the list (\"table\") are not names";
  expectClean(names);
}

TEST(NamesReal, Faker) {
  const auto all = loadReal({names::kFaker});
  EXPECT_GT(all.size(), 3000u);
  EXPECT_TRUE(contains(all, "Aaron"));    // male_first_name
  EXPECT_TRUE(contains(all, "Abigail"));  // female_first_name
  EXPECT_TRUE(contains(all, "Buddy"));    // creature/dog name
  EXPECT_TRUE(contains(all, "Waffles"));  // creature/cat name
  expectClean(all);
  for (const auto& n : all) EXPECT_EQ(n.find('#'), std::string::npos) << "unexpanded faker reference " << n;

  const auto pets = loadReal({names::kFakerPets});
  EXPECT_GT(pets.size(), 100u);
  EXPECT_TRUE(contains(pets, "Buddy"));
  EXPECT_TRUE(contains(pets, "Waffles"));
  EXPECT_FALSE(contains(pets, "Aaron"));
  EXPECT_TRUE(std::includes(all.begin(), all.end(), pets.begin(), pets.end()));
}

TEST(NamesReal, DefaultSourceIsFakersPetAndFirstNames) {
  EXPECT_EQ(loadNames(NamesOptions{}), loadReal({names::kFaker}));
}

TEST(NamesReal, LowercaseOption) {
  NamesOptions o;
  o.lowercase = true;
  const auto names = loadNames(o);
  EXPECT_TRUE(contains(names, "buddy"));
  EXPECT_TRUE(contains(names, "waffles"));
  for (const auto& n : names) {
    EXPECT_TRUE(std::none_of(n.begin(), n.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) << n;
  }
}

// ---- missing sources -----------------------------------------------------------

TEST_F(NamesFiles, MissingDebianPackagesNameThePackage) {
  NamesOptions o;
  o.sources = {names::kWamerican};
  o.dictFile = (dir_ / "no-such-dict").string();
  auto message = errorOf([&] { loadNames(o); });
  EXPECT_HAS(message, o.dictFile);
  EXPECT_HAS(message, "Debian package wamerican");
  EXPECT_HAS(message, "scripts/setup.sh");

  o.sources = {names::kFaker};
  o.fakerLocaleDir = dir_.string();
  message = errorOf([&] { loadNames(o); });
  EXPECT_HAS(message, dir_.string() + "/name.yml");
  EXPECT_HAS(message, "ruby-faker");
}

TEST_F(NamesFiles, MissingUserFileNamesThePath) {
  NamesOptions o;
  o.sources = {(dir_ / "licences.csv").string()};
  EXPECT_HAS(errorOf([&] { loadNames(o); }), o.sources[0]);
  o.sources = {(dir_ / "names.txt").string()};
  EXPECT_HAS(errorOf([&] { loadNames(o); }), o.sources[0]);
}

TEST(Names, UnknownSourceListsTheKnownOnes) {
  NamesOptions o;
  o.sources = {"dognames"};
  const auto message = errorOf([&] { loadNames(o); });
  EXPECT_HAS(message, "\"dognames\"");
  EXPECT_HAS(message, "faker-pets");
  EXPECT_HAS(message, "wamerican");
  EXPECT_HAS(message, ".csv");
}

TEST(Names, BadOptions) {
  NamesOptions o;
  o.sources = {};
  EXPECT_HAS(errorOf([&] { loadNames(o); }), "sources");
  o = NamesOptions{};
  o.minLength = 0;
  EXPECT_HAS(errorOf([&] { loadNames(o); }), "minLength");
  o = NamesOptions{};
  o.minLength = 5;
  o.maxLength = 4;
  EXPECT_HAS(errorOf([&] { loadNames(o); }), "maxLength");
}

// ---- user files ------------------------------------------------------------------

TEST_F(NamesFiles, CsvPetLicenceExport) {
  // The shape of a city's pet-licence export: CRLF, quoted fields with commas
  // and doubled quotes, names in capitals, placeholders instead of names.
  const std::string csv =
      "License Issue Date,License Number,Animal's Name,Species,\"Primary Breed, if known\"\r\n"
      "\"December 18, 2015\",S107948,ZEUS,Dog,Pomeranian\r\n"
      "\"June 14, 2016\",S116503,\"MAX\",Dog,\"Retriever, Labrador\"\r\n"
      "\"August 04, 2016\",S127990,\"SIR \"\"FLUFFY\"\" PANTS\",Cat,\"Domestic Shorthair\"\r\n"
      "\"Jan 1, 2017\",S1,UNKNOWN,Dog,Mix\r\n"
      "\"Jan 2, 2017\",S2,NO NAME,Cat,Mix\r\n"
      "\"Jan 3, 2017\",S3,,Dog,Mix\r\n"
      "\"Jan 4, 2017\",S4,\"  mary-LOU  \",Dog,Mix\r\n"
      "\"Jan 5, 2017\",S5,O\xE2\x80\x99MALLEY,Cat,Mix\r\n"
      "\"Jan 6, 2017\",S6,R2D2,Dog,Mix\r\n"
      "\"Jan 7, 2017\",S7,\"Max\",Dog,Mix\r\n"
      "\"Jan 8, 2017\",S8,\"Bella, Jr\",Dog,Mix\r\n"
      "\"Jan 9, 2017\",S9,Z\r\n"  // short row and a one-letter name
      "\r\n"
      "\"Jan 10, 2017\",S10,ZIGGY\r\n";
  NamesOptions o;
  o.sources = {write("seattle.csv", csv)};
  EXPECT_EQ(readNameSource(o.sources[0], o),
            (Names{"ZEUS", "MAX", "SIR \"FLUFFY\" PANTS", "UNKNOWN", "NO NAME", "", "  mary-LOU  ",
                   "O\xE2\x80\x99MALLEY", "R2D2", "Max", "Bella, Jr", "Z", "ZIGGY"}));
  // Quotes, digits and commas drop an entry; placeholders and one letter are dropped.
  EXPECT_EQ(loadNames(o), (Names{"Mary-Lou", "Max", "O'malley", "Zeus", "Ziggy"}));
}

TEST_F(NamesFiles, CsvColumnChoiceAndMissingColumn) {
  const std::string path = write("pets.csv", "id,Pet Name,kind\n1,Rex,dog\n2,Tom,cat\n");
  NamesOptions o;
  o.sources = {path};
  const auto message = errorOf([&] { loadNames(o); });
  EXPECT_HAS(message, path);
  EXPECT_HAS(message, "\"Animal's Name\"");
  EXPECT_HAS(message, "\"id\", \"Pet Name\", \"kind\"");
  o.csvColumn = "Pet Name";
  EXPECT_EQ(loadNames(o), (Names{"Rex", "Tom"}));
  o.csvColumn = " pet name ";  // case and surrounding spaces are forgiven
  EXPECT_EQ(loadNames(o), (Names{"Rex", "Tom"}));
}

TEST_F(NamesFiles, TextFileOneNamePerLine) {
  NamesOptions o;
  o.sources = {write("names.txt", "Rex\r\n\r\n  fido \nBELLA\nbella\nX\nAnne-Marie\nToolongtobeanamereally\n")};
  EXPECT_EQ(loadNames(o), (Names{"Anne-Marie", "Bella", "Fido", "Rex"}));
  o.minLength = 1;
  o.maxLength = 30;
  EXPECT_EQ(loadNames(o), (Names{"Anne-Marie", "Bella", "Fido", "Rex", "Toolongtobeanamereally", "X"}));
}

TEST_F(NamesFiles, SourcesAreMergedAndDeduplicated) {
  NamesOptions o;
  o.sources = {write("a.txt", "Rex\nMAX\n"), write("b.csv", "Animal's Name\nmax\nLuna\n")};
  EXPECT_EQ(loadNames(o), (Names{"Luna", "Max", "Rex"}));
}

TEST_F(NamesFiles, NothingLeftIsAnError) {
  NamesOptions o;
  o.sources = {write("junk.txt", "UNKNOWN\n123\n\n")};
  EXPECT_HAS(errorOf([&] { loadNames(o); }), "no names left");
}

// ---- cleaning -----------------------------------------------------------------------

TEST(NameCleaning, Rules) {
  NamesOptions o;
  auto clean = [&](const std::string& raw) { return normaliseName(raw, o).value_or("<dropped>"); };
  EXPECT_EQ(clean("REX"), "Rex");
  EXPECT_EQ(clean("  mr   paws\ta-LOT "), "Mr Paws A-Lot");
  EXPECT_EQ(clean("'Bob'"), "Bob");
  EXPECT_EQ(clean("O\xE2\x80\x99Neil"), "O'neil");
  EXPECT_EQ(clean("Zoë"), "<dropped>");
  EXPECT_EQ(clean("K9"), "<dropped>");
  EXPECT_EQ(clean("Dr. Who"), "<dropped>");
  EXPECT_EQ(clean("---"), "<dropped>");
  EXPECT_EQ(clean(""), "<dropped>");
  EXPECT_EQ(clean("B"), "<dropped>");
  EXPECT_EQ(clean("Abcdefghijklmnop"), "<dropped>");  // 16 > maxLength
  for (const auto& junk : kNameStopList) {
    std::string upper = junk;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(clean(upper), "<dropped>") << upper;
  }
  EXPECT_EQ(clean("No  Name"), "<dropped>");
  o.lowercase = true;
  EXPECT_EQ(clean("Mary-Lou"), "mary-lou");
}

// ---- parsers --------------------------------------------------------------------------

TEST(NameParsers, Csv) {
  const auto rows = detail::parseCsv(
      "\xEF\xBB\xBF"
      "a,\"b,c\",\"d\"\"e\"\r\n\n\"multi\nline\",,x\rlast",
      "t.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], (Names{"a", "b,c", "d\"e"}));
  EXPECT_EQ(rows[1], (Names{"multi\nline", "", "x"}));
  EXPECT_EQ(rows[2], (Names{"last"}));
  const auto message = errorOf([] { detail::parseCsv("a,b\n1,\"open\n2,3\n", "t.csv"); });
  EXPECT_HAS(message, "t.csv");
  EXPECT_HAS(message, "line 2");
}

TEST(NameParsers, Yaml) {
  const std::string yaml =
      "en:\n"
      "  faker:\n"
      "    name:\n"
      "      flow: [Aaron, \"Bo, Jr\", 'D''Arcy', \"Jos\\u00e9\"]  # comment\n"
      "      multi: [Ann,\n"
      "              Bea]\n"
      "      block:\n"
      "        - \"#{flow}\"\n"
      "        - Cy  # comment\n"
      "\n"
      "      same:\n"
      "      - Dee\n"
      "      - 'Eve'\n"
      "      other: x\n"
      "    dog:\n"
      "      flow: [Rex]\n";
  const std::vector<std::string> base = {"en", "faker", "name"};
  auto at = [&](const std::string& key) {
    auto path = base;
    path.push_back(key);
    return detail::parseYamlList(yaml, path, "t.yml");
  };
  EXPECT_EQ(at("flow").value(), (Names{"Aaron", "Bo, Jr", "D'Arcy", "Jos\xC3\xA9"}));
  EXPECT_EQ(at("multi").value(), (Names{"Ann", "Bea"}));
  EXPECT_EQ(at("block").value(), (Names{"#{flow}", "Cy"}));
  EXPECT_EQ(at("same").value(), (Names{"Dee", "Eve"}));
  EXPECT_FALSE(at("missing").has_value());
  EXPECT_EQ(detail::parseYamlList(yaml, {"en", "faker", "dog", "flow"}, "t.yml").value(), (Names{"Rex"}));
  EXPECT_HAS(errorOf([&] { at("other"); }), "expected a list");
  EXPECT_HAS(errorOf([] { detail::parseYamlList("en: [Ann,\n", {"en"}, "bad.yml"); }), "bad.yml is not valid YAML");
}

}  // namespace
}  // namespace lockstep
