// The KV block transfer tests (tests/backend/kv_transfer_test.cpp) on the CUDA backend, with
// pageable and page-locked host memory and a staging buffer of 64 KiB, so that lists of blocks
// go through it in several chunks. Label `cuda`; SKIPPED with the reason where no GPU is usable.
#include <cstdlib>

namespace {
// Before any backend is made (the test's backends read it in their constructor).
const int kSmallStaging = setenv("STRATA_CUDA_TRANSFER_STAGING", "65536", 1);
}  // namespace

#define STRATA_KV_TRANSFER_TEST_CUDA 1
#include "backend/kv_transfer_test.cpp"
