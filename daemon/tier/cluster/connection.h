// RedisConnection: one hiredis connection to one Redis node, driven with a deadline on every
// step. hiredis (0.14) makes the protocol (commands, the reply parser); the waiting is ours:
// the socket is non-blocking after connect and every read or write first polls for at most the
// time left, so no call can outlast its deadline (hiredis's own blocking calls would restart
// the socket timeout on every 16 KiB read).
//
// Pipelining: Append commands (or AppendRaw a command whose bytes the caller formats, so a
// large value goes from the caller's memory to the socket without a copy), Flush, then Next
// once per command. Any I/O error, timeout or protocol error marks the connection broken: its
// pending replies are lost and it must be dropped (the pool does).
//
// Thread safety: none; a connection is used by one thread at a time (the pool hands it out).
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_CONNECTION_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_CONNECTION_H_

#include <sys/uio.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/tier/cluster/cluster_options.h"

struct redisContext;
struct redisReply;

namespace kvoffload::tier::cluster {

struct ReplyDeleter {
  void operator()(redisReply* r) const;
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// What AUTH sends at connect; an empty password sends nothing.
struct Credentials {
  std::string user;
  std::string password;
};

class RedisConnection {
 public:
  // Connects (bounded by min(connect_timeout, deadline)) and authenticates. UNAVAILABLE when the
  // node cannot be reached in time; UNAUTHENTICATED when AUTH is refused.
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Open(const NodeAddress& address,
                                                               const Credentials& credentials,
                                                               absl::Duration connect_timeout,
                                                               absl::Time deadline);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Queues a command (copied into hiredis's output buffer).
  void Append(const std::vector<absl::string_view>& argv);
  // Sends `SET key <head+body>` straight from the given memory: flushes what is queued, then
  // writes the command with writev. Broken on failure.
  absl::Status AppendSetRaw(absl::string_view key, absl::string_view head, absl::string_view body,
                            absl::Time deadline);
  // Sends everything queued.
  absl::Status Flush(absl::Time deadline);
  // The next reply (an error reply is a Reply too: check its type).
  absl::StatusOr<Reply> Next(absl::Time deadline);
  // The next reply of a GET, a bulk string read straight from the socket into `head` (its
  // first head_bytes) and `body` (the rest): no copy through a parser's buffer. Also takes the
  // simple replies a GET batch can meet (+OK of ASKING, -errors such as MOVED).
  struct Bulk {
    enum Kind { kValue, kNil, kError, kSimple };
    Kind kind = kNil;
    uint64_t length = 0;  // kValue: the value's length (too long for the memory: not stored)
    std::string text;     // kError, kSimple
  };
  absl::StatusOr<Bulk> NextBulkInto(char* head, size_t head_bytes, char* body, size_t body_bytes,
                                    absl::Time deadline);
  // Append + Flush + Next.
  absl::StatusOr<Reply> Call(const std::vector<absl::string_view>& argv, absl::Time deadline);

  bool broken() const { return broken_; }
  // Broken only because a deadline passed: the node may be slow rather than gone.
  bool timed_out() const { return timed_out_; }
  const NodeAddress& address() const { return address_; }

 private:
  RedisConnection(NodeAddress address, redisContext* context);
  // Polls the socket for `events` until the deadline. DEADLINE: UNAVAILABLE "timed out".
  absl::Status Wait(short events, absl::Time deadline);
  // Writes all of `iov` (direction POLLOUT) or reads until `iov` is full (POLLIN; only ever
  // into the given memory).
  absl::Status Transfer(short direction, std::vector<::iovec> iov, absl::Time deadline);
  // One read() of at most `capacity` bytes: at least one byte, or why not (polls when empty).
  absl::StatusOr<size_t> ReadSome(char* buffer, size_t capacity, absl::Time deadline);
  // Makes line_buffer_ hold a whole "\r\n"-terminated line from line_pos_; returns its length
  // without the "\r\n".
  absl::StatusOr<size_t> ReadLine(absl::Time deadline);
  absl::Status Fail(absl::string_view what);

  static constexpr size_t kReadChunk = 512 << 10;

  const NodeAddress address_;
  redisContext* const context_;
  std::unique_ptr<char[]> read_buffer_;
  // NextBulkInto's buffer for reply lines (and whatever the same read() brought after them):
  // bytes [line_pos_, line_end_) are unconsumed. Empty between batches.
  static constexpr size_t kLineBuffer = 64 << 10;
  std::unique_ptr<char[]> line_buffer_;
  size_t line_pos_ = 0;
  size_t line_end_ = 0;
  bool broken_ = false;
  bool timed_out_ = false;
};

// An error reply's code: UNAVAILABLE for what a retry later may cure (CLUSTERDOWN, LOADING,
// MASTERDOWN, TRYAGAIN, a redirect that could not be followed), RESOURCE_EXHAUSTED for OOM
// (maxmemory with a noeviction policy), UNAUTHENTICATED for NOAUTH/WRONGPASS, PERMISSION_DENIED
// for NOPERM, INTERNAL for anything else.
absl::Status ErrorReplyStatus(absl::string_view error, absl::string_view context);

}  // namespace kvoffload::tier::cluster

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_CONNECTION_H_
