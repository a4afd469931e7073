#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace strata {

Scheduler::Scheduler(const SchedulerConfig& cfg, KvManager& kv)
    : cfg_(cfg), kv_(kv), vtc_(cfg.fair_w_in, cfg.fair_w_out, cfg.tenant_weights),
      drf_(cfg.tenant_weights, cfg.drf_window_steps) {
  STRATA_CHECK(cfg.max_batched_tokens > 0 && cfg.max_seqs > 0);
}

void Scheduler::set_max_batched_tokens(int32_t n) {
  STRATA_CHECK(n > 0, "max_batched_tokens {}", n);
  cfg_.max_batched_tokens = n;
}

void Scheduler::set_max_seqs(int32_t n) {
  STRATA_CHECK(n > 0, "max_seqs {}", n);
  cfg_.max_seqs = n;
}

void Scheduler::set_watermark(double w) {
  STRATA_CHECK(w >= 0 && w < 1, "watermark {}", w);
  cfg_.watermark = w;
}

void Scheduler::set_batch_admission(int32_t horizon_tokens, double reserve) {
  STRATA_CHECK(horizon_tokens > 0 && reserve >= 0 && reserve < 1, "batch admission {} {}", horizon_tokens, reserve);
  batch_horizon_tokens_ = horizon_tokens;
  batch_reserve_ = reserve;
}

DemandCurve Scheduler::demand_curve(const Sequence& s, int32_t from, int32_t extra) const {
  DemandCurve c;
  c.from = from;
  // In slots: a sequence that evicted tokens holds that many fewer than its positions.
  const int64_t evicted = evictor_ != nullptr && kv_.has_sequence(s.id) ? kv_.num_evicted(s.id) : 0;
  // The last token sampled is never computed: at most prompt + max_tokens - 1 tokens get slots.
  const int64_t last = int64_t{s.n_prompt} + s.max_tokens - 1 - evicted;
  c.last = static_cast<int32_t>(std::clamp<int64_t>(last, from, INT32_MAX));
  c.first = static_cast<int32_t>(std::clamp<int64_t>(int64_t{s.n_prompt} - evicted, from, c.last));
  if (evictor_ != nullptr) {
    // Thinned back to its budget after every step; in a step it holds that step's tokens more (a
    // decode's one, or a prompt chunk).
    const int64_t bs = kv_.block_size();
    const int64_t step = s.prompt_done() ? 1 : cfg_.max_batched_tokens;
    const int64_t budget = evictor_->budget_for(s.kv_budget);
    c.max_blocks = static_cast<int32_t>(std::min<int64_t>((budget + step + bs - 1) / bs, INT32_MAX));
  }
  c.extra = extra;
  c.held = extra > 0 || !kv_.has_sequence(s.id) || s.status != SeqStatus::kRunning
               ? extra : std::min<int32_t>(static_cast<int32_t>(kv_.block_table(s.id).size()), demand_shape().max_hot_blocks);
  return c;
}

DemandShape Scheduler::demand_shape() const {
  DemandShape shape;
  shape.block_size = kv_.block_size();
  // With a warm tier only the hot window (and the block being filled) stays hot.
  if (kv_.has_warm_tier()) shape.max_hot_blocks = (kv_.hot_tokens() + shape.block_size - 1) / shape.block_size + 1;
  return shape;
}

int64_t Scheduler::peak_demand_with(const DemandCurve* candidate, int32_t horizon_tokens) const {
  std::vector<DemandCurve> curves;
  for (const auto& [id, s] : seqs_) {
    if (s->status == SeqStatus::kRunning) curves.push_back(demand_curve(*s, kv_.num_tokens(id), 0));
  }
  if (candidate != nullptr) curves.push_back(*candidate);
  return peak_demand(kv_.num_hot_blocks() - kv_.num_available_blocks(), curves, horizon_tokens, demand_shape());
}

