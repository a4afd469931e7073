// Choosing the backend once at start-up. Each backend built in adds its line to resolve_device,
// available_devices and make_backend (a CUDA build defines STRATA_HAVE_CUDA).

#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#ifdef STRATA_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/nccl_communicator.h"
#endif
#include "backend/communicator.h"
#include "core/error.h"

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
    case DeviceKind::kCpu: return std::make_unique<CpuBackend>(o.n_threads, o.mapped_weights);
#ifdef STRATA_HAVE_CUDA
    case DeviceKind::kCuda: return std::make_unique<CudaBackend>(o.device_index);
#endif
    default: break;
  }
  fail("--device {}: no backend for it in this build", device_kind_name(o.device));
}

}  // namespace strata
