#include "lockstep/comm/store/store.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <fmt/format.h>

#include "comm/store/store_impl.h"
#include "comm/store/tcp_store.h"
#include "lockstep/common/error.h"

namespace lockstep {

Store Store::tcp(const TcpStoreOptions& o) {
  LOCKSTEP_CHECK(o.port >= 0 && o.port < 65536, "master port ", o.port, " is out of range 1..65535");
  LOCKSTEP_CHECK(o.port > 0 || o.isServer, "master port 0 (any free port) only works for the server");
  LOCKSTEP_CHECK(!o.token.empty(), "the rendezvous store needs a job token (TcpStoreOptions::token)");
  auto impl = std::make_shared<detail::StoreImpl>();
  int port = o.port;
  if (o.isServer) {
    impl->server = detail::startStoreServer(o.bindAddr.empty() ? o.host : o.bindAddr, o.port, o.token);
    port = detail::serverPort(*impl->server);
  }
  auto client = c10::make_intrusive<detail::TcpStoreClient>(o.host, port, o.token, o.timeout);
  impl->description = client->address();
  impl->store = client;
  return Store(impl);
}

int Store::port() const {
  if (!impl_->server) return -1;
  return detail::serverPort(*impl_->server);
}

int Store::refusedConnections() const {
  if (!impl_->server) return 0;
  return detail::refusedConnections(*impl_->server);
}

std::string Store::description() const { return impl_->description; }

Store Store::inMemory(std::chrono::milliseconds timeout) {
  auto impl = std::make_shared<detail::StoreImpl>();
  impl->store = c10::make_intrusive<c10d::HashStore>();
  impl->store->setTimeout(timeout);
  impl->description = "memory";
  return Store(impl);
}

void Store::set(const std::string& key, const std::vector<uint8_t>& value) { impl_->store->set(key, value); }

std::vector<uint8_t> Store::get(const std::string& key) { return impl_->store->get(key); }

std::optional<std::vector<uint8_t>> Store::tryGet(const std::string& key) {
  if (!impl_->store->check({key})) return std::nullopt;
  return impl_->store->get(key);
}

int64_t Store::add(const std::string& key, int64_t delta) { return impl_->store->add(key, delta); }

Store Store::withPrefix(const std::string& prefix) const {
  auto impl = std::make_shared<detail::StoreImpl>();
  impl->store = c10::make_intrusive<c10d::PrefixStore>(prefix, impl_->store);
  impl->server = impl_->server;
  impl->description = impl_->description + "/" + prefix;
  return Store(impl);
}

}  // namespace lockstep
