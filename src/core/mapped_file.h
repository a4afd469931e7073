// Read-only memory mapping of a whole file (RAII). Thread-safety: immutable after construction;
// any thread may read the bytes concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace strata {

class MappedFile {
 public:
  // Maps `path` read-only. Throws strata::Error naming the path when it cannot be opened or mapped.
  // An empty file maps to an empty span.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Tells the kernel this process needs the whole pages of [p, p + bytes) no more (a range inside
  // the mapping; pages it shares with bytes outside are kept). They leave the process's resident
  // set and stay in the page cache (clean, reclaimable); a later read faults them in again with the
  // file's bytes, so readers never see other bytes. For bytes a backend has copied.
  void drop_pages(const uint8_t* p, uint64_t bytes) const;

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata
