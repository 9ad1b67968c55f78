#include "daemon/tier/cluster/connection.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvoffload::tier::cluster {
namespace {

constexpr int kMaxIov = 64;

timeval TimevalOf(absl::Duration d) { return absl::ToTimeval(std::max(d, absl::Milliseconds(1))); }

}  // namespace

void ReplyDeleter::operator()(redisReply* r) const { freeReplyObject(r); }

absl::Status ErrorReplyStatus(absl::string_view error, absl::string_view context) {
  const std::string message = absl::StrCat(context, ": ", error);
  for (absl::string_view retry :
       {"CLUSTERDOWN", "LOADING", "MASTERDOWN", "TRYAGAIN", "MOVED", "ASK", "BUSY"}) {
    if (absl::StartsWith(error, retry)) return absl::UnavailableError(message);
  }
  if (absl::StartsWith(error, "OOM")) return absl::ResourceExhaustedError(message);
  if (absl::StartsWith(error, "NOAUTH") || absl::StartsWith(error, "WRONGPASS")) {
    return absl::UnauthenticatedError(message);
  }
  if (absl::StartsWith(error, "NOPERM")) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

RedisConnection::RedisConnection(NodeAddress address, redisContext* context)
    : address_(std::move(address)),
      context_(context),
      read_buffer_(new char[kReadChunk]),
      line_buffer_(new char[kLineBuffer]) {
  // Keep the parser's buffer between replies (hiredis frees it above 16 KiB when empty, and
  // would grow it again, by reallocations, for every large value).
  context_->reader->maxbuf = 0;
}

RedisConnection::~RedisConnection() { redisFree(context_); }

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Open(
    const NodeAddress& address, const Credentials& credentials, absl::Duration connect_timeout,
    absl::Time deadline) {
  const absl::Duration left = std::min(connect_timeout, deadline - absl::Now());
  if (left <= absl::ZeroDuration()) {
    return absl::UnavailableError(absl::StrCat("connect ", address.ToString(), ": no time left"));
  }
  redisContext* c = redisConnectWithTimeout(address.host.c_str(), address.port, TimevalOf(left));
  if (c == nullptr) {
    return absl::UnavailableError(absl::StrCat("connect ", address.ToString(), ": out of memory"));
  }
  if (c->err != 0) {
    absl::Status s =
        absl::UnavailableError(absl::StrCat("connect ", address.ToString(), ": ", c->errstr));
    redisFree(c);
    return s;
  }
  // From here every wait is a poll with the time left (see the header).
  const int flags = fcntl(c->fd, F_GETFL);
  if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    absl::Status s = absl::UnavailableError(
        absl::StrCat("connect ", address.ToString(), ": fcntl: ", std::strerror(errno)));
    redisFree(c);
    return s;
  }
  std::unique_ptr<RedisConnection> conn(new RedisConnection(address, c));
  if (!credentials.password.empty()) {
    std::vector<absl::string_view> argv = {"AUTH"};
    if (!credentials.user.empty()) argv.push_back(credentials.user);
    argv.push_back(credentials.password);
    const absl::Time auth_deadline = std::min(deadline, absl::Now() + connect_timeout);
    absl::StatusOr<Reply> reply = conn->Call(argv, auth_deadline);
    if (!reply.ok()) return reply.status();
    if ((*reply)->type == REDIS_REPLY_ERROR) {
      // The reply names no secret; the user is not a secret.
      absl::Status s = ErrorReplyStatus(
          absl::string_view((*reply)->str, (*reply)->len),
          absl::StrCat("AUTH as '", credentials.user.empty() ? "default" : credentials.user,
                       "' at ", address.ToString()));
      if (s.code() == absl::StatusCode::kInternal) {
        s = absl::UnauthenticatedError(s.message());
      }
      return s;
    }
  }
  return conn;
}

absl::Status RedisConnection::Fail(absl::string_view what) {
  broken_ = true;
  return absl::UnavailableError(absl::StrCat(address_.ToString(), ": ", what));
}

absl::Status RedisConnection::Wait(short events, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      timed_out_ = true;
      return Fail("timed out");
    }
    pollfd p{context_->fd, events, 0};
    const int ms = static_cast<int>(std::ceil(absl::ToDoubleMilliseconds(left)));
    const int n = poll(&p, 1, std::max(ms, 1));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Fail(absl::StrCat("poll: ", std::strerror(errno)));
    if (n == 0) continue;  // re-checks the deadline
    return absl::OkStatus();
  }
}

