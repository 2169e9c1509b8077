// The rendezvous store over real TCP: what it stores, whom it admits, where it listens.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "lockstep/comm/store/store.h"
#include "lockstep/common/comm_error.h"
#include "support/expect.h"

namespace lockstep {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

Store serve(const std::string& token, const std::string& host = "127.0.0.1", std::chrono::milliseconds timeout = 5s) {
  TcpStoreOptions o;
  o.host = host;
  o.port = 0;
  o.isServer = true;
  o.token = token;
  o.timeout = timeout;
  return Store::tcp(o);
}

Store join(int port, const std::string& token, const std::string& host = "127.0.0.1",
           std::chrono::milliseconds timeout = 5s) {
  TcpStoreOptions o;
  o.host = host;
  o.port = port;
  o.token = token;
  o.timeout = timeout;
  return Store::tcp(o);
}

/// Connects a plain TCP socket to the server, sends `payload`, returns what came back until it closed.
std::string rawExchange(int port, const std::string& payload) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::send(fd, payload.data(), payload.size(), MSG_NOSIGNAL), static_cast<ssize_t>(payload.size()));
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string received;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) received.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return received;
}

TEST(Store, OperationsOverTcp) {
  Store server = serve("secret");
  ASSERT_GT(server.port(), 0);
  Store client = join(server.port(), "secret");
  client.set("a", bytes("hello"));
  EXPECT_EQ(text(server.get("a")), "hello");
  EXPECT_EQ(client.add("n", 2), 2);
  EXPECT_EQ(server.add("n", 3), 5);
  EXPECT_EQ(text(client.get("n")), "5");
  EXPECT_FALSE(client.tryGet("missing").has_value());
  EXPECT_EQ(text(client.tryGet("a").value()), "hello");
  Store prefixed = client.withPrefix("job");
  prefixed.set("k", bytes("v"));
  EXPECT_EQ(text(server.get("job/k")), "v");
  // A get waits for the key that another rank sets later.
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    server.set("late", bytes("x"));
  });
  EXPECT_EQ(text(client.get("late")), "x");
  late.join();
  EXPECT_EQ(server.refusedConnections(), 0);
}

TEST(Store, WaitTimesOutAndTheConnectionStaysUsable) {
  Store server = serve("secret");
  Store client = join(server.port(), "secret", "127.0.0.1", 300ms);
  auto start = std::chrono::steady_clock::now();
  CommError e = test::commErrorOf([&] { client.get("never"); });
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(e.kind(), CommErrorKind::kTimeout) << e.what();
  EXPECT_HAS(std::string(e.what()), "timed out after 300 ms");
  EXPECT_GE(waited, 290ms);
  EXPECT_LT(waited, 5s);
  client.set("after", bytes("ok"));
  EXPECT_EQ(text(client.get("after")), "ok");
}

TEST(Store, WrongTokenIsRefusedAndLogged) {
  Store server = serve("the-real-token");
  CommError e = test::commErrorOf([&] { join(server.port(), "a-guess"); });
  EXPECT_EQ(e.kind(), CommErrorKind::kBackend);
  EXPECT_HAS(std::string(e.what()), "refused this process: wrong job token");
  EXPECT_HAS(std::string(e.what()), "LOCKSTEP_JOB_TOKEN");
  EXPECT_EQ(server.refusedConnections(), 1);
  // The refused attempt changed nothing: the right token still joins.
  Store client = join(server.port(), "the-real-token");
  client.set("k", bytes("v"));
  EXPECT_EQ(text(server.get("k")), "v");
}

TEST(Store, ForeignBytesAreRefusedWithoutTouchingTheData) {
  Store server = serve("secret");
  server.set("k", bytes("original"));
  // A client of another protocol (here an HTTP request) gets the greeting, then a refusal, then EOF.
  std::string answer =
      rawExchange(server.port(), std::string("GET / HTTP/1.1\r\nHost: x\r\n\r\n") + std::string(64, 'A'));
  EXPECT_EQ(answer.substr(0, 8), "LKSTORE1");
  EXPECT_HAS(answer, "does not speak lockstep's store protocol");
  // Well-formed framing with a forged proof is refused too.
  std::string forged = "LKSTORE1" + std::string(64, '\0');
  forged += std::string("\x01\x0a\x00\x00\x00", 5) + std::string(10, 'x');  // a "set" it hopes gets through
  answer = rawExchange(server.port(), forged);
  EXPECT_HAS(answer, "wrong job token");
  EXPECT_EQ(server.refusedConnections(), 2);
  EXPECT_EQ(text(server.get("k")), "original");
}

/// An IPv4 address of this host that is not loopback, if it has one.
std::string nonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char buffer[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buffer, sizeof(buffer));
    if (std::string(buffer).rfind("127.", 0) != 0) found = buffer;
  }
  ::freeifaddrs(list);
  return found;
}

TEST(Store, LoopbackMasterListensOnLoopbackOnly) {
  std::string other = nonLoopbackAddress();
  LOCKSTEP_SKIP_UNLESS(!other.empty(), "a non-loopback IPv4 address on this host");
  Store server = serve("secret");
  CommError e = test::commErrorOf([&] { join(server.port(), "secret", other, 500ms); });
  EXPECT_EQ(e.kind(), CommErrorKind::kTimeout) << e.what();
  EXPECT_HAS(std::string(e.what()), "cannot reach the master at tcp://" + other);
  // Given that address explicitly, it listens there.
  Store exposed = serve("secret", other);
  Store client = join(exposed.port(), "secret", other);
  client.set("k", bytes("v"));
  EXPECT_EQ(text(exposed.get("k")), "v");
}

TEST(Store, MissingTokenIsAConfigurationError) {
  TcpStoreOptions o;
  o.port = 0;
  o.isServer = true;
  EXPECT_HAS(test::errorOf([&] { Store::tcp(o); }), "needs a job token");
}

}  // namespace
}  // namespace lockstep
