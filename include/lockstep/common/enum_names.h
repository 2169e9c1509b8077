// lockstep/common/enum_names.h — an enum's names, written once as a table.
//
//   constexpr EnumName<GradCompression> kCompressionNames[] = {
//       {GradCompression::kNone, "none"}, {GradCompression::kFp16, "fp16"}, {GradCompression::kBf16, "bf16"}};
//   const char* toString(GradCompression c) { return enumName(kCompressionNames, c); }
//   parseEnum(kCompressionNames, "bf16", "ddp.compression")   // GradCompression::kBf16
//
// The first entry of a value is its name; later entries of the same value are
// aliases parseEnum also accepts. Parsing ignores case. An unknown name throws
// ConfigError: "<what> '<text>' is unknown; expected none, fp16 or bf16".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace lockstep {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

namespace detail {
bool equalIgnoringCase(const std::string& a, const char* b);
[[noreturn]] void throwUnknownName(const std::string& what, const std::string& text,
                                   const std::vector<const char*>& names);
}  // namespace detail

template <typename E, size_t N>
const char* enumName(const EnumName<E> (&names)[N], E value) {
  for (const auto& entry : names) {
    if (entry.value == value) return entry.name;
  }
  return "?";
}

template <typename E, size_t N>
E parseEnum(const EnumName<E> (&names)[N], const std::string& text, const std::string& what) {
  for (const auto& entry : names) {
    if (detail::equalIgnoringCase(text, entry.name)) return entry.value;
  }
  std::vector<const char*> canonical;
  for (size_t i = 0; i < N; ++i) {
    if (enumName(names, names[i].value) == names[i].name) canonical.push_back(names[i].name);
  }
  detail::throwUnknownName(what, text, canonical);
}

}  // namespace lockstep
