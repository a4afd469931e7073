// The backend op suite (tests/backend/backend_ops_test.cpp) on the CUDA backend: every op against
// the CPU's scalar references. Label `cuda`; SKIPPED with the reason where no GPU is usable.
#define STRATA_OPS_TEST_CUDA 1
#include "backend/backend_ops_test.cpp"
