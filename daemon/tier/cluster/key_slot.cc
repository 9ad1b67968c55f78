#include "daemon/tier/cluster/key_slot.h"

#include <array>

namespace kvoffload::tier::cluster {
namespace {

// Byte-at-a-time table for CRC16/XMODEM, built at compile time from the polynomial.
constexpr std::array<uint16_t, 256> MakeTable() {
  std::array<uint16_t, 256> table{};
  for (int byte = 0; byte < 256; ++byte) {
    uint16_t crc = static_cast<uint16_t>(byte << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint16_t, 256> kTable = MakeTable();

}  // namespace

uint16_t Crc16(absl::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char c : bytes) {
    crc = static_cast<uint16_t>((crc << 8) ^ kTable[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

absl::string_view HashedPart(absl::string_view key) {
  const size_t open = key.find('{');
  if (open == absl::string_view::npos) return key;
  const size_t close = key.find('}', open + 1);
  if (close == absl::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

uint16_t KeySlot(absl::string_view key) { return Crc16(HashedPart(key)) % kClusterSlots; }

}  // namespace kvoffload::tier::cluster
