// Choosing the backend once at start-up. Each backend built in adds its line to resolve_device,
// available_devices and make_backend (a CUDA build defines STRATA_HAVE_CUDA).

#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#ifdef STRATA_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/nccl_communicator.h"
#endif
#include "backend/communicator.h"
#include "core/check.h"
#include "core/error.h"
#include "kv/warm_format.h"

namespace strata {

std::string_view device_kind_name(DeviceKind d) {
  switch (d) {
    case DeviceKind::kAuto: return "auto";
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
  }
  return "?";
}

std::optional<DeviceKind> device_kind_from_name(std::string_view name) {
  for (DeviceKind d : {DeviceKind::kAuto, DeviceKind::kCpu, DeviceKind::kCuda}) {
    if (name == device_kind_name(d)) return d;
  }
  return std::nullopt;
}

void Backend::kv_warm_encode_many(WarmFormat f, const KvLayerView& hot, std::span<const BlockId> blocks,
                                  std::span<const int32_t> dst_slots) {
  const size_t span = static_cast<size_t>(warm_span(f, hot.block_size));
  STRATA_CHECK(blocks.size() == dst_slots.size() * span, "{} blocks for {} warm slots of span {}", blocks.size(),
               dst_slots.size(), span);
  for (size_t i = 0; i < dst_slots.size(); ++i) {
    kv_warm_encode(f, hot, blocks.subspan(i * span, span), hot.warm_k + dst_slots[i] * hot.warm_k_slot_bytes,
                   hot.warm_v + dst_slots[i] * hot.warm_v_slot_bytes);
  }
}

namespace {

// Whether this build can run on a CUDA GPU of this machine.
bool cuda_usable() {
#ifdef STRATA_HAVE_CUDA
  static const bool usable = CudaBackend::usable();  // the driver's answer does not change in a process
  return usable;
#else
  return false;
#endif
}

#ifdef STRATA_HAVE_CUDA
std::string cuda_unusable_reason() {
  std::string why;
  (void)CudaBackend::usable(&why);
  return why;
}
#endif

}  // namespace

bool built_with_cuda() {
#ifdef STRATA_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

DeviceKind resolve_device(DeviceKind d) {
  switch (d) {
    case DeviceKind::kAuto: return cuda_usable() ? DeviceKind::kCuda : DeviceKind::kCpu;
    case DeviceKind::kCpu: return DeviceKind::kCpu;
    case DeviceKind::kCuda:
#ifndef STRATA_HAVE_CUDA
      fail("--device cuda: this strata was built without CUDA (rebuild with a CUDA toolkit and -DSTRATA_CUDA=ON, "
           "or use --device cpu)");
#else
      if (!cuda_usable()) fail("--device cuda: no usable CUDA device: {} (use --device cpu)", cuda_unusable_reason());
      return DeviceKind::kCuda;
#endif
  }
  fail("unknown device");
}

int cuda_device_count() {
#ifdef STRATA_HAVE_CUDA
  return cuda_usable() ? CudaBackend::device_count() : 0;
#else
  return 0;
#endif
}

std::unique_ptr<Communicator> make_device_communicator(std::span<Backend* const> ranks) {
#ifdef STRATA_HAVE_CUDA
  return cuda::make_nccl_communicator(ranks);
#else
  (void)ranks;
  fail("tensor parallelism over GPUs needs a build with CUDA (NCCL)");
#endif
}

std::vector<DeviceKind> available_devices() {
  std::vector<DeviceKind> out{DeviceKind::kCpu};
  if (cuda_usable()) out.push_back(DeviceKind::kCuda);
  return out;
}

std::unique_ptr<Backend> make_backend(const BackendOptions& o) {
  switch (resolve_device(o.device)) {
    case DeviceKind::kCpu: return std::make_unique<CpuBackend>(o.n_threads);
#ifdef STRATA_HAVE_CUDA
    case DeviceKind::kCuda: return std::make_unique<CudaBackend>(o.device_index);
#endif
    default: break;
  }
  fail("--device {}: no backend for it in this build", device_kind_name(o.device));
}

}  // namespace strata
