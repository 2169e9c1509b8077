// The scoped CPU autocast of nn/precision.h.
#include "lockstep/nn/precision.h"

#include <ATen/autocast_mode.h>

#include "lockstep/common/enum_names.h"

namespace lockstep {

namespace {
constexpr EnumName<Precision> kPrecisionNames[] = {{Precision::kFp32, "fp32"},
                                                   {Precision::kBf16, "bf16"},
                                                   {Precision::kFp32, "float32"},
                                                   {Precision::kBf16, "bfloat16"}};
}  // namespace

const char* toString(Precision precision) { return enumName(kPrecisionNames, precision); }

Precision parsePrecision(const std::string& text, const std::string& what) {
  return parseEnum(kPrecisionNames, text, what);
}

AutocastGuard::AutocastGuard(Precision precision) : active_(precision == Precision::kBf16) {
  if (!active_) return;
  previousEnabled_ = at::autocast::is_cpu_enabled();
  previousDtype_ = static_cast<int>(at::autocast::get_autocast_cpu_dtype());
  at::autocast::set_cpu_enabled(true);
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // The cast cache holds bf16 copies of the weights for the scope; they are
  // stale once the optimizer steps, so the outermost guard drops them.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_cpu_enabled(previousEnabled_);
  at::autocast::set_autocast_cpu_dtype(static_cast<at::ScalarType>(previousDtype_));
}

}  // namespace lockstep
