// What the scheduler tests share: a scheduler, KV manager and storage driven by the step protocol
// (engine/step_runner.h) with a deterministic fake model (no weights) in place of the forward pass.
// Thread-safety: one test thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/step_runner.h"
#include "sched/scheduler.h"

namespace strata::test {

// Blocks of 4 tokens of a tiny f32 geometry (kFakeGeometry), `blocks` of them.
inline KvConfig kv_cfg(int32_t blocks) {
  KvConfig c;
  c.block_size = 4;
  c.dtype = KvDtype::kF32;
  c.num_blocks = blocks;
  return c;
}
inline const KvGeometry kFakeGeometry{1, 1, 2, 4, KvDtype::kF32};

// Drives a scheduler like the engine does, with a fake model: the next token of a sequence is a
// function of its last token; sequences stop after max_tokens.
class FakeEngine {
 public:
  FakeEngine(SchedulerConfig sc, const KvConfig& kc)
      : storage_(kFakeGeometry, kc), kv_(kFakeGeometry, kc, storage_.capacity(), 7), sched_(sc, kv_),
        runner_(sched_, kv_, storage_) {}
  FakeEngine(SchedulerConfig sc, int32_t blocks) : FakeEngine(sc, kv_cfg(blocks)) {}

  // A sequence with the prompt first, first + 1, ... (prompt_len tokens).
  SeqId add(int32_t prompt_len, int32_t max_tokens, int32_t priority = 0, std::string tenant = "",
            TokenId first = 1) {
    std::vector<TokenId> prompt;
    for (int i = 0; i < prompt_len; ++i) prompt.push_back(first + i);
    return add_prompt(std::move(prompt), max_tokens, priority, std::move(tenant));
  }

  // A sequence with this prompt; n_samples > 1 forks the others when its prompt is done (with
  // fork_on_prompt_done).
  SeqId add_prompt(std::vector<TokenId> prompt, int32_t max_tokens, int32_t priority = 0, std::string tenant = "",
                   int32_t n_samples = 1) {
    Sequence s;
    s.id = next_id_++;
    s.request = s.id;
    s.priority = priority;
    s.tenant = std::move(tenant);
    s.arrival = Clock::time_point(std::chrono::milliseconds(s.id));
    s.arrival_seq = static_cast<uint64_t>(s.id);
    s.n_prompt = static_cast<int32_t>(prompt.size());
    s.tokens = std::move(prompt);
    s.max_tokens = max_tokens;
    s.n_fork_children = n_samples - 1;
    if (decorate) decorate(s);
    sched_.add(std::move(s));
    return next_id_ - 1;
  }

  // A dry run: the plan of the next step, nothing executed.
  SchedulerOutput plan() { return sched_.schedule(); }

  SchedulerOutput step() {
    SchedulerOutput out = runner_.prepare().out;
    runner_.done(out);
    for (const auto& sc : out.seqs) {
      if (!sc.logits) continue;
      std::vector<SeqId> group{sc.id};
      if (fork_on_prompt_done && sched_.seq(sc.id).n_fork_children > 0) {
        for (SeqId c : sched_.fork_children(sc.id)) group.push_back(c);
      }
      for (SeqId id : group) {
        Sequence& s = sched_.seq(id);
        sched_.append_token(id, (s.tokens.back() * 31 + 7 + s.sample_index) % 1000);
        ++generated_[id];
        served_[s.tenant] += 1;
        if (s.n_generated() >= s.max_tokens) {
          finished_.push_back(id);
          cached_tokens_[id] = s.cached_tokens;
          sched_.finish(id);
        }
      }
    }
    for (const auto& sc : out.seqs) {
      if (sched_.has(sc.id) && sc.start < sched_.seq(sc.id).n_prompt) {
        served_[sched_.seq(sc.id).tenant] += std::min(sc.n_new, sched_.seq(sc.id).n_prompt - sc.start);
      }
    }
    kv_.check_invariants();
    return out;
  }

  KvStorage storage_;
  KvManager kv_;
  Scheduler sched_;
  StepRunner runner_;
  bool fork_on_prompt_done = false;
  // Called on every new sequence before the scheduler sees it (QoS class, deadline, ...).
  std::function<void(Sequence&)> decorate;
  std::map<SeqId, int> generated_;
  std::map<std::string, int64_t> served_;
  std::vector<SeqId> finished_;
  std::map<SeqId, int32_t> cached_tokens_;  // Sequence::cached_tokens of each finished sequence
  SeqId next_id_ = 1;
};

}  // namespace strata::test
