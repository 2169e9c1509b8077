// CharVocab and the next-character windows, on hand-checked names and on the
// real name sources that scripts/setup.sh installs.
#include <gtest/gtest.h>

#include <functional>

#include "data/real_names.h"
#include "lockstep/common/error.h"
#include "lockstep/data/char_dataset.h"
#include "lockstep/data/names.h"
#include "support/expect.h"

namespace lockstep {
namespace {

using Names = std::vector<std::string>;

using test::errorOf;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

using test::loadReal;

int64_t at2(const at::Tensor& t, int64_t i, int64_t j) { return t.data_ptr<int64_t>()[i * t.size(1) + j]; }

TEST(CharVocab, LayoutAndLookups) {
  const auto vocab = CharVocab::fromNames({"Rex", "rox"});
  EXPECT_EQ(vocab.size(), 6);
  EXPECT_EQ(vocab.debugString(), "_.eorx");
  EXPECT_EQ(vocab.toString(), "eorx");
  EXPECT_EQ(vocab.charAt(CharVocab::kPadIndex), '\0');
  EXPECT_EQ(vocab.charAt(CharVocab::kStopIndex), '.');
  EXPECT_EQ(vocab.indexOf('.'), CharVocab::kStopIndex);
  EXPECT_EQ(vocab.indexOf('e'), 2);
  EXPECT_EQ(vocab.indexOf('R'), vocab.indexOf('r')) << "the vocabulary is case-insensitive";
  EXPECT_TRUE(vocab.contains('X'));
  EXPECT_FALSE(vocab.contains('a'));
  EXPECT_EQ(vocab.encode("Rex"), (std::vector<int64_t>{4, 2, 5}));
  EXPECT_EQ(vocab.decode({0, 0, 4, 2, 5, 1, 3}), "rex") << "padding skipped, stops at the stop";
  EXPECT_EQ(CharVocab().size(), 2);
}

TEST(CharVocab, Errors) {
  const auto vocab = CharVocab::fromNames({"Rex"});
  auto message = errorOf([&] { vocab.indexOf('a'); });
  EXPECT_HAS(message, "'a'");
  EXPECT_HAS(message, "_.erx");
  message = errorOf([&] { vocab.encode("Rax"); });
  EXPECT_HAS(message, "'a'");
  EXPECT_HAS(message, "position 1");
  EXPECT_HAS(errorOf([&] { vocab.charAt(5); }), "5");
  EXPECT_HAS(errorOf([&] { vocab.charAt(-1); }), "-1");
  EXPECT_HAS(errorOf([&] { vocab.decode({0, 9}); }), "9");
  message = errorOf([] { CharVocab::fromNames({"Rex", "R2D2"}); });
  EXPECT_HAS(message, "R2D2");
  EXPECT_HAS(message, "'2'");
  EXPECT_HAS(errorOf([] { CharVocab::fromNames({"Zo\xC3\xAB"}); }), "byte 0xc3");
  EXPECT_HAS(errorOf([] { CharVocab::fromString("abca"); }), "twice");
  EXPECT_HAS(errorOf([] { CharVocab::fromString("ab."); }), "'.'");
}

TEST(CharVocab, SerialisationRoundTrip) {
  const auto vocab = CharVocab::fromNames({"Mary-Lou", "O'Neil Rex"});
  EXPECT_EQ(vocab.toString(), " '-aeilmnoruxy");  // byte order: space, apostrophe, hyphen, letters
  const auto back = CharVocab::fromString(vocab.toString());
  EXPECT_EQ(back, vocab);
  for (int64_t i = 0; i < vocab.size(); ++i) EXPECT_EQ(back.charAt(i), vocab.charAt(i));
  // The order is restored as saved, even when it is not sorted.
  const auto custom = CharVocab::fromString("zya");
  EXPECT_EQ(custom.indexOf('z'), 2);
  EXPECT_EQ(custom.indexOf('a'), 4);
  EXPECT_NE(custom, CharVocab::fromString("ayz"));
}

TEST(CharVocab, RealSourcesFitTheWorkloadAndRoundTrip) {
  const Names sources[] = {
      {names::kFakerPets}, {names::kWamerican}, {names::kFaker}, {names::kWamerican, names::kFaker}};
  for (const auto& source : sources) {
    const auto names = loadReal(source);
    ASSERT_FALSE(names.empty());
    const auto vocab = CharVocab::fromNames(names);
    EXPECT_LE(vocab.size(), kMaxVocabSize) << vocab.debugString();
    EXPECT_GE(vocab.size(), 2 + 20) << "most letters occur: " << vocab.debugString();
    for (const auto& name : names) ASSERT_EQ(vocab.decode(vocab.encode(name)), lower(name));
    EXPECT_EQ(CharVocab::fromString(vocab.toString()), vocab);
  }
}

TEST(CharWindows, RexWithWindowFour) {
  const auto vocab = CharVocab::fromNames({"Rex"});
  const auto w = makeWindows({"Rex"}, vocab, 4);
  ASSERT_EQ(w.inputs.scalar_type(), at::kLong);
  ASSERT_EQ(w.targets.scalar_type(), at::kLong);
  ASSERT_EQ(w.inputs.sizes(), (std::vector<int64_t>{4, 4}));  // r, e, x and the stop
  ASSERT_EQ(w.targets.sizes(), (std::vector<int64_t>{4, 4}));
  const int64_t P = CharVocab::kPadIndex, S = CharVocab::kStopIndex, I = kIgnoreTarget;
  const int64_t r = vocab.indexOf('r'), e = vocab.indexOf('e'), x = vocab.indexOf('x');
  // seq = _ _ _ _ r e x .
  const int64_t inputs[4][4] = {{P, P, P, P}, {P, P, P, r}, {P, P, r, e}, {P, r, e, x}};
  const int64_t targets[4][4] = {{I, I, I, r}, {I, I, r, e}, {I, r, e, x}, {r, e, x, S}};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(at2(w.inputs, i, j), inputs[i][j]) << "inputs[" << i << "][" << j << "]";
      EXPECT_EQ(at2(w.targets, i, j), targets[i][j]) << "targets[" << i << "][" << j << "]";
    }
  }
}

