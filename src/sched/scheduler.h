// The continuous-batching scheduler. Each step it plans which sequences run and how many tokens
// each gets (a prompt chunk or one decode token; the model does not tell them apart), within a
// token budget and a sequence budget, and which sequences to preempt when KV blocks run out:
//
//  1. swapped sequences come back first, in queue order, when their blocks fit;
//  2. running sequences, in queue order, get their next tokens (decodes and prompt continuations);
//     when the KV pool cannot grow one, the victim is the lowest-priority, latest-arriving running
//     sequence that has made progress since it was last resumed (no thrashing), preempted by swap
//     (to the cold tier) or recompute (KV freed, recomputed later); --preempt auto picks per victim
//     whichever its measured costs make cheaper (preempt_costs(), sched/preempt_cost.h);
//  3. if nothing was preempted, waiting sequences are admitted in policy order (fcfs; priority; fair
//     = virtual token counter; drf = weighted dominant resource fairness, sched/drf.h) while their
//     blocks fit with a watermark of free blocks left for the running ones. Long prompts are split
//     across steps (chunked prefill); prefix-cache hits count as computed. With --scheduling
//     priority a waiting sequence may preempt lower-priority running ones.
//
// QoS classes (Sequence::qos): steps 2 and 3 run first for the interactive class, then for the
// batch class, so interactive decodes and prompt chunks take the budgets first; a class's queue is
// earliest-deadline-first (Sequence::deadline, then the policy's order); batch sequences are never
// admitted past a waiting interactive one; an interactive sequence that does not fit preempts
// running batch sequences (latest first) before anything else, and the victim of any preemption
// is a batch sequence while one runs. With every sequence in one class this is the order above.
//
// Liveness, so that no request that fits the pool waits for ever (tests/sched/
// admission_liveness_test.cpp): the watermark only protects running sequences, so it yields when
// none is running (in 1 and 3); then a waiting sequence that does not fit with a whole budget's
// chunk is admitted with the largest chunk that fits, and a swapped one that does not fit does not
// hold back the swapped ones behind it. A running sequence that no other can make room for runs a
// smaller prompt chunk rather than preempt itself; one is swapped in only with room for its next
// token. If nothing could start while nothing runs (swapped forks holding shared hot blocks), the
// first swapped sequence is recomputed instead. With nothing running every hot block is then free
// or cached, and a sequence whose tokens (at most prompt + max_tokens - 1) fit the pool always
// starts: the engine rejects a prompt that cannot fit at submit and clips max_tokens to the pool.
//
// Planning mutates only bookkeeping (KV block allocations included); the KV data movement it
// implies is part of the plan (SchedulerOutput::kv_ops, for KvStorage::execute), with the block
// table of every scheduled sequence, and the token counts advance in on_step_done(). The step
// protocol around it is engine/step_runner.h.
// Thread-safety: engine thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_evictor.h"
#include "kv/kv_manager.h"
#include "sched/drf.h"
#include "sched/fairness.h"
#include "sched/kv_demand.h"
#include "sched/preempt_cost.h"
#include "sched/scheduler_config.h"
#include "sched/sequence.h"

namespace strata {

struct ScheduledSeq {
  SeqId id = 0;
  int32_t start = 0;      // first token of this step (= num_computed before the step)
  int32_t n_new = 0;      // tokens computed this step
  bool logits = false;    // all known tokens are computed after this step: sample the next one
  std::vector<BlockId> block_table;  // for attention this step (KvManager::block_table)
  // Eviction (--kv-evict): the KV slot of the first new token (start - tokens evicted, after the
  // recalled blocks' slots; -1 = start) and where attention reports the mass each slot receives
  // (KvEvictor::prepare; null = not); --kv-recall: where the last row's query goes.
  int32_t kv_start = -1;
  float* importance = nullptr;
  int32_t importance_from = 0;
  float* query = nullptr;
};

// The plan of one step: a plain value (a dry run is a call of schedule() and a look at this).
struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  // The KV data movement to execute before the forward pass, in order (KvStorage::execute); it
  // includes what earlier calls (commit in on_step_done) planned since the last step.
  std::vector<KvOp> kv_ops;
  std::vector<SeqId> preempted;  // this step (swap or recompute)
  std::vector<SeqId> resumed;    // swapped back in this step
  int32_t n_tokens = 0;
  bool empty() const { return seqs.empty(); }
};

