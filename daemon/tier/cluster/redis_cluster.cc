#include "daemon/tier/cluster/redis_cluster.h"

#include <hiredis/hiredis.h>

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/tier/cluster/key_slot.h"

namespace kvoffload::tier::cluster {
namespace {

absl::string_view Text(const redisReply* r) { return absl::string_view(r->str, r->len); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Connections to one node.

class RedisCluster::NodePool {
 public:
  NodePool(NodeAddress address, const ClusterTierOptions& options, const Credentials& credentials,
           RedisCluster* owner)
      : address_(std::move(address)), options_(options), credentials_(credentials), owner_(owner) {}

  absl::StatusOr<std::unique_ptr<RedisConnection>> Acquire(absl::Time deadline) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      if (now < down_until_) {
        return absl::UnavailableError(absl::StrCat(address_.ToString(),
                                                   ": down (a connect failed; retried after ",
                                                   absl::FormatDuration(down_until_ - now), ")"));
      }
      auto can_go = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !idle_.empty() || open_ < options_.connections_per_node;
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&can_go), deadline)) {
        return absl::UnavailableError(
            absl::StrCat(address_.ToString(), ": no free connection before the deadline"));
      }
      if (!idle_.empty()) {
        std::unique_ptr<RedisConnection> c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
      ++open_;  // a slot for the connection opened below, outside the lock
    }
    absl::StatusOr<std::unique_ptr<RedisConnection>> c =
        RedisConnection::Open(address_, credentials_, options_.connect_timeout, deadline);
    absl::MutexLock lock(&mu_);
    if (!c.ok()) {
      --open_;
      if (absl::IsUnavailable(c.status())) down_until_ = absl::Now() + options_.down_backoff;
      owner_->connect_failures_.fetch_add(1, std::memory_order_relaxed);
    } else {
      owner_->connects_.fetch_add(1, std::memory_order_relaxed);
    }
    return c;
  }

  void Release(std::unique_ptr<RedisConnection> c) {
    if (c->broken()) {
      owner_->broken_.fetch_add(1, std::memory_order_relaxed);
      // The node may have died or restarted: the idle connections opened before this one are
      // likely dead too. Closed now, so that each does not fail a call of its own first — unless
      // this one only ran out of time (a slow node: its other connections are fine, and closing
      // them would make a burst of reconnects under load).
      std::vector<std::unique_ptr<RedisConnection>> stale;
      {
        absl::MutexLock lock(&mu_);
        if (!c->timed_out()) stale.swap(idle_);
        open_ -= 1 + static_cast<int>(stale.size());
      }
      c.reset();  // closes the sockets outside the lock
      stale.clear();
      return;
    }
    absl::MutexLock lock(&mu_);
    idle_.push_back(std::move(c));
  }

  const NodeAddress& address() const { return address_; }

 private:
  const NodeAddress address_;
  const ClusterTierOptions& options_;
  const Credentials& credentials_;
  RedisCluster* const owner_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<RedisConnection>> idle_ ABSL_GUARDED_BY(mu_);
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time down_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// ---------------------------------------------------------------------------------------------

struct RedisCluster::Op {
  enum Kind { kGet, kGetInto, kExists, kSet, kUnlink };
  Kind kind = kGet;
  const std::string* key = nullptr;
  absl::string_view head, body;     // kSet
  const KvGetInto* into = nullptr;  // kGetInto
  uint64_t length = 0;              // kGetInto: the value's length
  // Routing: a redirect's target, and whether it was an ASK.
  std::optional<NodeAddress> target;
  bool asking = false;
  int hops = 0;
  // Result: OK with `reply`, or why not.
  absl::Status status = absl::UnavailableError("not run");
  Reply reply;
};

RedisCluster::RedisCluster(const ClusterTierOptions& options, Credentials credentials)
    : options_(options),
      credentials_(std::move(credentials)),
      slot_map_(options_, [this](const NodeAddress& node, absl::Time deadline) {
        NodePool* pool = Pool(node);
        absl::StatusOr<std::unique_ptr<RedisConnection>> conn = pool->Acquire(deadline);
        if (!conn.ok()) return absl::StatusOr<Reply>(conn.status());
        absl::StatusOr<Reply> r = (*conn)->Call({"CLUSTER", "SLOTS"}, deadline);
        pool->Release(*std::move(conn));
        return r;
      }) {}

