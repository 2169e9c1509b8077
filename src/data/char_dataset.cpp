#include "lockstep/data/char_dataset.h"

#include <ATen/ops/empty.h>  // the one op used: cheaper to compile than <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "lockstep/common/error.h"

namespace lockstep {
namespace {

char toLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
char toUpper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

bool inAlphabet(char c) { return c != '\0' && std::strchr(CharVocab::kAlphabet, c) != nullptr; }

/// A character as it reads in an error message.
std::string show(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7F) return fmt::format("'{}'", c);
  return fmt::format("byte 0x{:02x}", u);
}

}  // namespace

CharVocab::CharVocab() {
  add(kPad);
  add(kStop);
}

void CharVocab::add(char c) {
  index_[static_cast<unsigned char>(c)] = static_cast<int16_t>(chars_.size() + 1);
  chars_ += c;
}

CharVocab CharVocab::fromNames(const std::vector<std::string>& names) {
  bool seen[256] = {};
  for (const auto& name : names) {
    for (char raw : name) {
      const char c = toLower(raw);
      LOCKSTEP_CHECK(inAlphabet(c), "name \"", name, "\" has the character ", show(raw),
                     "; names may hold only letters, space, hyphen and apostrophe (loadNames drops the others)");
      seen[static_cast<unsigned char>(c)] = true;
    }
  }
  CharVocab vocab;
  for (int c = 0; c < 256; ++c) {
    if (seen[c]) vocab.add(static_cast<char>(c));
  }
  LOCKSTEP_ASSERT(vocab.size() <= kMaxVocabSize, "vocabulary of ", vocab.size(), " entries");
  return vocab;
}

CharVocab CharVocab::fromString(const std::string& serialised) {
  CharVocab vocab;
  for (char c : serialised) {
    LOCKSTEP_CHECK(inAlphabet(c), "serialised vocabulary \"", serialised, "\" has ", show(c),
                   ", expected only characters of \"", kAlphabet, "\"");
    LOCKSTEP_CHECK(!vocab.contains(c), "serialised vocabulary \"", serialised, "\" has ", show(c), " twice");
    vocab.add(c);
  }
  return vocab;
}

bool CharVocab::contains(char c) const { return index_[static_cast<unsigned char>(toLower(c))] != 0; }

int64_t CharVocab::indexOf(char c) const {
  const int16_t slot = index_[static_cast<unsigned char>(toLower(c))];
  LOCKSTEP_CHECK(slot != 0, "character ", show(c), " is not in the vocabulary \"", debugString(), "\"");
  return slot - 1;
}

char CharVocab::charAt(int64_t index) const {
  LOCKSTEP_CHECK(index >= 0 && index < size(), "vocabulary index ", index, " is out of range [0, ", size(), ")");
  return chars_[static_cast<size_t>(index)];
}

std::vector<int64_t> CharVocab::encode(const std::string& text) const {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (size_t k = 0; k < text.size(); ++k) {
    const int16_t slot = index_[static_cast<unsigned char>(toLower(text[k]))];
    LOCKSTEP_CHECK(slot != 0, "\"", text, "\": character ", show(text[k]), " at position ", k,
                   " is not in the vocabulary \"", debugString(), "\"");
    out.push_back(slot - 1);
  }
  return out;
}

std::string CharVocab::decode(const std::vector<int64_t>& indices) const {
  std::string out;
  for (int64_t index : indices) {
    const char c = charAt(index);
    if (index == kStopIndex) break;
    if (index != kPadIndex) out += c;
  }
  return out;
}

std::string CharVocab::toString() const { return chars_.substr(2); }

std::string CharVocab::debugString() const {
  std::string out = chars_;
  out[kPadIndex] = '_';
  return out;
}

CharWindows makeWindows(const std::vector<std::string>& names, const CharVocab& vocab, int window) {
  LOCKSTEP_CHECK(window >= 1, "window = ", window, ", expected >= 1");
  LOCKSTEP_CHECK(!names.empty(), "makeWindows: the list of names is empty");
  LOCKSTEP_CHECK(vocab.size() <= kMaxVocabSize, "vocabulary of ", vocab.size(), " entries, expected at most ",
                 kMaxVocabSize);
  std::vector<std::vector<int64_t>> encoded;
  encoded.reserve(names.size());
  int64_t samples = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    LOCKSTEP_CHECK(!names[i].empty(), "makeWindows: name ", i, " is empty");
    encoded.push_back(vocab.encode(names[i]));
    samples += static_cast<int64_t>(encoded.back().size()) + 1;  // every character and the stop
  }

  const auto w = static_cast<int64_t>(window);
  at::Tensor inputs = at::empty({samples, w}, at::kLong);
  at::Tensor targets = at::empty({samples, w}, at::kLong);
  int64_t* in = inputs.data_ptr<int64_t>();
  int64_t* out = targets.data_ptr<int64_t>();
  const auto ws = static_cast<size_t>(window);
  std::vector<int64_t> seq;
  for (const auto& code : encoded) {
    seq.assign(ws, CharVocab::kPadIndex);
    seq.insert(seq.end(), code.begin(), code.end());
    seq.push_back(CharVocab::kStopIndex);
    for (size_t t = ws; t < seq.size(); ++t) {
      for (size_t j = 0; j < ws; ++j) {
        *in++ = seq[t - ws + j];
        const int64_t next = seq[t - ws + 1 + j];
        *out++ = next == CharVocab::kPadIndex ? kIgnoreTarget : next;
      }
    }
  }
  LOCKSTEP_ASSERT(in == inputs.data_ptr<int64_t>() + samples * w, "window count mismatch");
  return {inputs, targets};
}

std::string capitalise(const std::string& name) {
  std::string out = name;
  bool wordStart = true;
  for (char& c : out) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (letter) {
      c = wordStart ? toUpper(c) : toLower(c);
      wordStart = false;
    } else {
      wordStart = c == ' ' || c == '-';
    }
  }
  return out;
}

}  // namespace lockstep
