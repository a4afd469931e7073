// The communicator of tensor parallelism over GPUs (backend/communicator.h) on NCCL: one
// communicator per GPU made together by ncclCommInitAll in this process (ranks are threads,
// model/rank_group.h), collectives on a stream of their own per GPU, ordered after the rank
// backend's ops by Backend::synchronize() and waited for by polling, so that abort() (ncclCommAbort)
// can wake a rank whose peer failed.
//
// NCCL is opened with dlopen (libnccl.so.2: the loader's path, then the toolkit's library folder),
// as cuBLAS is, so that runs without tensor parallelism never map it. NCCL_NVLS_ENABLE=0 is set
// before the communicators are made: NVLink SHARP needs multicast objects, which the device
// machines must not create (the device README).
//
// Thread-safety: as Communicator (each rank from its own thread).
#pragma once

#include <memory>
#include <span>

#include "backend/communicator.h"

namespace strata::cuda {

// Ranks: CUDA backends on distinct GPUs (Backend::device_ordinal()), rank order. Throws
// strata::Error when NCCL cannot be loaded or initialised.
std::unique_ptr<Communicator> make_nccl_communicator(std::span<Backend* const> ranks);

}  // namespace strata::cuda
