// store_impl.h — the backend store behind lockstep::Store (c10d stays in comm/).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>

namespace lockstep::detail {

class StoreServer;

struct StoreImpl {
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<StoreServer> server;  // rank 0's server, kept alive by every view of the store
  std::string description;  // "tcp://host:port" or "memory"
};

}  // namespace lockstep::detail
