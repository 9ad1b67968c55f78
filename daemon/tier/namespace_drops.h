// NamespaceDrops: the durable list of dropped namespaces, so a dropped namespace's records stay
// dropped across a restart without rewriting each record's header. An entry (namespace id,
// generation) means: every record of that namespace with a lower generation is dead. The file
// (`kvtier.drops` beside the first tier file) is text, one "namespace generation" per line, then
// "xxh3 <hash of the lines>"; it is replaced atomically (write a temporary, fdatasync, rename,
// fsync the directory) before DropNamespace returns. It is metadata, not tier data: ordinary
// buffered I/O is fine.
//
// Thread safety: none; DiskTier serializes calls.
#ifndef KVOFFLOAD_DAEMON_TIER_NAMESPACE_DROPS_H_
#define KVOFFLOAD_DAEMON_TIER_NAMESPACE_DROPS_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace kvoffload::tier {

// namespace id → generation of its latest drop.
using DropTable = absl::flat_hash_map<uint64_t, uint64_t>;

// An absent file is an empty table. A file that fails its checksum or does not parse is
// DATA_LOSS: the caller cannot know what was dropped and must treat every record as dead.
absl::StatusOr<DropTable> LoadDrops(const std::string& path);
absl::Status SaveDrops(const std::string& path, const DropTable& drops);

// True when a record of `namespace_id` at `generation` was dropped.
bool IsDropped(const DropTable& drops, uint64_t namespace_id, uint64_t generation);

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_NAMESPACE_DROPS_H_
