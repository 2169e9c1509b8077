// The rendezvous store against people who are not its clients, with raw
// sockets: a fake master, silent and garbage connections, oversized requests,
// a flood of a thousand connections, running out of file descriptors.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "comm/store/store_wire.h"
#include "comm/store/tcp_store.h"
#include "launch/launch_commands.h"
#include "lockstep/comm/store/store.h"
#include "lockstep/common/comm_error.h"
#include "lockstep/common/token.h"
#include "support/expect.h"
#include "support/subprocess.h"
#include "support/tiny_config.h"

namespace lockstep {
namespace {

using namespace std::chrono_literals;
using namespace detail::store_wire;
using Clock = std::chrono::steady_clock;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

Store join(int port, const std::string& token, std::chrono::milliseconds timeout = 5s) {
  TcpStoreOptions o;
  o.port = port;
  o.token = token;
  o.timeout = timeout;
  return Store::tcp(o);
}

sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

/// A connected plain TCP socket whose reads give up after `readLimit`.
int connectRaw(int port, std::chrono::milliseconds readLimit = 5s) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = loopback(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  timeval tv{static_cast<time_t>(readLimit.count() / 1000), static_cast<suseconds_t>(readLimit.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void sendRaw(int fd, const std::string& data) {
  ASSERT_EQ(::send(fd, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
}

std::string readExactlyRaw(int fd, size_t n) {
  std::string out;
  char buffer[4096];
  while (out.size() < n) {
    ssize_t got = ::recv(fd, buffer, std::min(sizeof(buffer), n - out.size()), 0);
    if (got <= 0) break;
    out.append(buffer, static_cast<size_t>(got));
  }
  return out;
}

/// Everything until the peer closes (or the read limit passes).
std::string readUntilClosed(int fd) {
  std::string out;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) out.append(buffer, static_cast<size_t>(n));
  return out;
}

/// Reads the greeting and proves `token` as a client does; the server's answer is left unread.
std::string proveToken(int fd, const std::string& token) {
  std::string greeting = readExactlyRaw(fd, kGreetingSize);
  EXPECT_EQ(greeting.size(), kGreetingSize);
  std::string clientNonce(kNonceSize, 'n');
  std::string proof(kMagic, sizeof(kMagic));
  proof += clientNonce;
  proof += toString(hmacSha256(token, macInput("client", greeting.substr(sizeof(kMagic)), clientNonce)));
  sendRaw(fd, proof);
  return greeting;
}

std::string frame(Op op, const std::string& payload) {
  std::string out(1, static_cast<char>(op));
  putBytes(out, payload);
  return out;
}

TEST(StoreSecurity, FakeMasterThatCannotProveTheTokenIsRefused) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = loopback(0);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string afterProof;
  // The fake speaks the protocol and admits anyone, but does not know the token: its HMAC is made with a guess.
  std::thread fake([&] {
    int fd = ::accept(listener, nullptr, nullptr);
    std::string nonce(kNonceSize, 's');
    std::string greeting(kMagic, sizeof(kMagic));
    sendRaw(fd, greeting + nonce);
    std::string proof = readExactlyRaw(fd, kProofSize);
    std::string admit(1, static_cast<char>(kOk));
    admit += toString(hmacSha256("a-guess", macInput("server", nonce, proof.substr(sizeof(kMagic), kNonceSize))));
    sendRaw(fd, admit);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    afterProof = readUntilClosed(fd);  // what the client sent the fake after it was "admitted"
    ::close(fd);
  });
  CommError e = test::commErrorOf([&] { join(ntohs(addr.sin_port), "the-real-token"); });
  fake.join();
  ::close(listener);
  EXPECT_EQ(e.kind(), CommErrorKind::kBackend) << e.what();
  EXPECT_HAS(std::string(e.what()), "could not prove it knows the job token; refusing to join it");
  EXPECT_EQ(afterProof, "") << "the client sent a request to a master it could not trust";
}

TEST(StoreSecurity, ConnectionThatDoesNotProveTheTokenInTimeIsDropped) {
  detail::StoreLimits limits;
  limits.handshakeTimeout = 300ms;
  auto server = detail::startStoreServer("127.0.0.1", 0, "secret", limits);
  int port = detail::serverPort(*server);
  int silent = connectRaw(port);
  int halfProof = connectRaw(port);
  sendRaw(halfProof, std::string(kMagic, sizeof(kMagic)) + "partial");
  auto start = Clock::now();
  std::string answer = readUntilClosed(silent);
  auto silentClosedAfter = Clock::now() - start;
  std::string halfAnswer = readUntilClosed(halfProof);
  auto halfClosedAfter = Clock::now() - start;
  ::close(silent);
  ::close(halfProof);
  EXPECT_EQ(answer.substr(0, 8), "LKSTORE1");
  EXPECT_HAS(answer, "did not prove the job token within 300 ms");
  EXPECT_HAS(halfAnswer, "did not prove the job token within 300 ms");
  EXPECT_GE(silentClosedAfter, 250ms);
  EXPECT_LT(silentClosedAfter, 1s);
  EXPECT_LT(halfClosedAfter, 1s);
  EXPECT_EQ(detail::refusedConnections(*server), 2);
}

TEST(StoreSecurity, ProofIsCheckedAtItsSizeAndNothingMoreIsBuffered) {
  auto server = detail::startStoreServer("127.0.0.1", 0, "secret");
  int fd = connectRaw(server ? detail::serverPort(*server) : 0);
  readExactlyRaw(fd, kGreetingSize);
  // A wrong proof followed by 4 MiB that a server reading "everything available" would buffer.
  std::string junk = std::string(kMagic, sizeof(kMagic)) + std::string(kNonceSize + kMacSize, 'x');
  std::thread sender([&] {
    std::string more(4 << 20, 'y');
    (void)::send(fd, (junk + more).data(), junk.size() + more.size(), MSG_NOSIGNAL);
  });
  std::string answer = readUntilClosed(fd);
  sender.join();
  ::close(fd);
  EXPECT_HAS(answer, "wrong job token");
  auto stats = detail::serverStats(*server);
  EXPECT_LT(stats.peakBufferedBytes, 4096u) << "the server buffered what followed the proof";
}

TEST(StoreSecurity, OversizedRequestIsRefusedBeforeItsBytesArrive) {
  auto server = detail::startStoreServer("127.0.0.1", 0, "secret");
  int fd = connectRaw(detail::serverPort(*server), 2s);
  proveToken(fd, "secret");
  ASSERT_EQ(readExactlyRaw(fd, 1 + kMacSize).size(), 1 + kMacSize);
  std::string header(1, static_cast<char>(kSet));
  putU32(header, kMaxFrame + 1);  // and no body: the refusal must not wait for 256 MiB
  auto start = Clock::now();
  sendRaw(fd, header);
  std::string answer = readUntilClosed(fd);
  ::close(fd);
  ASSERT_FALSE(answer.empty());
  EXPECT_EQ(static_cast<uint8_t>(answer[0]), kFailed);
  EXPECT_HAS(answer, "a request of 268435457 bytes exceeds the limit of 268435456");
  EXPECT_LT(Clock::now() - start, 1s);
}

TEST(StoreLimits, StoredBytesAreBoundedWithAClearErrorAndTheDataIntact) {
  detail::StoreLimits limits;
  limits.maxStoredBytes = 4096;
  auto server = detail::startStoreServer("127.0.0.1", 0, "secret", limits);
  int port = detail::serverPort(*server);
  Store client = join(port, "secret");
  client.set("kept", bytes(std::string(1000, 'k')));
  CommError e = test::commErrorOf([&] { client.set("big", bytes(std::string(5000, 'b'))); });
  EXPECT_EQ(e.kind(), CommErrorKind::kBackend);
  EXPECT_HAS(std::string(e.what()), "setting 'big' to 5000 bytes would make the store hold");
  EXPECT_HAS(std::string(e.what()), "over its limit of 4096");
  // Overwriting and deleting give the bytes back: 30 rounds of 1000 bytes fit in 4096.
  Store other = join(port, "secret");
  for (int i = 0; i < 30; ++i) other.set("kept", bytes(std::string(1000, static_cast<char>('a' + i % 26))));
  EXPECT_EQ(text(other.get("kept")), std::string(1000, 'a' + 29 % 26));
  EXPECT_LE(detail::serverStats(*server).storedBytes, 4096u);
}

TEST(StoreLimits, AWaitWithoutEndDoesNotOverflowItsDeadline) {
  auto server = detail::startStoreServer("127.0.0.1", 0, "secret");
  int port = detail::serverPort(*server);
  int fd = connectRaw(port, 400ms);
  proveToken(fd, "secret");
  ASSERT_EQ(readExactlyRaw(fd, 1 + kMacSize).size(), 1 + kMacSize);
  std::string get;
  putU64(get, ~uint64_t{0});  // the largest timeout the wire can carry
  putBytes(get, "later");
  sendRaw(fd, frame(kGet, get));
  EXPECT_EQ(readExactlyRaw(fd, 1), "") << "a wait of 2^64-1 ms answered at once: its deadline overflowed";
  Store setter = join(port, "secret");
  setter.set("later", bytes("value"));
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string answer = readExactlyRaw(fd, 1 + 4 + 5);
  ::close(fd);
  ASSERT_EQ(answer.size(), 10u);
  EXPECT_EQ(static_cast<uint8_t>(answer[0]), kOk);
  EXPECT_EQ(answer.substr(5), "value");
}

/// Raises this process's descriptor limit to what the flood needs (the hard limit permitting).
bool haveDescriptors(rlim_t wanted) {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur >= wanted) return true;
  limit.rlim_cur = std::min(limit.rlim_max, wanted);
  ::setrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur >= wanted;
}

/// Opens `count` connections to `port`: a third say nothing, a third send half a proof, a third send garbage.
std::vector<int> flood(int port, int count, const std::atomic<bool>& stop) {
  std::vector<int> fds;
  for (int i = 0; i < count && !stop; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr = loopback(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {  // not listening yet
      ::close(fd);
      --i;
      std::this_thread::sleep_for(5ms);
      continue;
    }
    if (i % 3 == 1) (void)::send(fd, "LKSTORE1half", 12, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (i % 3 == 2) (void)::send(fd, std::string(300, '\x7f').data(), 300, MSG_NOSIGNAL | MSG_DONTWAIT);
    fds.push_back(fd);
  }
  return fds;
}

TEST(StoreLimits, AThousandIdleAndGarbageConnectionsDoNotKeepAClientOut) {
  LOCKSTEP_SKIP_UNLESS(haveDescriptors(4096), "4096 file descriptors (RLIMIT_NOFILE)");
  detail::StoreLimits limits;  // the defaults a job gets
  auto server = detail::startStoreServer("127.0.0.1", 0, "secret", limits);
  int port = detail::serverPort(*server);
  std::atomic<bool> stop{false};
  std::vector<int> first = flood(port, 500, stop);
  // A client joins while the other 500 arrive.
  std::vector<int> second;
  std::thread more([&] { second = flood(port, 500, stop); });
  auto start = Clock::now();
  Store client = join(port, "secret", 20s);
  client.set("k", bytes("v"));
  auto joinedAfter = Clock::now() - start;
  more.join();
  Store late = join(port, "secret", 20s);  // and after all 1,000
  EXPECT_EQ(text(late.get("k")), "v");
  auto stats = detail::serverStats(*server);
  for (int fd : first) ::close(fd);
  for (int fd : second) ::close(fd);
  EXPECT_LT(joinedAfter, 5s);
  EXPECT_LE(stats.peakPending, limits.maxPendingConnections);
  EXPECT_LE(stats.peakConnections, limits.maxPendingConnections + 4);  // + the clients
  // Each stranger holds at most its greeting, a refusal and 72 bytes of proof.
  EXPECT_LT(stats.peakBufferedBytes, limits.maxPendingConnections * 512);
  EXPECT_GE(stats.refused, 1000 - static_cast<int>(limits.maxPendingConnections));
}

TEST(StoreLimits, ATwoWorkerRunJoinsAndTrainsThroughAFlood) {
  LOCKSTEP_SKIP_UNLESS(haveDescriptors(4096), "4096 file descriptors (RLIMIT_NOFILE)");
  std::string dir = test::makeTempDir();
  std::ofstream(dir + "/tiny.yaml") << test::tinyNamesConfig("  max_steps: 6\n  log_every: 2\n");
  int port = detail::pickFreePort("127.0.0.1");
  std::atomic<bool> stop{false};
  std::vector<int> held;
  std::thread attacker([&] { held = flood(port, 1000, stop); });  // from before rank 0 listens until it is done
  std::string bin = test::lockstepBin();
  test::ProcessOptions o;
  o.timeout = 180s;
  auto r = test::runProcess({"sh", "-c",
                             "cd '" + dir + "' && exec '" + bin + "' run -np 2 --master-port " + std::to_string(port) +
                                 " --comm-timeout 60 -- '" + bin + "' train tiny.yaml"},
                            o);
  stop = true;
  attacker.join();
  for (int fd : held) ::close(fd);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_HAS(r.out + r.err, "step 6");
  EXPECT_HAS(r.err, "rendezvous store: refused");  // the flood reached the store and was turned away
  EXPECT_GE(held.size(), 500u) << "the flood ended before the run did";
}

/// Takes every free descriptor number up to one past the highest in use: the fillers, and that limit.
std::vector<int> fillDescriptorHoles(rlim_t& limit) {
  int highest = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') highest = std::max(highest, std::atoi(entry->d_name));
  }
  ::closedir(dir);
  std::vector<int> fillers;
  for (int fd = ::dup(0); fd >= 0; fd = ::dup(0)) {  // dup takes the lowest free number
    fillers.push_back(fd);
    if (fd > highest) break;
  }
  limit = static_cast<rlim_t>(fillers.back() + 1);
  return fillers;
}

double cpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

TEST(StoreLimits, OutOfDescriptorsTheServerBacksOffInsteadOfSpinning) {
  auto server = detail::startStoreServer("127.0.0.1", 0, "secret");
  int port = detail::serverPort(*server);
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) fds.push_back(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  rlimit saved{};
  ::getrlimit(RLIMIT_NOFILE, &saved);
  rlimit tight = saved;
  std::vector<int> fillers = fillDescriptorHoles(tight.rlim_cur);  // the server cannot accept: all are taken
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  ASSERT_LT(::dup(0), 0) << "a descriptor was left free";
  for (int fd : fds) {
    sockaddr_in addr = loopback(port);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);  // queued by the kernel
  }
  std::this_thread::sleep_for(100ms);
  double before = cpuSeconds();
  std::this_thread::sleep_for(1s);
  double spent = cpuSeconds() - before;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  for (int fd : fillers) ::close(fd);
  EXPECT_LT(spent, 0.2) << "the server polled a listening socket it could not accept from";
  EXPECT_GE(detail::refusedConnections(*server), 1);
  // With descriptors back, the queued connections are served.
  timeval tv{2, 0};
  ::setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  EXPECT_EQ(readExactlyRaw(fds[0], kGreetingSize).substr(0, 8), "LKSTORE1");
  EXPECT_EQ(::recv(fds[0], std::array<char, 8>{}.data(), 8, MSG_DONTWAIT), -1) << "dropped instead of served";
  for (int fd : fds) ::close(fd);
}

}  // namespace
}  // namespace lockstep
