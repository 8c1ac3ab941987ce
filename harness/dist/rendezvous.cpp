// Wire format (harness/dist/README.md): every message is a 4-byte ASCII tag, the payload length as
// a little-endian uint64, then the payload. Ranks > 0 send to rank 0 and wait for its answer.
#include "harness/dist/rendezvous.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>

namespace replay::dist {

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxPayload = 1ull << 30;  // the largest message accepted (a gathered answer)
constexpr uint64_t kMaxBlob = 64ull << 20;

int remaining_ms(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

enum class Io { kOk, kEof, kTimeout, kError };

// Waits for `events` on fd until the deadline.
Io wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return Io::kOk;  // errors and hang-ups surface in the following send/recv
    if (n == 0) return Io::kTimeout;
    if (errno != EINTR) return Io::kError;
  }
}

Io send_all(int fd, const std::string& data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    if (Io w = wait_fd(fd, POLLOUT, deadline); w != Io::kOk) return w;
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR && errno != EAGAIN) {
      return errno == EPIPE || errno == ECONNRESET ? Io::kEof : Io::kError;
    }
  }
  return Io::kOk;
}

Io recv_all(int fd, char* buf, size_t len, Clock::time_point deadline) {
  size_t done = 0;
  while (done < len) {
    if (Io w = wait_fd(fd, POLLIN, deadline); w != Io::kOk) return w;
    const ssize_t n = ::recv(fd, buf + done, len - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      return Io::kEof;
    } else if (errno != EINTR && errno != EAGAIN) {
      return errno == ECONNRESET ? Io::kEof : Io::kError;
    }
  }
  return Io::kOk;
}

struct Message {
  Io io = Io::kOk;
  std::string tag, payload;
};

Io write_msg(int fd, const char* tag, const std::string& payload, Clock::time_point deadline) {
  std::string m(tag, 4);
  put_u64(m, payload.size());
  m += payload;
  return send_all(fd, m, deadline);
}

Message read_msg(int fd, Clock::time_point deadline) {
  Message m;
  char head[12];
  m.io = recv_all(fd, head, sizeof head, deadline);
  if (m.io != Io::kOk) return m;
  m.tag.assign(head, 4);
  const uint64_t len = get_le(std::string(head, sizeof head), 4, 8);
  if (len > kMaxPayload) {
    m.io = Io::kError;
    return m;
  }
  m.payload.resize(len);
  m.io = recv_all(fd, m.payload.data(), len, deadline);
  return m;
}

std::string seconds(std::chrono::milliseconds t) {
  std::ostringstream s;
  s << static_cast<double>(t.count()) / 1000 << " s";
  return s.str();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

addrinfo* resolve(const std::string& addr, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0)
    throw RendezvousError("cannot resolve the rendezvous address " + addr + ": " +
                          ::gai_strerror(rc));
  return res;
}

void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

std::string Rendezvous::address() const {
  return (opt_.addr.find(':') != std::string::npos ? "[" + opt_.addr + "]" : opt_.addr) + ":" +
         std::to_string(opt_.port);
}

std::string Rendezvous::timeout_text() const {
  return seconds(opt_.timeout);
}

void Rendezvous::fail_at_root(const std::string& message) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(500);
  for (auto& p : peers_)
    if (p.valid()) write_msg(p.fd(), "ABRT", message, deadline);  // best effort
  peers_.clear();
  throw RendezvousError(message);
}