RedisCluster::~RedisCluster() = default;  // slot_map_, the last member, stops its thread first

absl::StatusOr<std::unique_ptr<RedisCluster>> RedisCluster::Connect(
    const ClusterTierOptions& options, Credentials credentials) {
  std::unique_ptr<RedisCluster> c(new RedisCluster(options, std::move(credentials)));
  absl::Status s = c->slot_map_.Load();
  // No node answered (down, unreachable, not a cluster yet): start without a map; the
  // refresher's thread tries again until one does. Anything else is the configuration's fault.
  if (!s.ok() && !absl::IsUnavailable(s)) return s;
  c->slot_map_.Start();
  return c;
}

RedisCluster::NodePool* RedisCluster::Pool(const NodeAddress& address) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<NodePool>& p = pools_[address.ToString()];
  if (p == nullptr) p = std::make_unique<NodePool>(address, options_, credentials_, this);
  return p.get();
}

std::shared_ptr<const SlotTable> RedisCluster::slot_table() const { return slot_map_.table(); }

void RedisCluster::RequestRefresh() { slot_map_.RequestRefresh(); }

void RedisCluster::Run(std::vector<Op>& ops, absl::Time deadline) {
  struct Group {
    NodeAddress address;
    std::vector<size_t> ops;
    NodePool* pool = nullptr;
    std::unique_ptr<RedisConnection> conn;
  };
  bool refresh = false;
  std::vector<size_t> pending(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) pending[i] = i;
  while (!pending.empty()) {
    if (absl::Now() >= deadline) {
      for (size_t i : pending) {
        ops[i].status = absl::UnavailableError("timed out following a redirect");
      }
      break;
    }
    const std::shared_ptr<const SlotTable> table = slot_table();
    std::map<std::string, Group> groups;
    for (size_t i : pending) {
      Op& op = ops[i];
      const NodeAddress* to = op.target          ? &*op.target
                              : table != nullptr ? table->owner(KeySlot(*op.key))
                                                 : nullptr;
      if (to == nullptr) {
        op.status = absl::UnavailableError(
            table != nullptr
                ? absl::StrCat("slot ", KeySlot(*op.key), " has no master in the slot map")
                : std::string("no slot map: no node of the cluster has answered yet"));
        refresh = true;
        continue;
      }
      Group& g = groups[to->ToString()];
      g.address = *to;
      g.ops.push_back(i);
    }
    pending.clear();
    // Send every group's commands before reading any reply.
    for (auto& [name, g] : groups) {
      g.pool = Pool(g.address);
      absl::StatusOr<std::unique_ptr<RedisConnection>> conn = g.pool->Acquire(deadline);
      if (!conn.ok()) {
        for (size_t i : g.ops) ops[i].status = conn.status();
        refresh = true;
        continue;
      }
      g.conn = *std::move(conn);
      absl::Status sent;
      for (size_t i : g.ops) {
        Op& op = ops[i];
        if (op.asking) g.conn->Append({"ASKING"});
        switch (op.kind) {
          case Op::kGet:
          case Op::kGetInto:
            g.conn->Append({"GET", *op.key});
            break;
          case Op::kExists:
            g.conn->Append({"EXISTS", *op.key});
            break;
          case Op::kUnlink:
            g.conn->Append({"UNLINK", *op.key});
            break;
          case Op::kSet:
            sent = g.conn->AppendSetRaw(*op.key, op.head, op.body, deadline);
            break;
        }
        if (!sent.ok()) break;
      }
      if (sent.ok()) sent = g.conn->Flush(deadline);
      if (!sent.ok()) {
        for (size_t i : g.ops) ops[i].status = sent;
        refresh = true;
        g.pool->Release(std::move(g.conn));
      }
    }
    for (auto& entry : groups) {
      Group& g = entry.second;  // a plain reference: lambdas below may use it
      if (g.conn == nullptr) continue;
      absl::Status io;
      for (size_t i : g.ops) {
        Op& op = ops[i];
        if (!io.ok()) {
          op.status = io;
          continue;
        }
        // An error reply: a redirect to follow (the op goes round again) or the op's status.
        auto error_reply = [&](absl::string_view error) {
          std::optional<Redirect> redirect = ParseRedirect(error);
          if (redirect && op.hops < kMaxRedirects) {
            ++op.hops;
            op.target = redirect->target;
            op.asking = redirect->kind == Redirect::kAsk;
            if (redirect->kind == Redirect::kMoved) refresh = true;
            redirects_.fetch_add(1, std::memory_order_relaxed);
            pending.push_back(i);
            return;
          }
          op.status = ErrorReplyStatus(error, g.address.ToString());
          if (absl::IsUnavailable(op.status)) refresh = true;
        };
        if (op.kind == Op::kGetInto) {
          absl::StatusOr<RedisConnection::Bulk> asked;
          if (op.asking) {
            asked = g.conn->NextBulkInto(nullptr, 0, nullptr, 0, deadline);
            if (!asked.ok()) {
              io = op.status = asked.status();
              refresh = true;
              continue;
            }
          }
          const KvGetInto& into = *op.into;
          absl::StatusOr<RedisConnection::Bulk> b = g.conn->NextBulkInto(
              into.head, into.head_bytes, into.body, into.body_bytes, deadline);
          if (!b.ok()) {
            io = op.status = b.status();
            refresh = true;
            continue;
          }
          if (op.asking && asked->kind == RedisConnection::Bulk::kError) {
            error_reply(asked->text);
            continue;
          }
          switch (b->kind) {
            case RedisConnection::Bulk::kValue:
              op.length = b->length;
              op.status = b->length <= into.head_bytes + into.body_bytes
                              ? absl::OkStatus()
                              : absl::OutOfRangeError(absl::StrCat(
                                    "value of ", b->length, " bytes, longer than its memory"));
              break;
            case RedisConnection::Bulk::kNil:
              op.status = absl::NotFoundError("no such key");
              break;
            case RedisConnection::Bulk::kError:
              error_reply(b->text);
              break;
            case RedisConnection::Bulk::kSimple:
              op.status = absl::InternalError(absl::StrCat("GET answered '", b->text, "'"));
              break;
          }
          continue;
        }
        if (op.asking) {
          absl::StatusOr<Reply> ok = g.conn->Next(deadline);
          if (!ok.ok()) {
            io = op.status = ok.status();
            continue;
          }
        }
        absl::StatusOr<Reply> r = g.conn->Next(deadline);
        if (!r.ok()) {
          io = op.status = r.status();
          refresh = true;
          continue;
        }
        if ((*r)->type != REDIS_REPLY_ERROR) {
          op.status = absl::OkStatus();
          op.reply = *std::move(r);
          continue;
        }
        error_reply(Text(r->get()));
      }
      g.pool->Release(std::move(g.conn));
    }
  }
  if (refresh) RequestRefresh();
}

