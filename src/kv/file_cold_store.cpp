#include "kv/file_cold_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "core/error.h"
#include "core/units.h"

namespace strata {

FileColdStore::FileColdStore(const std::string& dir, uint64_t total_bytes, uint64_t slot_bytes)
    : dir_(dir), slot_bytes_(slot_bytes), num_slots_(static_cast<int64_t>(total_bytes / slot_bytes)) {
  STRATA_CHECK(slot_bytes > 0);
  if (num_slots_ == 0) {
    fail("--kv-spill-size {} is smaller than one KV block ({})", format_bytes(total_bytes), format_bytes(slot_bytes));
  }
  std::string path = dir + "/strata-kv-spill-XXXXXX";
  fd_ = ::mkstemp(path.data());
  if (fd_ < 0) fail("--kv-spill-dir '{}': cannot create a file there: {}", dir, std::strerror(errno));
  ::unlink(path.c_str());
  const uint64_t bytes = static_cast<uint64_t>(num_slots_) * slot_bytes_;
  int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    ::close(fd_);
    fail("--kv-spill-dir '{}': cannot reserve {}: {}", dir, format_bytes(bytes), std::strerror(rc));
  }
  thread_ = std::thread([this] { io_loop(); });
}

FileColdStore::~FileColdStore() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

std::string FileColdStore::describe() const {
  return fmt::format("file in {} ({}, {} slots of {})", dir_, format_bytes(static_cast<uint64_t>(num_slots_) * slot_bytes_),
                     num_slots_, format_bytes(slot_bytes_));
}

void FileColdStore::write(int64_t slot, std::vector<uint8_t> bytes) {
  STRATA_CHECK(slot >= 0 && slot < num_slots_ && bytes.size() <= slot_bytes_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({true, slot, bytes.size(), 0, std::move(bytes)});
    ++in_flight_;
  }
  cv_.notify_one();
}

uint64_t FileColdStore::read(int64_t slot, uint64_t n) {
  STRATA_CHECK(slot >= 0 && slot < num_slots_ && n <= slot_bytes_);
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket = next_ticket_++;
    queue_.push_back({false, slot, n, ticket, {}});
    ++in_flight_;
  }
  cv_.notify_one();
  return ticket;
}

std::vector<uint8_t> FileColdStore::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return finished_.count(ticket) > 0; });
  auto it = finished_.find(ticket);
  Done done = std::move(it->second);
  finished_.erase(it);
  if (!done.error.empty()) fail("KV spill file in {}: {}", dir_, done.error);
  return std::move(done.bytes);
}

void FileColdStore::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return in_flight_ == 0; });
}

void FileColdStore::drop_page_cache() {
  drain();
  ::fdatasync(fd_);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
}

void FileColdStore::io_loop() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and nothing left
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    const off_t offset = static_cast<off_t>(static_cast<uint64_t>(op.slot) * slot_bytes_);
    std::string err;
    if (op.is_write) {
      size_t done = 0;
      while (done < op.bytes.size()) {
        ssize_t w = ::pwrite(fd_, op.bytes.data() + done, op.bytes.size() - done, offset + static_cast<off_t>(done));
        if (w <= 0) {
          if (w < 0 && errno == EINTR) continue;
          err = fmt::format("write of slot {} failed: {}", op.slot, std::strerror(errno));
          break;
        }
        done += static_cast<size_t>(w);
      }
      if (err.empty()) failed_writes_.erase(op.slot);
      else failed_writes_[op.slot] = err;
    } else if (auto fw = failed_writes_.find(op.slot); fw != failed_writes_.end()) {
      err = fmt::format("read of slot {}: its last write failed ({})", op.slot, fw->second);
    } else {
      op.bytes.resize(op.n);
      size_t done = 0;
      while (done < op.n) {
        ssize_t r = ::pread(fd_, op.bytes.data() + done, op.n - done, offset + static_cast<off_t>(done));
        if (r <= 0) {
          if (r < 0 && errno == EINTR) continue;
          err = fmt::format("read of slot {} failed: {}", op.slot, r == 0 ? "end of file" : std::strerror(errno));
          break;
        }
        done += static_cast<size_t>(r);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!op.is_write) finished_[op.ticket] = Done{std::move(op.bytes), std::move(err)};
      --in_flight_;
    }
    done_cv_.notify_all();
  }
}

}  // namespace strata
