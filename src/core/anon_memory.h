// Zeroed anonymous memory from mmap (RAII). Pages are materialized on first touch, so a large
// pool costs resident memory only as it is used, and returns whole to the kernel on release.
// With Pages::kHuge the block starts on a 2 MiB boundary and is advised for transparent huge pages
// (madvise MADV_HUGEPAGE; a hint: where THP is off the kernel keeps 4 KiB pages). Data streamed
// from huge pages needs no page walk per 4 KiB, and the hardware prefetchers, which stop at page
// boundaries, run on: the CPU backend's decode reads its weights from such a copy (cpu_backend.h).
// Thread-safety: the object is not shared; the memory is plain bytes.
#pragma once

#include <cstdint>

namespace strata {

class AnonymousMemory {
 public:
  enum class Pages { kDefault, kHuge };
  static constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

  AnonymousMemory() = default;
  // Throws strata::Error when the mapping fails.
  explicit AnonymousMemory(uint64_t bytes, Pages pages = Pages::kDefault);
  ~AnonymousMemory();
  AnonymousMemory(const AnonymousMemory&) = delete;
  AnonymousMemory& operator=(const AnonymousMemory&) = delete;
  AnonymousMemory(AnonymousMemory&& o) noexcept;
  AnonymousMemory& operator=(AnonymousMemory&& o) noexcept;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  void release();

  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;  // the mapping (data_ rounded down to its start for kHuge)
  uint64_t map_bytes_ = 0;
};

}  // namespace strata
