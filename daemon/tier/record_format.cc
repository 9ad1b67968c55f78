#include "daemon/tier/record_format.h"

#include <xxhash.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvoffload::tier {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'O', 'T', 'R', 'E', 'C', '1'};
constexpr size_t kVersionAt = 8;
constexpr size_t kKeyLengthAt = 12;
constexpr size_t kEpochAt = 16;
constexpr size_t kNamespaceAt = 24;
constexpr size_t kGenerationAt = 32;
constexpr size_t kPayloadBytesAt = 40;
constexpr size_t kPayloadHashAt = 48;
constexpr size_t kKeyAt = 56;
constexpr size_t kHeaderHashAt = kKeyAt + kMaxKeyBytes;

template <typename T>
void Put(unsigned char* block, size_t at, T value) {
  std::memcpy(block + at, &value, sizeof(T));
}

template <typename T>
T Get(const unsigned char* block, size_t at) {
  T value;
  std::memcpy(&value, block + at, sizeof(T));
  return value;
}

}  // namespace

uint64_t PayloadHash(const void* data, uint64_t bytes) { return XXH3_64bits(data, bytes); }

uint64_t NamespaceFingerprint(absl::string_view identity) {
  return XXH3_64bits(identity.data(), identity.size());
}

void EncodeRecordHeader(const RecordHeader& header, void* out) {
  auto* block = static_cast<unsigned char*>(out);
  std::memset(block, 0, kRecordHeaderBytes);
  std::memcpy(block, kMagic, sizeof(kMagic));
  Put<uint32_t>(block, kVersionAt, kRecordFormatVersion);
  Put<uint32_t>(block, kKeyLengthAt, static_cast<uint32_t>(header.key.size()));
  Put<uint64_t>(block, kEpochAt, header.file_epoch);
  Put<uint64_t>(block, kNamespaceAt, header.namespace_id);
  Put<uint64_t>(block, kGenerationAt, header.generation);
  Put<uint64_t>(block, kPayloadBytesAt, header.payload_bytes);
  Put<uint64_t>(block, kPayloadHashAt, header.payload_hash);
  std::memcpy(block + kKeyAt, header.key.data(), header.key.size());
  Put<uint64_t>(block, kHeaderHashAt, XXH3_64bits(block, kHeaderHashAt));
}

absl::StatusOr<RecordHeader> DecodeRecordHeader(const void* in) {
  const auto* block = static_cast<const unsigned char*>(in);
  if (std::memcmp(block, kMagic, sizeof(kMagic)) != 0) {
    return absl::NotFoundError("no record header");
  }
  if (Get<uint64_t>(block, kHeaderHashAt) != XXH3_64bits(block, kHeaderHashAt)) {
    return absl::DataLossError("record header checksum mismatch (torn or corrupted header)");
  }
  const uint32_t version = Get<uint32_t>(block, kVersionAt);
  if (version != kRecordFormatVersion) {
    return absl::DataLossError(absl::StrCat("record format version ", version, ", expected ",
                                            kRecordFormatVersion));
  }
  const uint32_t key_bytes = Get<uint32_t>(block, kKeyLengthAt);
  if (key_bytes == 0 || key_bytes > kMaxKeyBytes) {
    return absl::DataLossError(absl::StrCat("record key length ", key_bytes));
  }
  RecordHeader h;
  h.file_epoch = Get<uint64_t>(block, kEpochAt);
  h.namespace_id = Get<uint64_t>(block, kNamespaceAt);
  h.generation = Get<uint64_t>(block, kGenerationAt);
  h.payload_bytes = Get<uint64_t>(block, kPayloadBytesAt);
  h.payload_hash = Get<uint64_t>(block, kPayloadHashAt);
  h.key.assign(reinterpret_cast<const char*>(block + kKeyAt), key_bytes);
  return h;
}

}  // namespace kvoffload::tier
