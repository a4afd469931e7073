// The merge loop BPE and SPM share: a word's symbols as a doubly linked list, adjacent pairs in a
// heap, and the best pair merged into its left symbol until no pair is known (llama.cpp's
// llm_tokenizer_bpe / llm_tokenizer_spm). What "best" means (BPE: lowest rank; SPM: highest score)
// and which pairs exist are the caller's.
// Thread-safety: pure functions over caller memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace strata {

struct MergeSymbol {
  int32_t prev;
  int32_t next;
  uint32_t start;   // byte offset in the text
  uint32_t length;  // bytes; 0 once merged into its left neighbour
  int32_t id;       // the symbol's token (SPM: a character symbol id until merged)
};

template <class Priority>
struct MergePair {
  Priority priority;  // BPE: merge rank; SPM: token score
  int32_t left;
  int32_t right;
  uint32_t length;  // bytes of the pair when queued; stale when the symbols changed since
  int32_t result;   // token of the merged pair
};

// Merges `symbols` (linked through prev/next, starting at 0) in place. `lower_priority(a, b)`
// orders the heap (true when a merges after b); `find(left, right, &pair)` fills pair.priority and
// pair.result and says whether the two symbols merge. `heap` is scratch.
template <class Priority, class Less, class Find>
void merge_pairs(std::vector<MergeSymbol>& symbols, std::vector<MergePair<Priority>>& heap, Less lower_priority,
                 Find find) {
  heap.clear();
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const MergeSymbol& l = symbols[static_cast<size_t>(left)];
    const MergeSymbol& r = symbols[static_cast<size_t>(right)];
    MergePair<Priority> pair{Priority{}, left, right, l.length + r.length, 0};
    if (!find(l, r, &pair)) return;
    heap.push_back(pair);
    std::push_heap(heap.begin(), heap.end(), lower_priority);
  };
  const auto n = static_cast<int32_t>(symbols.size());
  for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), lower_priority);
    const MergePair<Priority> b = heap.back();
    heap.pop_back();
    MergeSymbol& l = symbols[static_cast<size_t>(b.left)];
    MergeSymbol& r = symbols[static_cast<size_t>(b.right)];
    if (l.length == 0 || r.length == 0 || l.length + r.length != b.length) continue;
    l.length += r.length;
    r.length = 0;
    l.id = b.result;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
}

}  // namespace strata
