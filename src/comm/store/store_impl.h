// store_impl.h — the backend store behind lockstep::Store (c10d stays in comm/).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>

#include "lockstep/comm/store/store.h"

namespace lockstep::detail {

class StoreServer;

struct StoreImpl {
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<StoreServer> server;  // rank 0's server, kept alive by every view of the store
  std::string description;              // "tcp://host:port" or "memory"
};

/// What only the communicators may see of a Store.
struct StoreAccess {
  static const std::shared_ptr<StoreImpl>& impl(const Store& store) { return store.impl_; }
};

}  // namespace lockstep::detail