int32_t Scheduler::projected_demand_blocks(int32_t horizon_tokens) const {
  return static_cast<int32_t>(std::min<int64_t>(peak_demand_with(nullptr, horizon_tokens), INT32_MAX));
}

bool Scheduler::batch_demand_fits(const Sequence& s, int32_t blocks_new, int32_t from) const {
  if (batch_horizon_tokens_ == 0 || s.qos != QosClass::kBatch || !any_running()) return true;
  const DemandCurve c = demand_curve(s, from, blocks_new);
  return static_cast<double>(peak_demand_with(&c, batch_horizon_tokens_)) <= (1.0 - batch_reserve_) * kv_.num_hot_blocks();
}

void Scheduler::mark_backlogged(const std::string& tenant) {
  std::set<std::string> backlogged;
  bool already = false;
  for (const auto& [id, s] : seqs_) {
    backlogged.insert(s->tenant);
    already = already || s->tenant == tenant;
  }
  if (!already) vtc_.on_backlogged(tenant, backlogged);
}

void Scheduler::add(Sequence seq) {
  STRATA_CHECK(!seq.tokens.empty() && !seqs_.count(seq.id), "bad or duplicate sequence {}", seq.id);
  if (cfg_.policy == SchedulingPolicy::kFair) mark_backlogged(seq.tenant);
  seq.status = SeqStatus::kWaiting;
  seq.num_computed = 0;
  kv_.add_sequence(seq.id);
  const SeqId id = seq.id;
  seqs_.emplace(id, std::make_unique<Sequence>(std::move(seq)));
}

bool Scheduler::queue_before(const Sequence& a, const Sequence& b) const {
  if (a.qos != b.qos) return a.qos < b.qos;  // interactive first
  if (cfg_.policy == SchedulingPolicy::kPriority && a.priority != b.priority) return a.priority > b.priority;
  if (cfg_.policy == SchedulingPolicy::kDrf && a.tenant != b.tenant) {
    const double da = drf_.dominant_share(a.tenant), db = drf_.dominant_share(b.tenant);
    if (da != db) return da < db;
  }
  if (a.deadline != b.deadline) return a.deadline < b.deadline;  // EDF within a class
  if (a.arrival != b.arrival) return a.arrival < b.arrival;
  if (a.arrival_seq != b.arrival_seq) return a.arrival_seq < b.arrival_seq;
  return a.id < b.id;
}

bool Scheduler::admits_before(const Sequence& a, const Sequence& b) const {
  if (a.qos != b.qos) return a.qos < b.qos;
  if (cfg_.policy == SchedulingPolicy::kFair && a.tenant != b.tenant) {
    const double ca = vtc_.counter(a.tenant), cb = vtc_.counter(b.tenant);
    if (ca != cb) return ca < cb;
  }
  return queue_before(a, b);
}

int32_t Scheduler::watermark_blocks() const {
  return static_cast<int32_t>(std::ceil(cfg_.watermark * kv_.num_hot_blocks()));
}

SeqId Scheduler::pick_victim(const std::set<SeqId>& except, bool allow_protected) const {
  const Sequence* victim = nullptr;
  for (const auto& [id, s] : seqs_) {
    if (s->status != SeqStatus::kRunning || except.count(id)) continue;
    if (s->protected_from_preemption && !allow_protected) continue;
    // The victim is the one that would be scheduled last: lowest priority, latest arrival.
    if (victim == nullptr || queue_before(*victim, *s)) victim = s.get();
  }
  return victim ? victim->id : kNoSeq;
}