std::vector<absl::Status> RedisCluster::Put(const std::vector<KvPut>& puts, absl::Time deadline) {
  std::vector<Op> ops(puts.size());
  for (size_t i = 0; i < puts.size(); ++i) {
    ops[i].kind = Op::kSet;
    ops[i].key = &puts[i].key;
    ops[i].head = puts[i].head;
    ops[i].body = puts[i].body;
  }
  Run(ops, deadline);
  std::vector<absl::Status> out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) out[i] = std::move(ops[i].status);
  return out;
}

std::vector<KvValue> RedisCluster::Get(const std::vector<std::string>& keys, absl::Time deadline) {
  std::vector<Op> ops(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ops[i].kind = Op::kGet;
    ops[i].key = &keys[i];
  }
  Run(ops, deadline);
  std::vector<KvValue> out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    Op& op = ops[i];
    if (!op.status.ok()) {
      out[i].status = std::move(op.status);
    } else if (op.reply->type == REDIS_REPLY_NIL) {
      out[i].status = absl::NotFoundError("no such key");
    } else if (op.reply->type != REDIS_REPLY_STRING) {
      out[i].status =
          absl::InternalError(absl::StrCat("GET answered a reply of type ", op.reply->type));
    } else {
      out[i].bytes = Text(op.reply.get());
      out[i].owner = std::shared_ptr<const void>(op.reply.release(), ReplyDeleter());
    }
  }
  return out;
}

