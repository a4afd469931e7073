// The step protocol, written once (the engine, the scheduler tests' fake engine and `strata eval`
// run it):
//
//   out      = scheduler.schedule()             // the plan: batch, block tables, KV ops
//   statuses = storage.execute(out.kv_ops)      // the KV data plane
//   kv.complete(out.kv_ops, statuses)           // bookkeeping of the outcome;
//   scheduler.on_kv_lost(out, lost)             //   sequences whose KV was lost leave the batch
//   logits   = model.forward(batch(out), storage.views())
//   scheduler.on_step_done(out)                 // commit (may plan re-encodes for the next step,
//                                               //   begun at once on the storage's encoder thread)
//
// Thread-safety: engine thread only (like the scheduler, KV manager and storage it drives).
#pragma once

#include <span>
#include <vector>

#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "model/forward_batch.h"
#include "sched/scheduler.h"

namespace strata {

class Model;

// The KV half of a step, for callers that plan with a KvManager directly: executes `ops` on the
// storage, hands the statuses to the manager and returns the sequences whose KV was lost
// (KvManager::take_lost_sequences()).
std::vector<SeqId> run_kv_ops(KvManager& kv, KvStorage& storage, std::span<const KvOp> ops);

class StepRunner {
 public:
  StepRunner(Scheduler& sched, KvManager& kv, KvStorage& storage) : sched_(sched), kv_(kv), storage_(storage) {}

  struct Prepared {
    SchedulerOutput out;       // the plan, without the sequences whose KV was lost
    std::vector<SeqId> lost;   // those (back to waiting: Scheduler::on_kv_lost), each once
  };
  // Plans a step and executes its KV ops (always, even when no sequence runs: the ops are planned
  // bookkeeping already). After it, every scheduled sequence's KV is in RAM, and the cold blocks
  // of the next kReadAheadSeqs swapped and waiting sequences are being read ahead.
  Prepared prepare();
  static constexpr int32_t kReadAheadSeqs = 4;

  // The model's batch of a prepared step: each sequence's new tokens, its block table, and logits
  // for its last row when it samples. Borrows from `out` and the scheduler's sequences.
  ForwardBatch batch(const SchedulerOutput& out) const;

  // forward(batch(out)) over the storage's views.
  std::span<const float> forward(Model& model, const SchedulerOutput& out);
  // forward_pick(batch(out)) over the storage's views (Model::forward_pick: a decode step whose
  // tokens are picked greedily where the logits are); the ticket for Model::picked.
  uint64_t forward_pick(Model& model, const SchedulerOutput& out);

  // After the forward pass: advances the sequences and commits their KV (Scheduler::on_step_done),
  // then starts the re-encodes those commits planned (KvStorage::start_reencodes) on the storage's
  // encoder thread, so that they run while the caller samples; the next prepare() finishes them.
  void done(const SchedulerOutput& out);

 private:
  Scheduler& sched_;
  KvManager& kv_;
  KvStorage& storage_;
};

}  // namespace strata