void RedisConnection::Append(const std::vector<absl::string_view>& argv) {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  ptrs.reserve(argv.size());
  lens.reserve(argv.size());
  for (absl::string_view a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), ptrs.data(), lens.data()) !=
      REDIS_OK) {
    broken_ = true;
  }
}

absl::Status RedisConnection::Flush(absl::Time deadline) {
  if (broken_) return Fail("broken");
  while (true) {
    int done = 0;
    if (redisBufferWrite(context_, &done) != REDIS_OK) {
      if (context_->err == REDIS_ERR_IO && errno == EAGAIN) {
        context_->err = 0;  // the non-blocking socket is full; wait below
      } else {
        return Fail(context_->errstr);
      }
    }
    if (done) return absl::OkStatus();
    absl::Status s = Wait(POLLOUT, deadline);
    if (!s.ok()) return s;
  }
}

absl::Status RedisConnection::Transfer(short direction, std::vector<iovec> iov,
                                       absl::Time deadline) {
  const bool writing = direction == POLLOUT;
  size_t first = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(kMaxIov, iov.size() - first));
    const ssize_t n = writing ? writev(context_->fd, iov.data() + first, count)
                              : readv(context_->fd, iov.data() + first, count);
    if (n == 0 && !writing) return Fail("connection closed by the server");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) {
        return Fail(absl::StrCat(writing ? "writev: " : "readv: ", std::strerror(errno)));
      }
      absl::Status s = Wait(direction, deadline);
      if (!s.ok()) return s;
      continue;
    }
    size_t moved = static_cast<size_t>(n);
    while (first < iov.size() && moved >= iov[first].iov_len) {
      moved -= iov[first].iov_len;
      ++first;
    }
    if (moved > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + moved;
      iov[first].iov_len -= moved;
    }
  }
  return absl::OkStatus();
}

absl::Status RedisConnection::AppendSetRaw(absl::string_view key, absl::string_view head,
                                           absl::string_view body, absl::Time deadline) {
  absl::Status s = Flush(deadline);
  if (!s.ok()) return s;
  // RESP: *3 $3 SET $<key> key $<value> value — the value's two pieces as they lie in memory.
  const std::string prefix = absl::StrCat("*3\r\n$3\r\nSET\r\n$", key.size(), "\r\n", key, "\r\n$",
                                          head.size() + body.size(), "\r\n");
  static constexpr char kCrLf[] = "\r\n";
  std::vector<iovec> iov = {
      {const_cast<char*>(prefix.data()), prefix.size()},
      {const_cast<char*>(head.data()), head.size()},
      {const_cast<char*>(body.data()), body.size()},
      {const_cast<char*>(kCrLf), 2},
  };
  iov.erase(std::remove_if(iov.begin(), iov.end(), [](const iovec& v) { return v.iov_len == 0; }),
            iov.end());
  return Transfer(POLLOUT, std::move(iov), deadline);
}

absl::StatusOr<Reply> RedisConnection::Next(absl::Time deadline) {
  if (broken_) return Fail("broken");
  // Replies parsed by hiredis and by NextBulkInto must not interleave on one connection.
  if (line_pos_ != line_end_) return Fail("mixed reply readers");
  while (true) {
    void* raw = nullptr;
    if (redisReaderGetReply(context_->reader, &raw) != REDIS_OK) {
      return Fail(absl::StrCat("protocol error: ", context_->reader->errstr));
    }
    if (raw != nullptr) return Reply(static_cast<redisReply*>(raw));
    // Our own reads, kReadChunk at a time (hiredis's redisBufferRead reads 16 KiB per call: 128
    // calls for a 2 MiB value), fed to hiredis's parser. Read first, poll only when empty.
    absl::StatusOr<size_t> n = ReadSome(read_buffer_.get(), kReadChunk, deadline);
    if (!n.ok()) return n.status();
    if (redisReaderFeed(context_->reader, read_buffer_.get(), *n) != REDIS_OK) {
      return Fail("reader out of memory");
    }
  }
}

absl::StatusOr<size_t> RedisConnection::ReadSome(char* buffer, size_t capacity,
                                                 absl::Time deadline) {
  while (true) {
    const ssize_t n = read(context_->fd, buffer, capacity);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) return Fail("connection closed by the server");
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return Fail(absl::StrCat("read: ", std::strerror(errno)));
    absl::Status s = Wait(POLLIN, deadline);
    if (!s.ok()) return s;
  }
}

