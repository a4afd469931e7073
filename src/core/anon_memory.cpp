#include "core/anon_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/units.h"

namespace strata {

AnonymousMemory::AnonymousMemory(uint64_t bytes, Pages pages) : size_(bytes) {
  if (bytes == 0) return;
  // kHuge: one huge page more, so that a 2 MiB boundary with `bytes` after it lies inside.
  map_bytes_ = pages == Pages::kHuge ? bytes + kHugePageBytes : bytes;
  void* p = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot allocate {} of memory", format_bytes(bytes));
  map_ = p;
  data_ = static_cast<uint8_t*>(p);
  if (pages == Pages::kHuge) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    data_ = reinterpret_cast<uint8_t*>((a + kHugePageBytes - 1) & ~(kHugePageBytes - 1));
    // Advice only: a kernel without THP (or with it set to never) leaves 4 KiB pages. Up to the
    // huge page that holds the last byte, within the mapping.
    const uint64_t offset = static_cast<uint64_t>(data_ - static_cast<uint8_t*>(p));
    const uint64_t len = std::min((bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1), map_bytes_ - offset);
    (void)::madvise(data_, len, MADV_HUGEPAGE);
  }
}

void AnonymousMemory::release() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  data_ = nullptr;
  size_ = map_bytes_ = 0;
}

AnonymousMemory::~AnonymousMemory() { release(); }

AnonymousMemory::AnonymousMemory(AnonymousMemory&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)) {}

AnonymousMemory& AnonymousMemory::operator=(AnonymousMemory&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
  }
  return *this;
}

}  // namespace strata
