// Portability probe (bench/quant_hwy_probe/run.sh): the Highway quant kernels alone, for every target.
#include "backend/cpu/matmul_quant.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "probe_kernels.cpp"
#include "hwy/foreach_target.h"
#include "hwy/highway.h"
#include "backend/cpu/matmul_quant_hwy-inl.h"
HWY_BEFORE_NAMESPACE();
namespace strata::cpu::HWY_NAMESPACE {
void Probe(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y) { MatmulQuantRowsHwy(w, a, n, y, 0, w.rows); }
}
HWY_AFTER_NAMESPACE();
#if HWY_ONCE
namespace strata::cpu {
HWY_EXPORT(Probe);
void probe(const WeightMatrix& w, const QuantActs& a, int64_t n, float* y) { HWY_DYNAMIC_DISPATCH(Probe)(w, a, n, y); }
}
#endif
#if HWY_ONCE
// C entry for the runtime probe (this TU is compiled with -Dstrata=strata_probe).
extern "C" int64_t probe_targets() { return HWY_TARGETS & hwy::SupportedTargets(); }
extern "C" void probe_run(int64_t target, int type, const uint8_t* w, int64_t rows, int64_t cols, uint64_t row_bytes,
                          int8_t* qs, float* d, int16_t* sums, int block, int64_t n, float* y) {
  hwy::SetSupportedTargetsForTest(target);
  strata::WeightMatrix m;
  m.type = static_cast<strata::GgmlType>(type);
  m.rows = rows;
  m.cols = cols;
  m.data = w;
  m.row_bytes = row_bytes;
  strata::cpu::QuantActs a;
  a.block = block;
  a.cols = cols;
  a.qs = qs;
  a.d = d;
  a.sums = sums;
  strata::cpu::probe(m, a, n, y);
  hwy::SetSupportedTargetsForTest(0);
}
#endif