bool Scheduler::preempt(SeqId id, SchedulerOutput& out) {
  Sequence& s = *seqs_.at(id);
  STRATA_CHECK(s.status == SeqStatus::kRunning);
  // A sequence scheduled earlier in this step (priority preemption) leaves the batch.
  for (auto it = out.seqs.begin(); it != out.seqs.end(); ++it) {
    if (it->id == id) {
      out.n_tokens -= it->n_new;
      out.seqs.erase(it);
      break;
    }
  }
  ++s.preemptions;
  ++total_preemptions_;
  out.preempted.push_back(id);
  const bool want_swap =
      cfg_.preempt == PreemptMode::kSwap ||
      (cfg_.preempt == PreemptMode::kAuto && kv_.has_cold_tier() &&
       costs_.choose(kv_.swap_out_bytes(id), s.num_computed) == PreemptMode::kSwap);
  if (want_swap && kv_.swap_out(id)) {
    s.status = SeqStatus::kSwapped;
    return true;
  }
  kv_.free_sequence(id);
  kv_.add_sequence(id);
  if (evictor_ != nullptr) evictor_->forget(id);
  s.num_computed = 0;
  s.status = SeqStatus::kWaiting;
  return false;
}

void Scheduler::charge(const Sequence& s, int32_t n_new) {
  int32_t& done = charged_[s.id];
  const int32_t end = s.num_computed + n_new;
  if (end <= done) return;
  const int32_t from = std::max(done, s.num_computed);
  const int32_t prompt = std::max(0, std::min(end, s.n_prompt) - from);
  const int32_t generated = (end - from) - prompt;
  vtc_.charge(s.tenant, prompt, generated);
  done = end;
}

std::vector<Sequence*> Scheduler::in_order(SeqStatus st, bool admission, std::optional<QosClass> c) {
  std::vector<Sequence*> v;
  for (auto& [id, s] : seqs_) {
    if (s->status == st && (!c || s->qos == *c)) v.push_back(s.get());
  }
  std::sort(v.begin(), v.end(), [&](const Sequence* a, const Sequence* b) {
    return admission ? admits_before(*a, *b) : queue_before(*a, *b);
  });
  return v;
}

std::vector<SeqId> Scheduler::upcoming(int32_t n) {
  std::vector<SeqId> out;
  for (SeqStatus st : {SeqStatus::kSwapped, SeqStatus::kWaiting}) {
    const std::vector<Sequence*> v = in_order(st, st == SeqStatus::kWaiting);
    for (size_t i = 0; i < v.size() && i < static_cast<size_t>(n); ++i) out.push_back(v[i]->id);
  }
  return out;
}

void Scheduler::add_to_step(StepPlan& plan, Sequence& s, int32_t n_new) {
  const int32_t start = s.num_computed;
  plan.out.seqs.push_back({s.id, start, n_new, start + n_new == static_cast<int32_t>(s.tokens.size()), {}});
  if (evictor_ != nullptr) {
    ScheduledSeq& sc = plan.out.seqs.back();
    const KvEvictor::StepImportance imp = evictor_->prepare(s.id, start, n_new, s.n_prompt);
    sc.kv_start = evictor_->kv_slot(s.id, start);
    sc.importance = imp.buffer;
    sc.importance_from = imp.from_row;
    sc.query = imp.query;
  }
  plan.out.n_tokens += n_new;
  plan.scheduled.insert(s.id);
  plan.budget -= n_new;
  --plan.seq_budget;
  charge(s, n_new);
}

SchedulerOutput Scheduler::schedule() {
  StepPlan plan;
  plan.budget = cfg_.max_batched_tokens;
  plan.seq_budget = cfg_.max_seqs;
  if (evictor_ != nullptr && evictor_->elastic()) thin_under_pressure();
  for (;;) {
    swap_in(plan);
    for (QosClass c : {QosClass::kInteractive, QosClass::kBatch}) {
      schedule_running(plan, c);
      // Admitting while the running ones are short of blocks would only preempt them again.
      if (!plan.preempted_any) admit_waiting(plan, c);
    }
    // Nothing runs and nothing could start: the free blocks are short because swapped sequences
    // hold hot blocks they share (forks), none of which fits beside the others' ones. Waiting
    // would wait for ever; the first swapped sequence gives its KV up and recomputes instead.
    if (!plan.out.seqs.empty() || any_running() || !recompute_first_swapped()) break;
  }
  // The plan as a value: each sequence's block table and the step's KV operations travel with it.
  for (ScheduledSeq& sc : plan.out.seqs) {
    if (evictor_ != nullptr) {
      evictor_->attention_table(sc.id, sc.block_table);  // recalled blocks first (--kv-recall)
      continue;
    }
    const std::span<const BlockId> table = kv_.block_table(sc.id);
    sc.block_table.assign(table.begin(), table.end());
  }
  plan.out.kv_ops = kv_.take_ops();
  account_drf(plan.out);
  return std::move(plan.out);
}

