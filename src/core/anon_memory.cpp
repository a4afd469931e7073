#include "core/anon_memory.h"

#include <sys/mman.h>

#include <utility>

#include "core/error.h"
#include "core/units.h"

namespace strata {

AnonymousMemory::AnonymousMemory(uint64_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot allocate {} of memory", format_bytes(bytes));
  data_ = static_cast<uint8_t*>(p);
}

AnonymousMemory::~AnonymousMemory() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

AnonymousMemory::AnonymousMemory(AnonymousMemory&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

AnonymousMemory& AnonymousMemory::operator=(AnonymousMemory&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace strata
