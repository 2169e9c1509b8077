// The autocast state of nn/autocast_scope.h.
#include "nn/autocast_scope.h"

#include <ATen/autocast_mode.h>

#include "lockstep/common/error.h"

namespace lockstep::detail {

namespace {

void checkType(c10::DeviceType type) {
  LOCKSTEP_CHECK(type == c10::DeviceType::CPU || type == c10::DeviceType::CUDA,
                 "autocast: lockstep handles the CPU and CUDA device types, not ", c10::DeviceTypeName(type));
}

void setState(c10::DeviceType type, AutocastState state) {
  at::autocast::set_autocast_enabled(type, state.enabled);
  at::autocast::set_autocast_dtype(type, state.dtype);
}

}  // namespace

AutocastState autocastState(c10::DeviceType type) {
  checkType(type);
  return {at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)};
}

AutocastScope::AutocastScope(c10::DeviceType type, AutocastState state) : type_(type), active_(state.enabled) {
  if (!active_) return;
  previous_ = autocastState(type);
  setState(type, state);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  setState(type_, previous_);
}

}  // namespace lockstep::detail
