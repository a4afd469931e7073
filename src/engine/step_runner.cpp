#include "engine/step_runner.h"

#include "model/model.h"

namespace strata {

std::vector<SeqId> run_kv_ops(KvManager& kv, KvStorage& storage, std::span<const KvOp> ops) {
  if (!ops.empty()) kv.complete(ops, storage.execute(ops));
  return kv.take_lost_sequences();
}

StepRunner::Prepared StepRunner::prepare() {
  Prepared p;
  p.out = sched_.schedule();
  p.lost = run_kv_ops(kv_, storage_, p.out.kv_ops);
  if (!p.lost.empty()) sched_.on_kv_lost(p.out, p.lost);
  // Read ahead, during this step's forward pass, the cold blocks of the sequences most likely to
  // be resumed or admitted next.
  if (storage_.has_cold_tier()) {
    std::vector<std::pair<int32_t, KvTier>> reads;
    for (SeqId id : sched_.upcoming(kReadAheadSeqs)) {
      for (const auto& r : kv_.cold_reads_ahead(id, sched_.seq(id).tokens)) reads.push_back(r);
    }
    storage_.prefetch(reads);
    kv_.note_reads_ahead(reads);  // blocks being read ahead stay where they are
  }
  return p;
}

ForwardBatch StepRunner::batch(const SchedulerOutput& out) const {
  ForwardBatch b;
  b.seqs.reserve(out.seqs.size());
  for (const ScheduledSeq& sc : out.seqs) {
    const Sequence& s = sched_.seq(sc.id);
    b.seqs.push_back({std::span<const TokenId>(s.tokens).subspan(static_cast<size_t>(sc.start), static_cast<size_t>(sc.n_new)),
                      sc.start, sc.block_table, sc.logits ? LogitsMode::kLast : LogitsMode::kNone, sc.kv_start,
                      sc.importance, sc.importance_from, sc.query});
  }
  return b;
}

void StepRunner::done(const SchedulerOutput& out) {
  sched_.on_step_done(out);
  storage_.start_reencodes(kv_.pending_ops());
}

std::span<const float> StepRunner::forward(Model& model, const SchedulerOutput& out) {
  return model.forward(batch(out), storage_.views());
}

uint64_t StepRunner::forward_pick(Model& model, const SchedulerOutput& out) {
  return model.forward_pick(batch(out), storage_.views(), false);
}

}  // namespace strata