void Scheduler::account_drf(const SchedulerOutput& out) {
  std::map<std::string, int64_t> tokens, blocks;
  for (const ScheduledSeq& sc : out.seqs) tokens[seqs_.at(sc.id)->tenant] += sc.n_new;
  for (const auto& [id, s] : seqs_) {
    if (s->status == SeqStatus::kRunning) blocks[s->tenant] += static_cast<int64_t>(kv_.block_table(id).size());
  }
  drf_.end_step(tokens, cfg_.max_batched_tokens, blocks, kv_.num_hot_blocks());
}

std::vector<std::string> Scheduler::tenants() const {
  std::set<std::string> t;
  for (const auto& [id, s] : seqs_) t.insert(s->tenant);
  return {t.begin(), t.end()};
}

bool Scheduler::only_batch_waiting() const {
  bool any = false;
  for (const auto& [id, s] : seqs_) {
    if (s->status != SeqStatus::kWaiting) continue;
    if (s->qos != QosClass::kBatch) return false;
    any = true;
  }
  return any;
}

bool Scheduler::recompute_first_swapped() {
  const std::vector<Sequence*> swapped = in_order(SeqStatus::kSwapped, false);
  if (swapped.empty()) return false;
  Sequence& s = *swapped.front();
  kv_.free_sequence(s.id);
  kv_.add_sequence(s.id);
  if (evictor_ != nullptr) evictor_->forget(s.id);
  s.num_computed = 0;
  s.status = SeqStatus::kWaiting;
  return true;
}

void Scheduler::swap_in(StepPlan& plan) {
  for (Sequence* s : in_order(SeqStatus::kSwapped, false)) {
    if (plan.seq_budget <= 0) break;
    // With room for its next token too: a sequence swapped in without it would preempt itself
    // again at once (and, with nothing else running, for ever).
    const int32_t next = s->num_computed + std::min(s->n_uncomputed(), 1);
    const int32_t need = kv_.blocks_to_swap_in(s->id, next);
    if (need + admission_watermark() > kv_.num_available_blocks() || !batch_demand_fits(*s, need, next) || !kv_.swap_in(s->id)) {
      // Queue order, but with nothing running a swapped sequence may wait for hot blocks that
      // those behind it share (and free when they finish): then they go first.
      if (any_running()) break;
      continue;
    }
    s->status = SeqStatus::kRunning;
    s->protected_from_preemption = true;
    s->progress_mark = s->n_generated();
    plan.out.resumed.push_back(s->id);
  }
}

void Scheduler::schedule_running(StepPlan& plan, QosClass c) {
  for (bool allow_protected : {false, true}) {
    for (Sequence* s : in_order(SeqStatus::kRunning, false, c)) {
      // An earlier sequence's allocation may have preempted this one.
      if (s->status != SeqStatus::kRunning || plan.scheduled.count(s->id)) continue;
      if (plan.seq_budget <= 0 || plan.budget <= 0) break;
      int32_t n = std::min(s->n_uncomputed(), plan.budget);
      if (n <= 0) continue;
      if (grow_running(plan, *s, n, allow_protected)) add_to_step(plan, *s, n);
    }
    // Every running sequence may be freshly resumed and blocked: then protection must give way,
    // or nothing would ever make progress.
    bool any_running = false;
    for (const auto& [id, s] : seqs_) any_running = any_running || s->status == SeqStatus::kRunning;
    if (!plan.out.seqs.empty() || !any_running) break;
  }
}

