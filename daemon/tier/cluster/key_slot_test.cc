#include "daemon/tier/cluster/key_slot.h"

#include <string>

#include "gtest/gtest.h"

namespace kvoffload::tier::cluster {
namespace {

TEST(Crc16, RedisSpecTestVector) { EXPECT_EQ(Crc16("123456789"), 0x31C3); }

TEST(Crc16, EmptyIsZero) { EXPECT_EQ(Crc16(""), 0); }

TEST(KeySlot, ValuesFromTheClusterKeyslotDocumentation) {
  EXPECT_EQ(KeySlot("somekey"), 11058);
  EXPECT_EQ(KeySlot("foo{hash_tag}"), 2515);
}

TEST(KeySlot, IsCrc16ModuloSlots) {
  for (const std::string key : {"a", "kvo/0000000000000001/ab/0", "123456789"}) {
    EXPECT_EQ(KeySlot(key), Crc16(key) % 16384) << key;
  }
}

TEST(KeySlot, HashTagsFollowTheSpec) {
  // Only the bytes between the first '{' and the first '}' after it.
  EXPECT_EQ(HashedPart("{user1000}.following"), "user1000");
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(HashedPart("foo{bar}{zap}"), "bar");
  EXPECT_EQ(HashedPart("foo{{bar}}zap"), "{bar");
  // An empty tag or no closing brace: the whole key.
  EXPECT_EQ(HashedPart("foo{}{bar}"), "foo{}{bar}");
  EXPECT_EQ(HashedPart("foo{bar"), "foo{bar");
  EXPECT_EQ(HashedPart("}foo{"), "}foo{");
  EXPECT_EQ(KeySlot("foo{hash_tag}"), KeySlot("hash_tag"));
}

TEST(KeySlot, BinaryKeysUseEveryByte) {
  const std::string a("a\0b", 3);
  const std::string b("a\0c", 3);
  EXPECT_NE(Crc16(a), Crc16(b));
  EXPECT_NE(Crc16(a), Crc16("a"));
}

}  // namespace
}  // namespace kvoffload::tier::cluster
