// FileColdStore (kv/file_cold_store.h): bytes written to a slot read back exactly, in submission
// order; its capacity is whole slots of the given size; impossible configurations are errors
// naming the problem; a read that fails is reported for that read only, and the store keeps
// working for the others.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "kv/file_cold_store.h"
#include "support/test_support.h"

namespace strata {
namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8));
  return b;
}


class ColdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("strata-cold"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ColdStoreTest, BytesWrittenReadBackExactly) {
  FileColdStore store(dir_, 10 * 4096 + 100, 4096);
  EXPECT_EQ(store.num_slots(), 10) << "capacity is whole slots";
  EXPECT_EQ(store.slot_bytes(), 4096u);
  EXPECT_NE(store.describe().find(dir_), std::string::npos) << store.describe();
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "the file is unlinked at once";
  for (int64_t s = 0; s < 10; ++s) store.write(s, pattern(4096, static_cast<uint8_t>(s)));
  // Read in another order; a short read gets the slot's first n bytes.
  std::vector<uint64_t> tickets;
  for (int64_t s = 9; s >= 0; --s) tickets.push_back(store.read(s, 4096));
  const uint64_t short_ticket = store.read(3, 10);
  for (int64_t s = 9; s >= 0; --s) EXPECT_EQ(store.wait(tickets[static_cast<size_t>(9 - s)]), pattern(4096, static_cast<uint8_t>(s))) << s;
  const auto whole = pattern(4096, 3);
  EXPECT_EQ(store.wait(short_ticket), std::vector<uint8_t>(whole.begin(), whole.begin() + 10));
  store.drain();
}

TEST_F(ColdStoreTest, ReadsSeeTheWritesQueuedBeforeThem) {
  FileColdStore store(dir_, 4 * 512, 512);
  store.write(1, pattern(512, 1));
  const uint64_t a = store.read(1, 512);
  store.write(1, pattern(512, 2));  // overwritten after the read was queued
  const uint64_t b = store.read(1, 512);
  store.write(2, pattern(100, 5));  // a partial slot
  const uint64_t c = store.read(2, 100);
  EXPECT_EQ(store.wait(b), pattern(512, 2));
  EXPECT_EQ(store.wait(a), pattern(512, 1));
  EXPECT_EQ(store.wait(c), pattern(100, 5));
  store.drain();
}

TEST_F(ColdStoreTest, AStoreSmallerThanOneSlotIsAnError) {
  try {
    FileColdStore store(dir_, 1000, 4096);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("smaller than one KV block"), std::string::npos) << e.what();
  }
}

TEST_F(ColdStoreTest, ADirectoryThatCannotHoldTheFileIsAnErrorNamingIt) {
  // Tests run as root, so permissions do not stop a write: use a "directory" that is a file.
  const std::string file = dir_ + "/not-a-dir";
  std::ofstream(file) << "x";
  const std::string bad = file + "/spill";
  try {
    FileColdStore store(bad, 1 << 20, 4096);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot create a file there"), std::string::npos) << e.what();
  }
  try {
    FileColdStore store(dir_ + "/does/not/exist", 1 << 20, 4096);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does/not/exist"), std::string::npos) << e.what();
  }
}

TEST_F(ColdStoreTest, AFailedReadIsReportedForThatReadOnly) {
  FileColdStore store(dir_, 8 * 256, 256);
  for (int64_t s = 0; s < 8; ++s) store.write(s, pattern(256, static_cast<uint8_t>(s)));
  store.drain();
  const int fd = test::reopen_open_file(0, "strata-kv-spill-");
  ASSERT_GE(fd, 0) << "spill file not found in /proc/self/fd";
  // Cut the file after slot 3: reads of slots 4.. hit the end of the file.
  ASSERT_EQ(::ftruncate(fd, 4 * 256), 0);
  const uint64_t bad = store.read(6, 256);
  const uint64_t good = store.read(2, 256);
  try {
    store.wait(bad);
    FAIL() << "a read past the end of the file must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot 6"), std::string::npos) << e.what();
  }
  // Other reads are not affected, before or after the failure.
  EXPECT_EQ(store.wait(good), pattern(256, 2));
  EXPECT_EQ(store.wait(store.read(0, 256)), pattern(256, 0));
  // Writing the slot again makes it readable again.
  store.write(6, pattern(256, 66));
  EXPECT_EQ(store.wait(store.read(6, 256)), pattern(256, 66));
  ::close(fd);
  store.drain();
}

}  // namespace
}  // namespace strata
