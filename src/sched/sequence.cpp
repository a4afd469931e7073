#include "sched/sequence.h"

namespace strata {

std::string_view seq_status_name(SeqStatus s) {
  switch (s) {
    case SeqStatus::kWaiting: return "waiting";
    case SeqStatus::kRunning: return "running";
    case SeqStatus::kSwapped: return "swapped";
    case SeqStatus::kFinished: return "finished";
  }
  return "?";
}

}  // namespace strata
