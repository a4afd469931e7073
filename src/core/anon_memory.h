// Zeroed anonymous memory from mmap (RAII). Pages are materialized on first touch, so a large
// pool costs resident memory only as it is used, and returns whole to the kernel on release.
// Thread-safety: the object is not shared; the memory is plain bytes.
#pragma once

#include <cstdint>

namespace strata {

class AnonymousMemory {
 public:
  AnonymousMemory() = default;
  // Throws strata::Error when the mapping fails.
  explicit AnonymousMemory(uint64_t bytes);
  ~AnonymousMemory();
  AnonymousMemory(const AnonymousMemory&) = delete;
  AnonymousMemory& operator=(const AnonymousMemory&) = delete;
  AnonymousMemory(AnonymousMemory&& o) noexcept;
  AnonymousMemory& operator=(AnonymousMemory&& o) noexcept;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace strata
