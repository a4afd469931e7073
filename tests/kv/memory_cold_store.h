// A cold tier in memory for tests of KvStorage (kv/cold_store.h): slots are byte vectors written
// and read through write()/read()/wait() as a file store's would be; reads can be made to fail
// (failing_) and slots damaged (slots_). A read sees the slot as it was when the read was issued
// (as the file store's ordered queue does).
// Thread-safety: none (the tests drive it from one thread).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kv/cold_store.h"

namespace strata::test {

class MemoryColdStore : public ColdStore {
 public:
  MemoryColdStore(int64_t slots, uint64_t slot_bytes) : n_(slots), slot_bytes_(slot_bytes) {}
  int64_t num_slots() const override { return n_; }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  std::string describe() const override { return "memory"; }
  void write(int64_t slot, std::vector<uint8_t> bytes) override { slots_[slot] = std::move(bytes); }
  uint64_t read(int64_t slot, uint64_t n) override {
    std::vector<uint8_t> b = slots_[slot];
    b.resize(std::min<size_t>(b.size(), n));
    reads_[next_] = {slot, std::move(b)};
    return next_++;
  }
  std::vector<uint8_t> wait(uint64_t ticket) override {
    auto r = reads_.at(ticket);
    reads_.erase(ticket);
    if (failing_.count(r.first)) throw Error("read of slot failed");
    return r.second;
  }
  void drain() override {}
  int64_t reads_issued() const { return static_cast<int64_t>(next_) - 1; }

  std::map<int64_t, std::vector<uint8_t>> slots_;
  std::set<int64_t> failing_;

 private:
  int64_t n_;
  uint64_t slot_bytes_;
  uint64_t next_ = 1;
  std::map<uint64_t, std::pair<int64_t, std::vector<uint8_t>>> reads_;
};

}  // namespace strata::test
