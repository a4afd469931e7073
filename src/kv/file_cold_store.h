// A ColdStore backed by one preallocated file (--kv-spill-dir, --kv-spill-size), written and read
// by a background I/O thread with pwrite/pread. The file is created in the directory, unlinked at
// once (so nothing is left behind after a crash), and its space reserved with fallocate.
// Thread-safety: see ColdStore.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "kv/cold_store.h"

namespace strata {

class FileColdStore : public ColdStore {
 public:
  // Throws strata::Error naming the directory when the file cannot be created or sized.
  FileColdStore(const std::string& dir, uint64_t total_bytes, uint64_t slot_bytes);
  ~FileColdStore() override;

  int64_t num_slots() const override { return num_slots_; }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  std::string describe() const override;

  void write(int64_t slot, std::vector<uint8_t> bytes) override;
  uint64_t read(int64_t slot, uint64_t n) override;
  std::vector<uint8_t> wait(uint64_t ticket) override;
  void drain() override;

  // Makes written slots durable and drops them from the page cache, so later reads come from
  // the disk (benchmarks; also returns the memory to the system).
  void drop_page_cache();

 private:
  struct Op {
    bool is_write;
    int64_t slot;
    uint64_t n;
    uint64_t ticket;
    std::vector<uint8_t> bytes;
  };
  void io_loop();

  std::string dir_;
  int fd_ = -1;
  uint64_t slot_bytes_;
  int64_t num_slots_;

  std::mutex mutex_;
  std::condition_variable cv_;       // new work / stop
  std::condition_variable done_cv_;  // completions
  struct Done {
    std::vector<uint8_t> bytes;
    std::string error;  // empty: the read succeeded
  };
  std::deque<Op> queue_;
  std::map<uint64_t, Done> finished_;                 // completed reads by ticket
  std::map<int64_t, std::string> failed_writes_;      // I/O thread only: slots whose last write failed
  uint64_t next_ticket_ = 1;
  uint64_t in_flight_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace strata
