// Choosing the backend once at start-up. Each backend built in adds its line to resolve_device,
// available_devices and make_backend (a CUDA build defines STRATA_HAVE_CUDA).

#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
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
#error "STRATA_HAVE_CUDA: add the CUDA backend's device probe here"
#else
  return false;
#endif
}

}  // namespace

DeviceKind resolve_device(DeviceKind d) {
  switch (d) {
    case DeviceKind::kAuto: return cuda_usable() ? DeviceKind::kCuda : DeviceKind::kCpu;
    case DeviceKind::kCpu: return DeviceKind::kCpu;
    case DeviceKind::kCuda:
#ifndef STRATA_HAVE_CUDA
      fail("--device cuda: this strata was built without CUDA (rebuild with a CUDA toolkit and -DSTRATA_CUDA=ON, "
           "or use --device cpu)");
#else
      if (!cuda_usable()) fail("--device cuda: no usable CUDA device (use --device cpu)");
      return DeviceKind::kCuda;
#endif
  }
  fail("unknown device");
}

std::vector<DeviceKind> available_devices() {
  std::vector<DeviceKind> out{DeviceKind::kCpu};
  if (cuda_usable()) out.push_back(DeviceKind::kCuda);
  return out;
}

std::unique_ptr<Backend> make_backend(const BackendOptions& o) {
  switch (resolve_device(o.device)) {
    case DeviceKind::kCpu: return std::make_unique<CpuBackend>(o.n_threads);
    default: break;
  }
  fail("--device {}: no backend for it in this build", device_kind_name(o.device));
}

}  // namespace strata
