// A TCP rendezvous of the ranks of a multi-process run: rank 0 listens at MASTER_ADDR:MASTER_PORT,
// every other rank connects to it; then all-gathers of bytes (later: the ncclUniqueId, CUDA IPC
// handles) and barriers, star-shaped through rank 0. Every wait has a timeout; a dead or silent
// rank ends every rank's wait with an error naming it and the step. harness/dist/README.md gives
// the wire format.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace replay::dist {

/// A rank missing, dead or misbehaving at a rendezvous step; the message names the rank(s), the
/// step and the address, e.g. "rank 2 did not join the rendezvous at 127.0.0.1:29500 within 5 s".
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An owned socket descriptor (closed on destruction; move-only).
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

struct RendezvousOptions {
  std::string addr;                          ///< MASTER_ADDR: host name or IP address of rank 0
  uint16_t port = 0;                         ///< MASTER_PORT
  int rank = 0;                              ///< this process's rank, 0 <= rank < world_size
  int world_size = 1;                        ///< number of ranks
  std::chrono::milliseconds timeout{30000};  ///< limit of each step (join, all-gather, barrier)
};

/// One rank's membership of the rendezvous. The constructor joins (rank 0: bind, listen, accept
/// world_size - 1 ranks; the others: connect, retrying until rank 0 listens) and returns once every
/// rank has joined. Every call is collective: all ranks make the same calls in the same order.
/// Rank 0 reports a failure to every connected rank before throwing, so all ranks throw the same
/// message; the other ranks wait `timeout` plus a grace (min(timeout, 2 s)) for rank 0's verdict.
/// Throws RendezvousError (see its comment); std::invalid_argument on bad options.
class Rendezvous {
 public:
  explicit Rendezvous(const RendezvousOptions& opt);

  /// Every rank's `mine`, indexed by rank (each blob at most 64 MiB; sizes may differ).
  std::vector<std::string> all_gather(const std::string& mine);

  /// Returns once every rank has entered the barrier.
  void barrier();

  int rank() const { return opt_.rank; }
  int world_size() const { return opt_.world_size; }
  /// "addr:port", as errors name it.
  std::string address() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::string exchange(const char* tag_up, const char* tag_down, const std::string& payload,
                       const std::string& step);
  std::vector<std::string> gather_at_root(const char tag[4], const std::string& step,
                                          Clock::time_point deadline);
  [[noreturn]] void fail_at_root(const std::string& message);
  std::string timeout_text() const;

  RendezvousOptions opt_;
  Socket root_;                // ranks > 0: the connection to rank 0
  std::vector<Socket> peers_;  // rank 0: the connection to rank r at [r] ([0] unused)
};

/// The blob a rank contributes to `replay rendezvous-check`: "rank R of W".
std::string rank_blob(int rank, int world_size);

/// Checks an all-gather of rank_blob()s: entry r must be rank_blob(r, world_size) and there must be
/// world_size of them. Throws RendezvousError naming the first wrong entry.
void check_rank_blobs(const std::vector<std::string>& gathered, int world_size);

}  // namespace replay::dist
