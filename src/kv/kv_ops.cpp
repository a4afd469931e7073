#include "kv/kv_ops.h"

#include <ostream>

namespace strata {

std::string_view kv_tier_name(KvTier t) {
  switch (t) {
    case KvTier::kHot: return "hot";
    case KvTier::kWarm: return "warm";
    case KvTier::kCold: return "cold";
  }
  return "?";
}

std::string_view kv_op_kind_name(KvOp::Kind k) {
  switch (k) {
    case KvOp::Kind::kCopy: return "copy";
    case KvOp::Kind::kReencode: return "reencode";
    case KvOp::Kind::kSpill: return "spill";
    case KvOp::Kind::kFetch: return "fetch";
    case KvOp::Kind::kLoad: return "load";
    case KvOp::Kind::kPublish: return "publish";
    case KvOp::Kind::kCompact: return "compact";
    case KvOp::Kind::kDemote: return "demote";
    case KvOp::Kind::kMigrate: return "migrate";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, const KvSlot& s) { return os << kv_tier_name(s.tier) << ' ' << s.slot; }

std::ostream& operator<<(std::ostream& os, const KvOp& op) {
  os << kv_op_kind_name(op.kind) << ' ';
  if (op.kind == KvOp::Kind::kReencode) {
    os << "hot";
    for (BlockId b : op.hot) os << ' ' << b;
  } else if (op.kind == KvOp::Kind::kLoad) {
    os << "remote (" << (op.bytes ? op.bytes->size() : 0) << " bytes)";
  } else if (op.kind == KvOp::Kind::kCompact) {
    os << op.moves.size() << " tokens:";
    for (const KvTokenMove& m : op.moves) os << " hot " << m.src_block << '.' << m.src_slot << " -> " << m.dst_block << '.' << m.dst_slot << ';';
    return os;
  } else if (op.kind == KvOp::Kind::kPublish) {
    return os << op.src << " -> remote";
  } else {
    os << op.src;
  }
  return os << " -> " << op.dst;
}

}  // namespace strata