absl::StatusOr<size_t> RedisConnection::ReadLine(absl::Time deadline) {
  while (true) {
    const char* start = line_buffer_.get() + line_pos_;
    const void* lf = std::memchr(start, '\n', line_end_ - line_pos_);
    if (lf != nullptr) {
      const size_t length = static_cast<const char*>(lf) - start;
      if (length == 0 || start[length - 1] != '\r') return Fail("protocol error: bare LF");
      return length - 1;
    }
    if (line_pos_ > 0) {  // keep the partial line at the front
      std::memmove(line_buffer_.get(), start, line_end_ - line_pos_);
      line_end_ -= line_pos_;
      line_pos_ = 0;
    }
    if (line_end_ == kLineBuffer) return Fail("protocol error: reply line too long");
    absl::StatusOr<size_t> n =
        ReadSome(line_buffer_.get() + line_end_, kLineBuffer - line_end_, deadline);
    if (!n.ok()) return n.status();
    line_end_ += *n;
  }
}

absl::StatusOr<RedisConnection::Bulk> RedisConnection::NextBulkInto(char* head, size_t head_bytes,
                                                                    char* body, size_t body_bytes,
                                                                    absl::Time deadline) {
  if (broken_) return Fail("broken");
  // Replies parsed by hiredis and by this function must not interleave on one connection.
  if (context_->reader->len != context_->reader->pos) return Fail("mixed reply readers");
  absl::StatusOr<size_t> line_length = ReadLine(deadline);
  if (!line_length.ok()) return line_length.status();
  const absl::string_view line(line_buffer_.get() + line_pos_, *line_length);
  line_pos_ += *line_length + 2;
  Bulk bulk;
  if (line.empty()) return Fail("protocol error: empty reply line");
  if (line[0] == '-' || line[0] == '+' || line[0] == ':') {
    bulk.kind = line[0] == '-' ? Bulk::kError : Bulk::kSimple;
    bulk.text = std::string(line.substr(1));
    return bulk;
  }
  int64_t length = 0;
  if (line[0] != '$' || !absl::SimpleAtoi(line.substr(1), &length) || length < -1) {
    return Fail(absl::StrCat("protocol error: unexpected reply '", line.substr(0, 40), "'"));
  }
  if (length == -1) {
    bulk.kind = Bulk::kNil;
    return bulk;
  }
  bulk.kind = Bulk::kValue;
  bulk.length = static_cast<uint64_t>(length);
  // Where the value's bytes go: into the caller's memory, or (too long) a scratch buffer.
  const bool fits = bulk.length <= head_bytes + body_bytes;
  std::string scratch;
  std::vector<iovec> dest;
  if (fits) {
    const size_t h = std::min<size_t>(bulk.length, head_bytes);
    dest.push_back({head, h});
    dest.push_back({body, bulk.length - h});
  } else {
    scratch.resize(bulk.length);
    dest.push_back({scratch.data(), scratch.size()});
  }
  char crlf[2];
  dest.push_back({crlf, 2});
  // First what the line's read already brought, then straight from the socket.
  std::vector<iovec> rest;
  for (iovec v : dest) {
    const size_t from_buffer = std::min(v.iov_len, line_end_ - line_pos_);
    std::memcpy(v.iov_base, line_buffer_.get() + line_pos_, from_buffer);
    line_pos_ += from_buffer;
    if (from_buffer < v.iov_len) {
      rest.push_back({static_cast<char*>(v.iov_base) + from_buffer, v.iov_len - from_buffer});
    }
  }
  if (line_pos_ == line_end_) line_pos_ = line_end_ = 0;
  rest.erase(
      std::remove_if(rest.begin(), rest.end(), [](const iovec& v) { return v.iov_len == 0; }),
      rest.end());
  absl::Status s = Transfer(POLLIN, std::move(rest), deadline);
  if (!s.ok()) return s;
  if (crlf[0] != '\r' || crlf[1] != '\n') return Fail("protocol error: bulk without CRLF");
  return bulk;
}

absl::StatusOr<Reply> RedisConnection::Call(const std::vector<absl::string_view>& argv,
                                            absl::Time deadline) {
  Append(argv);
  absl::Status s = Flush(deadline);
  if (!s.ok()) return s;
  return Next(deadline);
}

}  // namespace kvoffload::tier::cluster