std::vector<absl::StatusOr<uint64_t>> RedisCluster::GetInto(const std::vector<KvGetInto>& gets,
                                                            absl::Time deadline) {
  std::vector<Op> ops(gets.size());
  for (size_t i = 0; i < gets.size(); ++i) {
    ops[i].kind = Op::kGetInto;
    ops[i].key = &gets[i].key;
    ops[i].into = &gets[i];
  }
  Run(ops, deadline);
  std::vector<absl::StatusOr<uint64_t>> out;
  for (Op& op : ops) {
    if (op.status.ok()) {
      out.push_back(op.length);
    } else {
      out.push_back(std::move(op.status));
    }
  }
  return out;
}

std::vector<absl::StatusOr<bool>> RedisCluster::Exists(const std::vector<std::string>& keys,
                                                       absl::Time deadline) {
  std::vector<Op> ops(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ops[i].kind = Op::kExists;
    ops[i].key = &keys[i];
  }
  Run(ops, deadline);
  std::vector<absl::StatusOr<bool>> out(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i].status.ok()) {
      out[i] = std::move(ops[i].status);
    } else {
      out[i] = ops[i].reply->type == REDIS_REPLY_INTEGER && ops[i].reply->integer > 0;
    }
  }
  return out;
}

std::vector<absl::Status> RedisCluster::Delete(const std::vector<std::string>& keys,
                                               absl::Time deadline) {
  std::vector<Op> ops(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ops[i].kind = Op::kUnlink;
    ops[i].key = &keys[i];
  }
  Run(ops, deadline);
  std::vector<absl::Status> out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) out[i] = std::move(ops[i].status);
  return out;
}

absl::StatusOr<uint64_t> RedisCluster::DeletePrefix(absl::string_view prefix, absl::Time deadline) {
  const std::string pattern = absl::StrCat(prefix, "*");
  uint64_t deleted = 0;
  absl::Status result;
  const std::shared_ptr<const SlotTable> table = slot_table();
  if (table == nullptr) {
    RequestRefresh();
    return absl::UnavailableError("no slot map: no node of the cluster has answered yet");
  }
  for (const NodeAddress& master : table->masters()) {
    NodePool* pool = Pool(master);
    absl::StatusOr<std::unique_ptr<RedisConnection>> conn = pool->Acquire(deadline);
    if (!conn.ok()) {
      result.Update(conn.status());
      continue;
    }
    std::string cursor = "0";
    do {
      absl::StatusOr<Reply> r =
          (*conn)->Call({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, deadline);
      if (!r.ok()) {
        result.Update(r.status());
        break;
      }
      const redisReply* reply = r->get();
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
          reply->element[0]->type != REDIS_REPLY_STRING ||
          reply->element[1]->type != REDIS_REPLY_ARRAY) {
        result.Update(reply->type == REDIS_REPLY_ERROR
                          ? ErrorReplyStatus(Text(reply), "SCAN")
                          : absl::InternalError("SCAN: malformed reply"));
        break;
      }
      cursor = std::string(Text(reply->element[0]));
      const redisReply* keys = reply->element[1];
      // One UNLINK per key: a multi-key UNLINK would need every key in one slot.
      for (size_t i = 0; i < keys->elements; ++i) {
        (*conn)->Append({"UNLINK", Text(keys->element[i])});
      }
      absl::Status s = (*conn)->Flush(deadline);
      for (size_t i = 0; s.ok() && i < keys->elements; ++i) {
        absl::StatusOr<Reply> u = (*conn)->Next(deadline);
        if (!u.ok()) {
          s = u.status();
        } else if ((*u)->type == REDIS_REPLY_INTEGER) {
          deleted += static_cast<uint64_t>((*u)->integer);
        }
      }
      if (!s.ok()) {
        result.Update(s);
        break;
      }
    } while (cursor != "0");
    pool->Release(*std::move(conn));
  }
  if (!result.ok()) return result;
  return deleted;
}

KvBackendStats RedisCluster::backend_stats() const {
  KvBackendStats s;
  s.connects = connects_.load(std::memory_order_relaxed);
  s.connect_failures = connect_failures_.load(std::memory_order_relaxed);
  s.broken = broken_.load(std::memory_order_relaxed);
  s.redirects = redirects_.load(std::memory_order_relaxed);
  s.refreshes = slot_map_.refreshes();
  s.refresh_failures = slot_map_.refresh_failures();
  s.connected = slot_map_.connected();
  return s;
}

}  // namespace kvoffload::tier::cluster
