// lockstep/data/char_dataset.h — names as next-character prediction windows.
//
// Contract:
// - The model is case-insensitive: CharVocab lowercases ASCII letters when it
//   encodes, and everything it decodes is lower case (capitalise() is for
//   display). Names may hold only letters, space, hyphen and apostrophe (what
//   loadNames returns), so a vocabulary has at most 2 + 26 + 3 = 31 entries,
//   within the charlstm workload's limit of 32 (kMaxVocabSize).
// - Index 0 is padding ('\0', shown '_'), index 1 the stop character '.', then
//   the characters that occur, in byte order. toString()/fromString() save and
//   restore that order exactly (for checkpoints), so indices never shift.
// - makeWindows builds, per name, seq = window x PAD + encode(name) + STOP and
//   one sample per real character and the stop: inputs = seq[t-window, t),
//   targets = seq[t-window+1, t+1] with PAD targets replaced by kIgnoreTarget,
//   so the loss covers every real position and never predicts padding.
// - Unknown characters, bad indices and bad windows throw lockstep::Error.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {

/// Target value that the loss ignores (cross_entropy's default ignore_index).
inline constexpr int64_t kIgnoreTarget = -100;
/// The charlstm workload's vocabulary bound.
inline constexpr int64_t kMaxVocabSize = 32;

class CharVocab {
 public:
  static constexpr int64_t kPadIndex = 0;
  static constexpr int64_t kStopIndex = 1;
  static constexpr char kPad = '\0';
  static constexpr char kStop = '.';
  /// The characters a name may contain (after lowercasing).
  static constexpr const char* kAlphabet = " '-abcdefghijklmnopqrstuvwxyz";

  /// Padding and stop only.
  CharVocab();
  /// Padding, stop, and the sorted set of (lowercased) characters of `names`.
  /// Throws lockstep::Error naming the name for a character outside kAlphabet.
  static CharVocab fromNames(const std::vector<std::string>& names);
  /// Restores a vocabulary from toString(); throws for duplicates or characters outside kAlphabet.
  static CharVocab fromString(const std::string& serialised);

  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  bool contains(char c) const;
  /// The index of `c` (letters in either case); throws lockstep::Error when not in the vocabulary.
  int64_t indexOf(char c) const;
  /// The character at `index` (kPad for 0, kStop for 1); throws when out of range.
  char charAt(int64_t index) const;
  /// One index per character of `text`, lowercased; throws naming the character and its position.
  std::vector<int64_t> encode(const std::string& text) const;
  /// The characters of `indices`, skipping padding and ending before the first stop.
  std::string decode(const std::vector<int64_t>& indices) const;

  /// The characters after pad and stop, in index order: " '-abc...". Saved in checkpoints.
  std::string toString() const;
  /// Every entry with padding shown as '_': "_. '-abc...".
  std::string debugString() const;

  bool operator==(const CharVocab& other) const { return chars_ == other.chars_; }
  bool operator!=(const CharVocab& other) const { return !(*this == other); }

 private:
  void add(char c);

  std::string chars_;     // index -> character
  int16_t index_[256]{};  // (unsigned char) -> index + 1; 0 = absent
};

struct CharWindows {
  at::Tensor inputs;   ///< int64 [N, window]: vocabulary indices
  at::Tensor targets;  ///< int64 [N, window]: next indices, kIgnoreTarget where that is padding
};

/// The samples of every name in order (name by name, position by position).
/// Names are lowercased; `names` must be non-empty, each name non-empty; window >= 1.
CharWindows makeWindows(const std::vector<std::string>& names, const CharVocab& vocab, int window = 16);

/// "rex" -> "Rex", "mary-lou o'neil" -> "Mary-Lou O'neil": for showing generated names.
std::string capitalise(const std::string& name);

}  // namespace lockstep