bool Scheduler::grow_running(StepPlan& plan, Sequence& s, int32_t& n, bool allow_protected) {
  while (s.status == SeqStatus::kRunning) {
    if (kv_.allocate(s.id, s.tokens, s.num_computed + n)) return true;
    const SeqId victim = pick_victim(plan.scheduled, allow_protected);
    if (victim == s.id || victim == kNoSeq) {
      // Nobody else to take blocks from. With --kv-offload its own oldest full blocks move to
      // host slots (attended there) to make room for the whole step.
      const int32_t short_by = kv_.blocks_needed(s.id, s.tokens, s.num_computed + n) - kv_.num_available_blocks();
      if (kv_.offloads() && short_by > 0 && kv_.offload(s.id, short_by) == short_by &&
          kv_.allocate(s.id, s.tokens, s.num_computed + n)) {
        return true;
      }
      // A smaller prompt chunk that fits is progress, where preempting itself (or waiting) would
      // leave a sequence alone in the pool stuck for ever.
      int32_t lo = 0, hi = n - 1;
      while (lo < hi) {
        const int32_t mid = hi - (hi - lo) / 2;
        if (kv_.blocks_needed(s.id, s.tokens, s.num_computed + mid) <= kv_.num_available_blocks()) lo = mid;
        else hi = mid - 1;
      }
      if (lo > 0 && kv_.allocate(s.id, s.tokens, s.num_computed + lo)) {
        n = lo;
        return true;
      }
      if (victim == kNoSeq) return false;  // wait for a later step
    }
    preempt(victim, plan.out);
    plan.preempted_any = true;
  }
  return false;  // it was its own victim
}

void Scheduler::admit_waiting(StepPlan& plan, QosClass c) {
  if (c == QosClass::kBatch) {
    // No overtaking across classes: an interactive sequence still waiting goes first.
    for (const auto& [id, s] : seqs_) {
      if (s->status == SeqStatus::kWaiting && s->qos == QosClass::kInteractive) return;
    }
  }
  std::vector<Sequence*> order = in_order(SeqStatus::kWaiting, true, c);
  for (size_t i = 0; i < order.size(); ++i) {
    Sequence* s = order[i];
    if (plan.seq_budget <= 0 || plan.budget <= 0) break;
    const int32_t len = static_cast<int32_t>(s->tokens.size());
    // The hits allocate will attach (those it can bring back now), so that the step's new tokens
    // stay within the budget.
    const int32_t hits = kv_.prefix_hits(s->id, s->tokens);
    int32_t target = hits + std::min(len - hits, plan.budget);
    // Batch work that would grow into a full pool waits (no overtaking, as below).
    if (!batch_demand_fits(*s, kv_.blocks_needed(s->id, s->tokens, target), target)) break;
    if (!admission_fits(*s, target)) preempt_for_admission(plan, *s, target);
    if (!admission_fits(*s, target)) {
      // With nothing running every hot block is free or cached, and any sequence that fits the
      // pool fits with a smaller first chunk (the hits leave a block for it: KvManager::
      // prefix_hits); waiting for more room would wait forever.
      if (any_running()) break;  // keep the queue order: no overtaking
      target = largest_fitting_target(*s, hits, target);
      if (target <= hits) break;
    }
    int32_t hit = 0;
    const int64_t blocks_before = static_cast<int64_t>(kv_.block_table(s->id).size());
    const bool ok = kv_.allocate(s->id, s->tokens, target, &hit);
    STRATA_CHECK(ok, "blocks_needed said it fits");
    drf_.add_blocks(s->tenant, static_cast<int64_t>(kv_.block_table(s->id).size()) - blocks_before, kv_.num_hot_blocks());
    s->num_computed = hit;
    // Until its first forward pass a sequence has computed nothing itself, so what an admission
    // attaches is served by the prefix cache; after it, a readmission (recompute) also finds the
    // blocks it computed, which are no cache service to this request.
    if (!s->computed_any) s->cached_tokens = std::min(hit, s->n_prompt);
    s->status = SeqStatus::kRunning;
    if (s->preemptions > 0 || s->kv_losses > 0) {
      s->protected_from_preemption = true;
      s->progress_mark = s->n_generated();
    }
    add_to_step(plan, *s, target - hit);
    // Progressive filling: the admitted tenant's share grew, so the rest are ordered again.
    if (cfg_.policy == SchedulingPolicy::kDrf) {
      std::sort(order.begin() + static_cast<std::ptrdiff_t>(i) + 1, order.end(),
                [&](const Sequence* a, const Sequence* b) { return admits_before(*a, *b); });
    }
  }
}

