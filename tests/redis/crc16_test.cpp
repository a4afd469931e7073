// redis/crc16: CRC16-XMODEM and Redis Cluster key slots, hash tags included. (The cluster test
// checks key_slot() against a real server's CLUSTER KEYSLOT.)
#include <gtest/gtest.h>

#include <string>

#include "redis/crc16.h"

namespace strata::redis {
namespace {

TEST(Crc16, KnownValues) {
  EXPECT_EQ(crc16(""), 0);
  EXPECT_EQ(crc16("123456789"), 0x31C3);  // the XMODEM check value (and Redis's crc16 test)
  EXPECT_EQ(crc16(std::string("\0", 1)), 0);
  EXPECT_EQ(crc16("A"), 0x58E5);
}

TEST(Crc16, KeySlots) {
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot("hello"), 866);
  EXPECT_EQ(key_slot(""), 0);
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
}

TEST(Crc16, HashTags) {
  EXPECT_EQ(hash_tag("{user1000}.following"), "user1000");
  EXPECT_EQ(hash_tag("foo{bar}{zap}"), "bar");        // the first '{' and the next '}'
  EXPECT_EQ(hash_tag("foo{{bar}}zap"), "{bar");
  EXPECT_EQ(hash_tag("foo{}{bar}"), "foo{}{bar}");    // empty tag: the whole key
  EXPECT_EQ(hash_tag("foo{bar"), "foo{bar");          // no closing brace
  EXPECT_EQ(hash_tag("foo}bar{"), "foo}bar{");
  EXPECT_EQ(key_slot("foo{}{bar}"), crc16("foo{}{bar}") % 16384);
  EXPECT_EQ(key_slot("a{b}c"), key_slot("b"));
}

TEST(Crc16, SlotsInRange) {
  for (int i = 0; i < 10000; ++i) EXPECT_LT(key_slot("key:" + std::to_string(i)), kClusterSlots);
}

}  // namespace
}  // namespace strata::redis