struct SchedulerCounts {
  int32_t waiting = 0;
  int32_t running = 0;
  int32_t swapped = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, KvManager& kv);

  const SchedulerConfig& config() const { return cfg_; }

  // The knobs a controller moves at run time (sched/controller.h), effective from the next
  // schedule(). Preconditions: n > 0; 0 <= w < 1.
  void set_max_batched_tokens(int32_t n);
  void set_max_seqs(int32_t n);
  void set_watermark(double w);
  // Eviction within sequences (--kv-evict): after each step's commit the evictor thins every
  // sequence over its budget (Sequence::kv_budget lowers it). Null (the default): none.
  // `e` outlives the scheduler.
  void set_evictor(KvEvictor* e) { evictor_ = e; }
  // The measured costs behind --preempt auto's per-victim choice (sched/preempt_cost.h); the
  // engine feeds them after every step. Unused by swap and recompute.
  PreemptCostModel& preempt_costs() { return costs_; }
  const PreemptCostModel& preempt_costs() const { return costs_; }
  KvEvictor* evictor() const { return evictor_; }
  // Batch admission by projected demand (the controller's, sched/controller.h; off until set): a
  // batch sequence is admitted or swapped in only while the projected demand with it stays within
  // (1 - reserve) of the hot pool, so batch work does not grow into a full pool and the reserve
  // stays free for interactive arrivals (which ignore it). Yields when nothing runs (liveness).
  // Preconditions: horizon_tokens > 0; 0 <= reserve < 1.
  void set_batch_admission(int32_t horizon_tokens, double reserve);
  // The projected KV demand (sched/kv_demand.h): the most hot blocks the running sequences will
  // hold at once within `horizon_tokens` steps, each decoding to its max_tokens.
  int32_t projected_demand_blocks(int32_t horizon_tokens) const;

  // Adds a request's first sequence (it holds the prompt; n_fork_children more are forked from it
  // when the prompt is computed). Precondition: the prompt is non-empty and fits the pool.
  void add(Sequence seq);

  SchedulerOutput schedule();

  // The forward pass of `out` ran: advances num_computed and commits the KV.
  void on_step_done(const SchedulerOutput& out);

  // After the step's kv_ops ran: sequences whose KV was lost (KvManager::take_lost_sequences()) leave
  // this step's batch and go back to waiting with their KV freed, to recompute every token they
  // hold, as a recompute preemption does (kv_losses counts it; protected from preemption until
  // they make progress again).
  void on_kv_lost(SchedulerOutput& out, std::span<const SeqId> lost);

  // Forks the n_fork_children of a sequence whose prompt is done; returns their ids (running,
  // sharing the parent's blocks).
  std::vector<SeqId> fork_children(SeqId parent);

  // A sampled token joins the sequence (not computed yet).
  void append_token(SeqId id, TokenId t);

  // Ends a sequence (stop, length, abort): frees its KV and forgets it.
  void finish(SeqId id);

  bool has(SeqId id) const { return seqs_.count(id) > 0; }
  Sequence& seq(SeqId id) { return *seqs_.at(id); }
  const Sequence& seq(SeqId id) const { return *seqs_.at(id); }
  std::vector<SeqId> sequences_of(RequestId r) const;

  // The sequences likely to need their KV brought back soonest: the first `n` swapped ones (queue
  // order) and the first `n` waiting ones (admission order). Their cold blocks are read ahead
  // (StepRunner::prepare), so that the step that resumes or admits them does not wait for the disk.
  std::vector<SeqId> upcoming(int32_t n);

  SchedulerCounts counts() const;
  bool idle() const { return seqs_.empty(); }
  int64_t total_preemptions() const { return total_preemptions_; }
  const VirtualTokenCounter& fairness() const { return vtc_; }
  // Dominant shares per tenant, updated every step whatever the policy (only drf orders by them).
  const DrfAccount& drf() const { return drf_; }
  // The tenants that have sequences now, and Jain's index over their dominant shares.
  std::vector<std::string> tenants() const;
  double fairness_index() const { return drf_.jain_index(tenants()); }
  // Sequences per class and status; of one tenant.
  SchedulerCounts counts(QosClass c) const;
  SchedulerCounts counts_of_tenant(const std::string& tenant) const;
  // True when something waits and every waiting sequence is batch class: the engine may then
  // wait up to --qos-window-ms to fill the batch, as no interactive deadline can be missed by it.
  bool only_batch_waiting() const;

 private:
  // What one schedule() call has left to give and has given so far.
  struct StepPlan {
    SchedulerOutput out;
    int32_t budget = 0;      // tokens
    int32_t seq_budget = 0;  // sequences
    std::set<SeqId> scheduled;
    bool preempted_any = false;  // by a running sequence that needed blocks
  };

  // The steps of schedule(), in order (the numbers of the comment at the top of this file).
  void swap_in(StepPlan& plan);           // 1
  // The first swapped sequence in queue order drops its KV and waits to be recomputed; false when
  // none is swapped.
  bool recompute_first_swapped();
  void schedule_running(StepPlan& plan, QosClass c);  // 2, for one class
  // Allocates n more tokens for running sequence s, preempting others (protected ones only when
  // allow_protected) until it fits; when nobody else is left to preempt, lowers n to the largest
  // chunk that fits. False when not even one token fits and nobody is left to preempt, or s
  // itself was preempted.
  bool grow_running(StepPlan& plan, Sequence& s, int32_t& n, bool allow_protected);
  void admit_waiting(StepPlan& plan, QosClass c);  // 3, for one class
  // Whether waiting sequence s may take the blocks of running sequence v: an interactive one those
  // of a batch one; with --scheduling priority, one of higher priority in the same class.
  bool may_preempt_for(const Sequence& s, const Sequence& v) const;
  // Preemption within 3: preempts running sequences s may preempt, latest first, until waiting
  // sequence s fits with `target` tokens, or none is left.
  void preempt_for_admission(StepPlan& plan, const Sequence& s, int32_t target);
  // The end of planning a step: each tenant's tokens in it and blocks held go to drf_.
  // --kv-budget auto: moves the elastic budget by KV usage and thins the running sequences above
  // it now, before this step's admissions and preemptions.
  void thin_under_pressure();
  void account_drf(const SchedulerOutput& out);
  // Whether allocating `target` tokens for waiting s leaves the admission watermark free.
  bool admission_fits(const Sequence& s, int32_t target) const;
  // The largest target in (lo, hi] for which admission_fits holds, or lo when none.
  int32_t largest_fitting_target(const Sequence& s, int32_t lo, int32_t hi) const;
  bool any_running() const;
  // s's future from `from` tokens with slots, taking `extra` new blocks now (a candidate).
  DemandCurve demand_curve(const Sequence& s, int32_t from, int32_t extra) const;
  DemandShape demand_shape() const;
  // The peak demand of the running sequences and `candidate` (may be null).
  int64_t peak_demand_with(const DemandCurve* candidate, int32_t horizon_tokens) const;
  // The batch admission gate: batch sequence s may take blocks_new more hot blocks now and grow
  // from `from` tokens (true when the gate is off, s is interactive or nothing runs).
  bool batch_demand_fits(const Sequence& s, int32_t blocks_new, int32_t from) const;
  // Blocks admissions (and swap-ins) leave free: the watermark while sequences run, 0 otherwise.
  int32_t admission_watermark() const;
  // Puts the next n_new tokens of s (from num_computed) into the step and charges them.
  void add_to_step(StepPlan& plan, Sequence& s, int32_t n_new);
  // Sequences with status st (and class c when given), in queue order (running/swapped) or
  // admission order (waiting).
  std::vector<Sequence*> in_order(SeqStatus st, bool admission, std::optional<QosClass> c = std::nullopt);

  // Admission ordering key of a waiting sequence (lower first).
  bool admits_before(const Sequence& a, const Sequence& b) const;
  bool preempt(SeqId id, SchedulerOutput& out);  // returns true when swapped, false when recomputed
  // The running, unprotected sequence to preempt (lowest priority, latest arrival), excluding
  // `except`; kNoSeq when none.
  SeqId pick_victim(const std::set<SeqId>& except, bool allow_protected) const;
  void charge(const Sequence& s, int32_t n_new);
  void mark_backlogged(const std::string& tenant);
  bool queue_before(const Sequence& a, const Sequence& b) const;  // running/swapped order
  int32_t watermark_blocks() const;

  static constexpr SeqId kNoSeq = -1;
  SchedulerConfig cfg_;
  KvManager& kv_;
  std::map<SeqId, std::unique_ptr<Sequence>> seqs_;
  SeqId next_child_id_ = int64_t{1} << 40;  // forked children; request sequences use their own ids
  VirtualTokenCounter vtc_;
  DrfAccount drf_;
  std::map<SeqId, int32_t> charged_;  // highest token index already charged to the tenant
  int64_t total_preemptions_ = 0;
  KvEvictor* evictor_ = nullptr;
  PreemptCostModel costs_;
  int32_t batch_horizon_tokens_ = 0;  // 0: batch admission by projected demand is off
  double batch_reserve_ = 0;
};

}  // namespace strata
