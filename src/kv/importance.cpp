#include "kv/importance.h"

#include <algorithm>

#include "core/check.h"

namespace strata {

float* ImportanceStore::step_buffer(SeqId s, int32_t n) {
  STRATA_CHECK(n >= 0);
  Entry& e = m_[s];
  e.mass.assign(static_cast<size_t>(n), 0.0f);
  return e.mass.data();
}

std::span<const float> ImportanceStore::step_mass(SeqId s) const {
  auto it = m_.find(s);
  if (it == m_.end()) return {};
  return it->second.mass;
}

void ImportanceStore::clear_step(SeqId s) {
  auto it = m_.find(s);
  if (it != m_.end()) it->second.mass.clear();
}

std::span<float> ImportanceStore::scores(SeqId s, int32_t n) {
  Entry& e = m_[s];
  e.scores.resize(static_cast<size_t>(n), 0.0f);
  return e.scores;
}

std::span<const float> ImportanceStore::scores(SeqId s) const {
  auto it = m_.find(s);
  if (it == m_.end()) return {};
  return it->second.scores;
}

void ImportanceStore::apply_moves(SeqId s, std::span<const std::pair<int32_t, int32_t>> moves, int32_t n) {
  Entry& e = m_[s];
  for (const auto& [from, to] : moves) {
    STRATA_CHECK(from >= 0 && to >= 0 && static_cast<size_t>(std::max(from, to)) < e.scores.size(),
                 "importance move {} -> {} of {} slots", from, to, e.scores.size());
    e.scores[static_cast<size_t>(to)] = e.scores[static_cast<size_t>(from)];
  }
  e.scores.resize(static_cast<size_t>(n), 0.0f);
}

void ImportanceStore::fork(SeqId parent, SeqId child) {
  auto it = m_.find(parent);
  if (it == m_.end()) return;
  Entry c;
  c.scores = it->second.scores;
  m_[child] = std::move(c);
}

void ImportanceStore::reset(SeqId s) {
  auto it = m_.find(s);
  if (it != m_.end()) it->second.scores.clear();
}

void ImportanceStore::erase(SeqId s) { m_.erase(s); }

}  // namespace strata