Rendezvous::Rendezvous(const RendezvousOptions& opt) : opt_(opt) {
  if (opt_.world_size < 1 || opt_.rank < 0 || opt_.rank >= opt_.world_size)
    throw std::invalid_argument("rendezvous: rank " + std::to_string(opt_.rank) +
                                " outside world size " + std::to_string(opt_.world_size));
  if (opt_.port == 0) throw std::invalid_argument("rendezvous: port 0");
  if (opt_.world_size == 1) return;
  const auto deadline = Clock::now() + opt_.timeout;
  const std::string where = " the rendezvous at " + address();

  if (opt_.rank == 0) {
    addrinfo* res = resolve(opt_.addr, opt_.port, true);
    Socket listener;
    std::string why;
    for (addrinfo* a = res; a && !listener.valid(); a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.valid()) continue;
      const int one = 1;
      ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 &&
          ::listen(s.fd(), std::max(opt_.world_size, 16)) == 0)
        listener = std::move(s);
      else
        why = std::strerror(errno);
    }
    ::freeaddrinfo(res);
    if (!listener.valid())
      throw RendezvousError("rank 0 cannot listen at" + where + ": " + why +
                            " (is MASTER_PORT in use, or MASTER_ADDR not this host?)");
    peers_.resize(opt_.world_size);
    int joined = 1;
    while (joined < opt_.world_size) {
      if (wait_fd(listener.fd(), POLLIN, deadline) != Io::kOk) {
        std::vector<int> missing;
        for (int r = 1; r < opt_.world_size; ++r)
          if (!peers_[r].valid()) missing.push_back(r);
        fail_at_root(rank_list(missing) + " did not join" + where + " within " + timeout_text());
      }
      Socket c(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c.valid()) continue;
      set_nodelay(c.fd());
      Message m = read_msg(c.fd(), deadline);
      if (m.io != Io::kOk || m.tag != "HELO" || m.payload.size() != 12 ||
          get_le(m.payload, 0, 4) != kVersion)
        continue;  // not a rank of this run (a port scan, an old binary): ignore it
      const auto r = static_cast<int64_t>(get_le(m.payload, 4, 4));
      // A refused rank is told why too, before the ranks that joined.
      auto refuse = [&](const std::string& message) {
        write_msg(c.fd(), "ABRT", message, Clock::now() + std::chrono::milliseconds(500));
        fail_at_root(message);
      };
      const auto w = static_cast<int64_t>(get_le(m.payload, 8, 4));
      if (w != opt_.world_size)
        refuse("rank " + std::to_string(r) + " joined" + where + " with world size " +
               std::to_string(w) + ", rank 0 has " + std::to_string(opt_.world_size));
      if (r < 1 || r >= opt_.world_size)
        refuse("a process joined" + where + " as rank " + std::to_string(r) + ", outside 1.." +
               std::to_string(opt_.world_size - 1));
      if (peers_[r].valid())
        refuse("rank " + std::to_string(r) + " joined" + where +
               " twice (two processes with the same RANK?)");
      peers_[r] = std::move(c);
      ++joined;
    }
    for (int r = 1; r < opt_.world_size; ++r)
      if (write_msg(peers_[r].fd(), "WELC", "", deadline) != Io::kOk)
        fail_at_root("rank " + std::to_string(r) + " closed its connection to" + where +
                     " while joining");
    return;
  }

  // Ranks > 0: connect, retrying while rank 0 is not listening yet.
  std::string why = "no address";
  while (!root_.valid()) {
    addrinfo* res = resolve(opt_.addr, opt_.port, false);
    for (addrinfo* a = res; a && !root_.valid(); a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (s.valid() && ::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0)
        root_ = std::move(s);
      else
        why = std::strerror(errno);
    }
    ::freeaddrinfo(res);
    if (root_.valid()) break;
    if (Clock::now() >= deadline)
      throw RendezvousError("rank " + std::to_string(opt_.rank) + " could not reach rank 0 at" +
                            where + " within " + timeout_text() + " (" + why +
                            "): rank 0 did not start listening");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  set_nodelay(root_.fd());
  std::string hello;
  put_u32(hello, kVersion);
  put_u32(hello, static_cast<uint32_t>(opt_.rank));
  put_u32(hello, static_cast<uint32_t>(opt_.world_size));
  exchange("HELO", "WELC", hello, "join");
}

// Ranks > 0 during the join, all-gather and barrier: send `payload` to rank 0 and return its
// answer.
std::string Rendezvous::exchange(const char* tag_up, const char* tag_down,
                                 const std::string& payload, const std::string& step) {
  const std::string where = " at the rendezvous at " + address();
  const auto grace = std::min<std::chrono::milliseconds>(opt_.timeout, std::chrono::seconds(2));
  const auto deadline = Clock::now() + opt_.timeout + grace;
  if (write_msg(root_.fd(), tag_up, payload, deadline) != Io::kOk) {
    // rank 0 may already have written why it gave up
    Message m = read_msg(root_.fd(), Clock::now() + std::chrono::milliseconds(200));
    if (m.io == Io::kOk && m.tag == "ABRT") throw RendezvousError(m.payload);
    throw RendezvousError("rank 0 closed its connection" + where + " during " + step + " (rank " +
                          std::to_string(opt_.rank) + " could not send)");
  }
  Message m = read_msg(root_.fd(), deadline);
  if (m.io == Io::kOk && m.tag == "ABRT") throw RendezvousError(m.payload);
  if (m.io == Io::kTimeout)
    throw RendezvousError("rank 0 did not answer " + step + where + " within " +
                          seconds(opt_.timeout + grace) + " (rank " + std::to_string(opt_.rank) +
                          " waiting)");
  if (m.io != Io::kOk)
    throw RendezvousError("rank 0 closed its connection" + where + " during " + step +
                          " (did it die?)");
  if (m.tag != tag_down)
    throw RendezvousError("rank 0 answered " + step + where + " with '" + m.tag + "', expected '" +
                          tag_down + "'");
  return m.payload;
}

