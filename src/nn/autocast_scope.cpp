// The autocast state of nn/autocast_scope.h.
#include "nn/autocast_scope.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "lockstep/common/error.h"

namespace lockstep::detail {

namespace {

// LibTorch 2.4 replaced the per-device-type functions by ones taking the type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define LOCKSTEP_AUTOCAST_PER_DEVICE_API 1
#endif

void checkType(c10::DeviceType type) {
  LOCKSTEP_CHECK(type == c10::DeviceType::CPU || type == c10::DeviceType::CUDA,
                 "autocast: lockstep handles the CPU and CUDA device types, not ", c10::DeviceTypeName(type));
}

void setState(c10::DeviceType type, AutocastState state) {
#ifdef LOCKSTEP_AUTOCAST_PER_DEVICE_API
  at::autocast::set_autocast_enabled(type, state.enabled);
  at::autocast::set_autocast_dtype(type, state.dtype);
#else
  if (type == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(state.enabled);
    at::autocast::set_autocast_cpu_dtype(state.dtype);
  } else {
    at::autocast::set_enabled(state.enabled);
    at::autocast::set_autocast_gpu_dtype(state.dtype);
  }
#endif
}

}  // namespace

AutocastState autocastState(c10::DeviceType type) {
  checkType(type);
#ifdef LOCKSTEP_AUTOCAST_PER_DEVICE_API
  return {at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)};
#else
  if (type == c10::DeviceType::CPU) return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
  return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
#endif
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
