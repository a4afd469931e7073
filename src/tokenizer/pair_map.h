// A flat open-addressing hash map from a pair of symbol ids to a merge result. SPM and BPE look up
// every adjacent symbol pair of the text, millions of times per megabyte, so the table is flat,
// power-of-two sized and keyed by one 64-bit integer.
// Thread-safety: not synchronised; build once, then any thread may call find() concurrently.
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

template <typename Value>
class PairMap {
 public:
  // Inserts (a, b) -> value unless (a, b) is present. Returns whether it inserted.
  bool insert(uint32_t a, uint32_t b, const Value& value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const uint64_t key = make_key(a, b);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = {key, value};
        ++size_;
        return true;
      }
      if (slots_[i].key == key) return false;
    }
  }

  const Value* find(uint32_t a, uint32_t b) const {
    if (size_ == 0) return nullptr;
    const uint64_t key = make_key(a, b);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    Value value{};
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are < 2^31, so no real key equals it

  static uint64_t make_key(uint32_t a, uint32_t b) { return (uint64_t{a} << 32) | b; }
  size_t slot_of(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_); }

  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    const size_t n = old.empty() ? 1024 : old.size() * 2;
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    shift_ = 64;
    for (size_t s = n; s > 1; s >>= 1) --shift_;
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != kEmpty) insert(static_cast<uint32_t>(s.key >> 32), static_cast<uint32_t>(s.key), s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t size_ = 0;
};

}  // namespace strata
