#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include "common/socket_address.h"
#include "launch/child_process.h"
#include "launch/launch_commands.h"
#include "lockstep/common/error.h"

namespace lockstep::detail {
namespace {

/// Binds a TCP socket to host:port; returns the bound port, or -1 (errno set).
int tryBind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) throw ConfigError("cannot resolve master address '" + host + "': " + ::gai_strerror(rc));
  int result = -1;
  for (addrinfo* a = found; a && result < 0; a = a->ai_next) {
    detail::Fd sock(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!sock.valid()) continue;
    // As the store server does: connections of an earlier run in TIME_WAIT do not make the port busy.
    int one = 1;
    ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(sock.get(), a->ai_addr, a->ai_addrlen) != 0) continue;
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) continue;
    result = detail::portOf(bound);
  }
  ::freeaddrinfo(found);
  return result;
}

/// The first port of the kernel's ephemeral range (where bind(0) and outgoing connections take theirs).
int ephemeralPortsFrom() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return range >> low && low > 0 ? low : 32768;
}

}  // namespace

int pickFreePort(const std::string& host) {
  // Between this choice and the worker that listens on the port, any outgoing connection on the
  // machine could take a port of the ephemeral range (a busy test suite's Gloo connections once
  // did): look below it first, where only an explicit bind can collide.
  constexpr int kLowest = 10000;
  const int below = ephemeralPortsFrom();
  if (below > kLowest) {
    std::mt19937 draw(std::random_device{}());
    std::uniform_int_distribution<int> ports(kLowest, below - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const int port = ports(draw);
      if (tryBind(host, port) == port) return port;
    }
  }
  int port = tryBind(host, 0);
  if (port <= 0) throw Error("cannot find a free TCP port on " + host + ": " + std::strerror(errno));
  return port;
}

bool portIsFree(const std::string& host, int port) { return tryBind(host, port) == port; }

}  // namespace lockstep::detail