bool Scheduler::admission_fits(const Sequence& s, int32_t target) const {
  return kv_.blocks_needed(s.id, s.tokens, target) + admission_watermark() <= kv_.num_available_blocks();
}

int32_t Scheduler::largest_fitting_target(const Sequence& s, int32_t lo, int32_t hi) const {
  // blocks_needed grows with the target: binary search for the largest one in (lo, hi] that fits.
  while (lo < hi) {
    const int32_t mid = hi - (hi - lo) / 2;
    if (admission_fits(s, mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

bool Scheduler::any_running() const {
  for (const auto& [id, s] : seqs_) {
    if (s->status == SeqStatus::kRunning) return true;
  }
  return false;
}

int32_t Scheduler::admission_watermark() const { return any_running() ? watermark_blocks() : 0; }

bool Scheduler::may_preempt_for(const Sequence& s, const Sequence& v) const {
  if (s.qos == QosClass::kInteractive && v.qos == QosClass::kBatch) return true;
  return cfg_.policy == SchedulingPolicy::kPriority && v.qos == s.qos && v.priority < s.priority;
}

void Scheduler::preempt_for_admission(StepPlan& plan, const Sequence& s, int32_t target) {
  while (!admission_fits(s, target)) {
    // The victim is the sequence scheduled last (batch before interactive, then the policy's
    // order), so when that one may not be preempted, none may.
    const SeqId victim = pick_victim({}, false);
    if (victim == kNoSeq || !may_preempt_for(s, *seqs_.at(victim))) break;
    // Its tokens and its batch slot, if it was scheduled this step, go back to the budgets;
    // preempt() takes it out of the batch.
    const bool was_scheduled = plan.scheduled.erase(victim) > 0;
    for (const auto& sc : plan.out.seqs) {
      if (sc.id == victim) plan.budget += sc.n_new;
    }
    if (was_scheduled) ++plan.seq_budget;
    preempt(victim, plan.out);
  }
}

void Scheduler::on_kv_lost(SchedulerOutput& out, std::span<const SeqId> lost) {
  for (SeqId id : lost) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    Sequence& s = *it->second;
    for (auto sc = out.seqs.begin(); sc != out.seqs.end(); ++sc) {
      if (sc->id == id) {
        out.n_tokens -= sc->n_new;
        out.seqs.erase(sc);
        break;
      }
    }
    kv_.free_sequence(id);
    kv_.add_sequence(id);
    if (evictor_ != nullptr) evictor_->forget(id);
    s.num_computed = 0;
    s.status = SeqStatus::kWaiting;
    ++s.kv_losses;
  }
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledSeq& sc : out.seqs) {
    auto it = seqs_.find(sc.id);
    if (it == seqs_.end()) continue;  // finished meanwhile (cancelled)
    Sequence& s = *it->second;
    if (s.status != SeqStatus::kRunning) continue;
    s.num_computed = sc.start + sc.n_new;
    s.computed_any = true;
    kv_.note_attended(s.id);  // the pass read its offloaded blocks from host memory
    kv_.commit(s.id, s.tokens, s.num_computed);
    if (evictor_ != nullptr) evictor_->after_step(s.id, sc.start, sc.n_new, s.n_prompt, evictor_->budget_for(s.kv_budget));
  }
}

std::vector<SeqId> Scheduler::fork_children(SeqId parent) {
  Sequence& p = *seqs_.at(parent);
  STRATA_CHECK(p.prompt_done() && p.status == SeqStatus::kRunning, "fork before the prompt is computed");
  std::vector<SeqId> ids;
  for (int32_t i = 1; i <= p.n_fork_children; ++i) {
    auto c = std::make_unique<Sequence>(p);
    c->id = next_child_id_++;
    c->sample_index = p.sample_index + i;
    c->n_fork_children = 0;
    c->preemptions = 0;
    c->protected_from_preemption = false;
    kv_.fork(parent, c->id);
    if (evictor_ != nullptr) evictor_->fork(parent, c->id);
    charged_[c->id] = charged_[parent];
    ids.push_back(c->id);
    seqs_.emplace(c->id, std::move(c));
  }
  p.n_fork_children = 0;
  return ids;
}

void Scheduler::append_token(SeqId id, TokenId t) {
  Sequence& s = *seqs_.at(id);
  s.tokens.push_back(t);
  if (s.protected_from_preemption && s.n_generated() > s.progress_mark) s.protected_from_preemption = false;
}

void Scheduler::finish(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  if (kv_.has_sequence(id)) kv_.free_sequence(id);
  if (evictor_ != nullptr) evictor_->forget(id);
  charged_.erase(id);
  seqs_.erase(it);
}

std::vector<SeqId> Scheduler::sequences_of(RequestId r) const {
  std::vector<SeqId> ids;
  for (const auto& [id, s] : seqs_) {
    if (s->request == r) ids.push_back(id);
  }
  return ids;
}

SchedulerCounts Scheduler::counts() const {
  SchedulerCounts c;
  for (const auto& [id, s] : seqs_) {
    switch (s->status) {
      case SeqStatus::kWaiting: ++c.waiting; break;
      case SeqStatus::kRunning: ++c.running; break;
      case SeqStatus::kSwapped: ++c.swapped; break;
    }
  }
  return c;
}

namespace {
void tally(SchedulerCounts& c, SeqStatus st) {
  switch (st) {
    case SeqStatus::kWaiting: ++c.waiting; break;
    case SeqStatus::kRunning: ++c.running; break;
    case SeqStatus::kSwapped: ++c.swapped; break;
  }
}
}  // namespace

SchedulerCounts Scheduler::counts(QosClass q) const {
  SchedulerCounts c;
  for (const auto& [id, s] : seqs_) {
    if (s->qos == q) tally(c, s->status);
  }
  return c;
}

SchedulerCounts Scheduler::counts_of_tenant(const std::string& tenant) const {
  SchedulerCounts c;
  for (const auto& [id, s] : seqs_) {
    if (s->tenant == tenant) tally(c, s->status);
  }
  return c;
}

void Scheduler::thin_under_pressure() {
  int32_t longest = 0;
  for (const auto& [id, s] : seqs_) {
    if (s->status == SeqStatus::kRunning && kv_.has_sequence(id)) longest = std::max(longest, kv_.num_tokens(id));
  }
  evictor_->update_elastic(longest);
  for (const auto& [id, s] : seqs_) {
    // Only sequences whose every position is computed and committed (not one the last step skipped).
    if (s->status != SeqStatus::kRunning || !kv_.has_sequence(id) ||
        kv_.num_tokens(id) + kv_.num_evicted(id) != s->num_computed) {
      continue;
    }
    evictor_->evict_to(id, s->num_computed, s->n_prompt, evictor_->budget_for(s->kv_budget));
  }
}

}  // namespace strata
