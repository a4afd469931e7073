// A digest of every field of a KvLayerView (kv/kv_types.h): what a recorded forward pass (CUDA
// graph, Backend::begin_replay) bakes in from a layer's view, since the kernels take the view by
// value — the arenas' addresses and geometry, the warm tier and the host slots of --kv-offload
// (base id, address, stride, offsets). The model keys its recordings with it (model/model.cpp) and
// the CUDA backend checks at each replay that the views match those of the recording.
// Thread-safety: pure function.
#pragma once

#include <cstdint>

#include "kv/kv_types.h"

namespace strata {

// XXH3 of the view's fields (not its bytes: no padding) with `seed`; chain it over several views.
uint64_t kv_view_digest(const KvLayerView& kv, uint64_t seed);

}  // namespace strata
