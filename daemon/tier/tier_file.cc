#include "daemon/tier/tier_file.h"

#include <xxhash.h>

#include <cstring>
#include <random>

#include "absl/cleanup/cleanup.h"
#include "common/status_macros.h"
#include "daemon/tier/aligned_buffer.h"

namespace kvoffload::tier {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'O', 'T', 'F', 'I', 'L', '1'};
constexpr uint32_t kVersion = 1;

struct Superblock {
  char magic[8];
  uint32_t version;
  uint32_t file_index;
  uint32_t file_count;
  uint32_t reserved;
  uint64_t slot_bytes;
  uint64_t slots;
  uint64_t epoch;
  uint64_t hash;  // XXH3-64 of the fields above
};

uint64_t HashOf(const Superblock& sb) { return XXH3_64bits(&sb, offsetof(Superblock, hash)); }

uint64_t NewEpoch() {
  std::random_device rd;
  uint64_t e = 0;
  while (e == 0) e = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return e;
}

}  // namespace

absl::StatusOr<TierFile> OpenTierFile(BlockIo& io, const std::string& path,
                                      const TierFileGeometry& g, bool force_format) {
  ASSIGN_OR_RETURN(const int fd, io.OpenFile(path));
  auto close_on_error = absl::MakeCleanup([&] { io.CloseFile(fd); });
  ASSIGN_OR_RETURN(const uint64_t size, io.FileSize(fd));

  AlignedBuffer block(kSuperblockBytes);
  Superblock sb{};
  bool matches = false;
  if (size >= kSuperblockBytes && !force_format) {
    RETURN_IF_ERROR(SubmitAndWait(io, IoRequest::Read(fd, 0, {block.iov()})));
    std::memcpy(&sb, block.data(), sizeof(sb));
    matches = std::memcmp(sb.magic, kMagic, sizeof(kMagic)) == 0 && sb.version == kVersion &&
              sb.hash == HashOf(sb) && sb.slot_bytes == g.slot_bytes && sb.slots == g.slots &&
              sb.file_index == g.file_index && sb.file_count == g.file_count && sb.epoch != 0;
  }
  TierFile file;
  file.fd = fd;
  if (matches) {
    file.epoch = sb.epoch;
    if (size < g.file_bytes()) {
      RETURN_IF_ERROR(io.Preallocate(fd, g.file_bytes()));
      RETURN_IF_ERROR(io.Sync(fd));
      file.extended = true;
    }
  } else {
    RETURN_IF_ERROR(io.Preallocate(fd, g.file_bytes()));
    sb = Superblock{};
    std::memcpy(sb.magic, kMagic, sizeof(kMagic));
    sb.version = kVersion;
    sb.file_index = g.file_index;
    sb.file_count = g.file_count;
    sb.slot_bytes = g.slot_bytes;
    sb.slots = g.slots;
    sb.epoch = NewEpoch();
    sb.hash = HashOf(sb);
    std::memset(block.data(), 0, block.size());
    std::memcpy(block.data(), &sb, sizeof(sb));
    RETURN_IF_ERROR(SubmitAndWait(io, IoRequest::Write(fd, 0, {block.iov()})));
    RETURN_IF_ERROR(io.Sync(fd));
    file.epoch = sb.epoch;
    file.formatted = true;
  }
  std::move(close_on_error).Cancel();
  return file;
}

}  // namespace kvoffload::tier