// Rank 0: one message tagged `tag` from every other rank, by rank ([0] empty).
std::vector<std::string> Rendezvous::gather_at_root(const char* tag, const std::string& step,
                                                    Clock::time_point deadline) {
  const std::string where = " the rendezvous at " + address();
  std::vector<std::string> got(opt_.world_size);
  std::vector<int> pending;
  for (int r = 1; r < opt_.world_size; ++r) pending.push_back(r);
  while (!pending.empty()) {
    std::vector<pollfd> fds;
    for (int r : pending) fds.push_back({peers_[r].fd(), POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail_at_root(rank_list(pending) + " did not reach " + step + " at" + where + " within " +
                   timeout_text());
    std::vector<int> still;
    for (size_t i = 0; i < fds.size(); ++i) {
      const int r = pending[i];
      if (!fds[i].revents) {
        still.push_back(r);
        continue;
      }
      Message m = read_msg(fds[i].fd, deadline);
      if (m.io == Io::kTimeout)
        fail_at_root("rank " + std::to_string(r) + " stopped sending in the middle of " + step +
                     " at" + where + " (" + timeout_text() + ")");
      if (m.io != Io::kOk)
        fail_at_root("rank " + std::to_string(r) + " closed its connection to" + where +
                     " during " + step + " (did it die?)");
      if (m.tag != tag)
        fail_at_root("rank " + std::to_string(r) + " sent '" + m.tag + "' during " + step + " at" +
                     where + ", expected '" + tag + "' (the ranks do not make the same calls)");
      got[r] = std::move(m.payload);
    }
    pending = std::move(still);
  }
  return got;
}

std::vector<std::string> Rendezvous::all_gather(const std::string& mine) {
  if (mine.size() > kMaxBlob)
    throw std::invalid_argument("all_gather: a blob of " + std::to_string(mine.size()) +
                                " bytes (at most 64 MiB)");
  if (opt_.world_size == 1) return {mine};
  if (opt_.rank > 0) {
    const std::string all = exchange("GATH", "GATR", mine, "all_gather");
    std::vector<std::string> out;
    size_t at = 0;
    auto need = [&](size_t n) {
      if (all.size() - at < n)
        throw RendezvousError("rank 0's all_gather answer is truncated (" +
                              std::to_string(all.size()) + " bytes)");
    };
    need(4);
    const auto count = get_le(all, at, 4);
    at += 4;
    if (count != static_cast<uint64_t>(opt_.world_size))
      throw RendezvousError("rank 0's all_gather answer has " + std::to_string(count) +
                            " blobs for world size " + std::to_string(opt_.world_size));
    for (uint64_t i = 0; i < count; ++i) {
      need(8);
      const auto len = get_le(all, at, 8);
      at += 8;
      need(len);
      out.push_back(all.substr(at, len));
      at += len;
    }
    return out;
  }
  std::vector<std::string> got = gather_at_root("GATH", "all_gather", Clock::now() + opt_.timeout);
  got[0] = mine;
  std::string reply;
  put_u32(reply, static_cast<uint32_t>(opt_.world_size));
  for (const auto& b : got) {
    put_u64(reply, b.size());
    reply += b;
  }
  const auto deadline = Clock::now() + opt_.timeout;
  for (int r = 1; r < opt_.world_size; ++r)
    if (write_msg(peers_[r].fd(), "GATR", reply, deadline) != Io::kOk)
      fail_at_root("rank " + std::to_string(r) + " closed its connection to the rendezvous at " +
                   address() + " during all_gather (did it die?)");
  return got;
}

void Rendezvous::barrier() {
  if (opt_.world_size == 1) return;
  if (opt_.rank > 0) {
    exchange("BARQ", "BARA", "", "barrier");
    return;
  }
  gather_at_root("BARQ", "barrier", Clock::now() + opt_.timeout);
  const auto deadline = Clock::now() + opt_.timeout;
  for (int r = 1; r < opt_.world_size; ++r)
    if (write_msg(peers_[r].fd(), "BARA", "", deadline) != Io::kOk)
      fail_at_root("rank " + std::to_string(r) + " closed its connection to the rendezvous at " +
                   address() + " during barrier (did it die?)");
}

std::string rank_blob(int rank, int world_size) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size);
}

void check_rank_blobs(const std::vector<std::string>& gathered, int world_size) {
  if (gathered.size() != static_cast<size_t>(world_size))
    throw RendezvousError("all_gather returned " + std::to_string(gathered.size()) +
                          " blobs for world size " + std::to_string(world_size));
  for (int r = 0; r < world_size; ++r)
    if (gathered[r] != rank_blob(r, world_size))
      throw RendezvousError("all_gather entry " + std::to_string(r) + " is '" + gathered[r] +
                            "', expected '" + rank_blob(r, world_size) + "'");
}

}  // namespace replay::dist
