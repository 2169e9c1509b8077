// store_impl.h — the backend store behind lockstep::Store (c10d stays in comm/).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace lockstep::detail {

struct StoreImpl {
  c10::intrusive_ptr<c10d::Store> store;
  std::string description;  // "tcp://host:port" or "memory"
};

}  // namespace lockstep::detail