TEST(CharWindows, OrderAndShortWindows) {
  const auto vocab = CharVocab::fromNames({"ab", "c"});
  const auto w = makeWindows({"ab", "C"}, vocab, 1);
  const int64_t a = vocab.indexOf('a'), b = vocab.indexOf('b'), c = vocab.indexOf('c');
  const int64_t S = CharVocab::kStopIndex;
  ASSERT_EQ(w.inputs.sizes(), (std::vector<int64_t>{5, 1}));
  const int64_t inputs[5] = {CharVocab::kPadIndex, a, b, CharVocab::kPadIndex, c};
  const int64_t targets[5] = {a, b, S, c, S};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(at2(w.inputs, i, 0), inputs[i]) << i;
    EXPECT_EQ(at2(w.targets, i, 0), targets[i]) << i;
  }
}

TEST(CharWindows, MaskingOnRealNames) {
  const auto names = loadReal({names::kFakerPets});
  ASSERT_FALSE(names.empty());
  const auto vocab = CharVocab::fromNames(names);
  const int window = 16;
  const auto w = makeWindows(names, vocab, window);
  int64_t expected = 0;
  for (const auto& n : names) expected += static_cast<int64_t>(n.size()) + 1;
  ASSERT_EQ(w.inputs.size(0), expected);
  ASSERT_EQ(w.inputs.size(1), window);
  int64_t stops = 0, real = 0;
  for (int64_t i = 0; i < expected; ++i) {
    // The last target is always real: a character or the stop.
    EXPECT_NE(at2(w.targets, i, window - 1), kIgnoreTarget);
    stops += at2(w.targets, i, window - 1) == CharVocab::kStopIndex;
    for (int64_t j = 0; j < window; ++j) {
      const int64_t in = at2(w.inputs, i, j), target = at2(w.targets, i, j);
      ASSERT_GE(in, 0);
      ASSERT_LT(in, vocab.size());
      ASSERT_NE(in, CharVocab::kStopIndex) << "the stop is never an input";
      ASSERT_NE(target, CharVocab::kPadIndex) << "padding is never a target";
      ASSERT_TRUE(target == kIgnoreTarget || (target >= 1 && target < vocab.size()));
      real += target != kIgnoreTarget;
      // Targets are the inputs shifted by one; masked exactly where that is padding.
      if (j + 1 < window) {
        const int64_t next = at2(w.inputs, i, j + 1);
        ASSERT_EQ(target, next == CharVocab::kPadIndex ? kIgnoreTarget : next);
      }
    }
  }
  EXPECT_EQ(stops, static_cast<int64_t>(names.size())) << "one stop-target sample per name";
  EXPECT_GT(real, expected);
}

TEST(CharWindows, Errors) {
  const auto vocab = CharVocab::fromNames({"Rex"});
  EXPECT_HAS(errorOf([&] { makeWindows({"Rex"}, vocab, 0); }), "window");
  EXPECT_HAS(errorOf([&] { makeWindows({}, vocab, 4); }), "empty");
  EXPECT_HAS(errorOf([&] { makeWindows({"Rex", ""}, vocab, 4); }), "name 1 is empty");
  EXPECT_HAS(errorOf([&] { makeWindows({"Max"}, vocab, 4); }), "'M'");
}

TEST(Capitalise, Words) {
  EXPECT_EQ(capitalise("rex"), "Rex");
  EXPECT_EQ(capitalise("mary-lou o'neil"), "Mary-Lou O'neil");
  EXPECT_EQ(capitalise("SIR PAWS"), "Sir Paws");
  EXPECT_EQ(capitalise(""), "");
}

}  // namespace
}  // namespace lockstep
