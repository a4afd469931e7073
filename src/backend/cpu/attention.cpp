// Paged attention (kernels.h: paged_attention), compiled once per SIMD target.
//
// Shapes: q, out [n_tokens][n_head][head_dim]; K and V read through each sequence's block table:
// hot ids from arenas [num_blocks][block_size][n_kv_heads][head_dim] (f32, f16 or bf16), warm ids
// from the compact slots of kv/warm_format.h (int8, fp8, int4), decoded in registers as the inner
// loops read them (kv_rows-inl.h). A table may mix both freely.
//
// Work item = (sequence, kv head, tile of up to kTileRows query rows): its query vectors are the
// tile's rows × the kv head's group of query heads, which share every key and value they read. The
// item walks the keys one KV block at a time with an online softmax (running max m, running sum l,
// unnormalised output o): per block, scores s = q·k·scale (SIMD over head_dim), m' = max(m, s),
// o and l rescaled by exp(m - m'), then o += Σ exp(s - m')·v. A query's arithmetic depends only on
// its own keys and the block size, never on the tile or batch it is in.
// Items are taken from a shared counter, the sequences' last (longest) tiles first, so one long
// prompt and many short decodes both spread evenly over the threads.
//
// Importance (AttentionSeq::importance): a sequence that asks for it has each item also keep the
// unnormalised weights exp(s - m_block) of its counted vectors, [vector][key], and each block's
// running max; after the last block, weight · exp(m_block - m_final) / l_final is the softmax
// weight of the key, added into the thread's own accumulator of the sequence (no atomics), and
// the threads' accumulators are summed into the sequence's buffer after the pass. The softmax
// arithmetic itself is the same with or without it.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "core/check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "backend/cpu/simd_reduce-inl.h"
#include "backend/cpu/kv_rows-inl.h"

#ifndef STRATA_BACKEND_CPU_ATTENTION_ONCE_
#define STRATA_BACKEND_CPU_ATTENTION_ONCE_
namespace strata::cpu {
// Query vectors per work item (rows × group heads); rows per tile = max(1, this / group).
inline constexpr int32_t kAttnTileVectors = 16;

// Per-thread state of one work item, carved from the scratch.
struct AttnItemState {
  float* o;     // [kAttnTileVectors][head_dim] unnormalised outputs
  float* m;     // [kAttnTileVectors] running max
  float* l;     // [kAttnTileVectors] running sum of weights
  float* corr;  // [kAttnTileVectors] rescale factor of the current block
  float* s;     // [kAttnTileVectors][s_stride] scores, then weights, of the current block
  int32_t s_stride;  // block_size rounded up to whole vectors of the widest target
  float* kbuf;  // [block_size][head_dim] the current block's keys as f32 (16-bit KV only)
  float* vbuf;  // [block_size][head_dim] values as f32
  WarmParams warm;  // per-block scales and int4 parameters of warm blocks
  // Importance of the current item's sequence, or null: weights [kAttnTileVectors][w_stride],
  // running max after each block [kAttnTileVectors][mb_stride], this thread's accumulator [keys].
  float* wsave = nullptr;
  int32_t w_stride = 0;
  float* mblk = nullptr;
  int32_t mb_stride = 0;
  float* acc = nullptr;
};
}  // namespace strata::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace strata::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lane sums of four vectors; full-width vectors use the shared 4-way tree (a few shuffles for four
// sums instead of a full reduction each).
template <class D>
HWY_INLINE void Sum4(D d, const hn::Vec<D>* a, float* out) {
  if constexpr (std::is_same_v<D, DF>) {
    ReduceSums<4>(a, out);
  } else {
    for (int i = 0; i < 4; ++i) out[i] = hn::GetLane(hn::SumOfLanes(d, a[i]));
  }
}

// What the steps of one work item share: its tile of query vectors and, per KV block, how many of
// the block's keys each vector may see. Vector j is row i0 + j / group, head kvh·group + j % group.
struct ItemTile {
  const float* q;      // [n_tokens][n_head][head_dim]
  int32_t q_begin;     // the sequence's first row in q
  int32_t start_pos;   // position of the sequence's first query row
  int32_t i0;          // first row of the tile
  int32_t nvec;        // query vectors: rows × group
  int32_t group;       // query heads per kv head
  int32_t kvh;
  int32_t n_head;
  int32_t hd;          // head_dim
  int32_t bs_groups;   // keys reduced four at a time: block_size rounded down to a multiple of 4
  int32_t p0 = 0;      // position of the current block's first key
  int32_t blk = 0;     // index of the current block
  int32_t np_all = 0;  // keys of the current block up to the tile's last row

  HWY_INLINE const float* qvec(int32_t j) const {
    const int32_t i = i0 + j / group, h = kvh * group + j % group;
    return q + (int64_t{q_begin + i} * n_head + h) * hd;
  }
  // Causal: a vector sees the keys at or before its own position; 0 past the tile's end, so steps
  // that go two vectors at a time need no special case for a lone last one.
  HWY_INLINE int32_t visible(int32_t j) const {
    return j < nvec ? std::clamp(start_pos + i0 + j / group + 1 - p0, 0, np_all) : 0;
  }
};

// Empty softmax state: m = -inf makes the first block's rescale factor exp(-inf) = 0.
HWY_INLINE void ResetState(const ItemTile& t, const AttnItemState& st) {
  for (int32_t j = 0; j < t.nvec; ++j) {
    st.m[j] = -INFINITY;
    st.l[j] = 0.0f;
    std::fill(st.o + int64_t{j} * t.hd, st.o + int64_t{j + 1} * t.hd, 0.0f);
  }
}

// Raw scores q·k of the block's visible keys, two query vectors at a time sharing each key load.
// Keys go in groups of four (one 4-way lane reduction) up to the last whole group of the block,
// whether or not all four are visible: which reduction a key's score gets then depends only on its
// slot, not on the other queries of the tile, so results never depend on tiling. Scores of keys
// not visible are never used.
template <class D, class Src>
HWY_INLINE void BlockScores(D d, const Src& src, const ItemTile& t, const AttnItemState& st) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t nv = static_cast<size_t>(t.hd) / N;
  for (int32_t j = 0; j < t.nvec; j += 2) {
    const int32_t na = t.visible(j), nb = t.visible(j + 1);
    const int32_t nmax = std::max(na, nb);
    if (nmax == 0) continue;
    const float* qa = t.qvec(j);
    const float* qb = nb > 0 ? t.qvec(j + 1) : qa;
    float* sa = st.s + int64_t{j} * st.s_stride;
    float* sb = nb > 0 ? sa + st.s_stride : sa;
    int32_t p = 0;
    for (; p < nmax && p + 4 <= t.bs_groups; p += 4) {
      const auto kr0 = src.KeyRow(p), kr1 = src.KeyRow(p + 1), kr2 = src.KeyRow(p + 2), kr3 = src.KeyRow(p + 3);
      V a[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
      V b[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
      for (size_t v = 0; v < nv; ++v) {
        const V xa = hn::LoadU(d, qa + v * N), xb = hn::LoadU(d, qb + v * N);
        const V k[4] = {src.K(d, kr0, v * N), src.K(d, kr1, v * N), src.K(d, kr2, v * N), src.K(d, kr3, v * N)};
        for (int c = 0; c < 4; ++c) {
          a[c] = hn::MulAdd(xa, k[c], a[c]);
          b[c] = hn::MulAdd(xb, k[c], b[c]);
        }
      }
      Sum4(d, a, sa + p);
      Sum4(d, b, sb + p);  // for a lone vector b == a and this rewrites the same values
    }
    for (; p < nmax; ++p) {
      const auto kr = src.KeyRow(p);
      V a = hn::Zero(d), b = hn::Zero(d);
      for (size_t v = 0; v < nv; ++v) {
        const V k = src.K(d, kr, v * N);
        a = hn::MulAdd(hn::LoadU(d, qa + v * N), k, a);
        b = hn::MulAdd(hn::LoadU(d, qb + v * N), k, b);
      }
      sa[p] = hn::GetLane(hn::SumOfLanes(d, a));
      sb[p] = hn::GetLane(hn::SumOfLanes(d, b));
    }
  }
}

// Online softmax over the block: scale (times the keys' own scales for int8/fp8), new running max,
// weights exp(s - m') in place of the scores, and corr = exp(m - m') for the old state. Per-key
// value scales are folded into the stored weights after the sum l has taken them unscaled, so the
// value step needs no per-format case.
template <class D>
HWY_INLINE void SoftmaxUpdate(D d, const float* kscale, const float* vscale, float scale, const ItemTile& t,
                              const AttnItemState& st) {
  using V = hn::Vec<D>;
  const auto N = static_cast<int32_t>(hn::Lanes(d));
  for (int32_t j = 0; j < t.nvec; ++j) {
    const int32_t np = t.visible(j);
    st.corr[j] = 1.0f;
    if (np == 0) continue;
    float* sc = st.s + int64_t{j} * st.s_stride;
    const V vscale_all = hn::Set(d, scale), vneg = hn::Set(d, -INFINITY);
    V vmax = vneg;
    for (int32_t p = 0; p < np; p += N) {
      const V f = kscale ? hn::Mul(vscale_all, hn::LoadU(d, kscale + p)) : vscale_all;
      const V x = hn::Mul(hn::LoadU(d, sc + p), f);
      hn::StoreU(x, d, sc + p);
      vmax = hn::Max(vmax, hn::IfThenElse(hn::FirstN(d, static_cast<size_t>(np - p)), x, vneg));
    }
    const float m_new = std::max(st.m[j], hn::GetLane(hn::MaxOfLanes(d, vmax)));
    st.corr[j] = std::exp(st.m[j] - m_new);  // 0 for the first block (m = -inf)
    st.m[j] = m_new;
    const V vm = hn::Set(d, m_new);
    V vsum = hn::Zero(d);
    float* ws = st.wsave != nullptr ? st.wsave + int64_t{j} * st.w_stride + t.p0 : nullptr;
    if (ws != nullptr) st.mblk[int64_t{j} * st.mb_stride + t.blk] = m_new;
    for (int32_t p = 0; p < np; p += N) {
      V e = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(np - p)), hn::Exp(d, hn::Sub(hn::LoadU(d, sc + p), vm)));
      if (ws != nullptr) hn::StoreU(e, d, ws + p);
      vsum = hn::Add(vsum, e);
      if (vscale) e = hn::Mul(e, hn::LoadU(d, vscale + p));
      hn::StoreU(e, d, sc + p);
    }
    const float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
    st.l[j] = st.l[j] * st.corr[j] + sum;
  }
}

// o = o·corr + Σ_p w_p·v_p, two query vectors at a time sharing each value load, four head_dim
// vectors of each in registers so o goes through memory once per block.
template <class D, class Src>
HWY_INLINE void AccumulateValues(D d, const Src& src, const ItemTile& t, const AttnItemState& st) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t nv = static_cast<size_t>(t.hd) / N;
  for (int32_t j = 0; j < t.nvec; j += 2) {
    const int32_t na = t.visible(j), nb = t.visible(j + 1);
    if (na == 0 && nb == 0) continue;
    const float* wa = st.s + int64_t{j} * st.s_stride;
    const float* wb = wa + st.s_stride;
    float* oa = st.o + int64_t{j} * t.hd;
    float* ob = oa + t.hd;
    const V ca = hn::Set(d, st.corr[j]), cb = hn::Set(d, nb > 0 ? st.corr[j + 1] : 1.0f);
    for (size_t v0 = 0; v0 < nv; v0 += 4) {
      const size_t cnt = std::min<size_t>(4, nv - v0);
      V a[4], b[4];
      for (size_t c = 0; c < cnt; ++c) {
        a[c] = hn::Mul(hn::LoadU(d, oa + (v0 + c) * N), ca);
        if (nb > 0) b[c] = hn::Mul(hn::LoadU(d, ob + (v0 + c) * N), cb);
      }
      const int32_t both = std::min(na, nb);
      int32_t p = 0;
      for (; p < both; ++p) {
        const V ua = hn::Set(d, wa[p]), ub = hn::Set(d, wb[p]);
        const auto vr = src.ValueRow(p);
        for (size_t c = 0; c < cnt; ++c) {
          const V x = src.V(d, vr, (v0 + c) * N);
          a[c] = hn::MulAdd(ua, x, a[c]);
          b[c] = hn::MulAdd(ub, x, b[c]);
        }
      }
      for (int32_t e = p; e < na; ++e) {
        const V u = hn::Set(d, wa[e]);
        const auto vr = src.ValueRow(e);
        for (size_t c = 0; c < cnt; ++c) a[c] = hn::MulAdd(u, src.V(d, vr, (v0 + c) * N), a[c]);
      }
      for (int32_t e = p; e < nb; ++e) {
        const V u = hn::Set(d, wb[e]);
        const auto vr = src.ValueRow(e);
        for (size_t c = 0; c < cnt; ++c) b[c] = hn::MulAdd(u, src.V(d, vr, (v0 + c) * N), b[c]);
      }
      for (size_t c = 0; c < cnt; ++c) {
        if (na > 0) hn::StoreU(a[c], d, oa + (v0 + c) * N);
        if (nb > 0) hn::StoreU(b[c], d, ob + (v0 + c) * N);
      }
    }
  }
}

// One block through one row source: the three steps are instantiated per storage format so the
// inner loops decode rows in registers with no per-key branch on the format.
template <class D, class Src>
HWY_INLINE void AttendBlock(D d, const Src& src, float scale, const ItemTile& t, const AttnItemState& st) {
  BlockScores(d, src, t, st);
  SoftmaxUpdate(d, src.kscale, src.vscale, scale, t, st);
  AccumulateValues(d, src, t, st);
}

// Builds the row source of block `b` (this kv head's rows, whatever its tier and format) and
// attends to it: hot f16 is read in place, other hot dtypes widened into kbuf/vbuf, warm formats
// get their per-block scales gathered first.
template <class D>
HWY_INLINE void AttendKvBlock(D d, const KvLayerView& kv, const WarmLayout& layout, const KvBlockRef& b, float scale,
                              const ItemTile& t, const AttnItemState& st) {
  const int32_t hd = t.hd;
  if (!b.warm && kv.dtype == KvDtype::kF16) {
    const int64_t stride = kv.token_stride_bytes() / 2;
    const F16Source<D> src{reinterpret_cast<const hwy::float16_t*>(b.k), reinterpret_cast<const hwy::float16_t*>(b.v),
                           stride};
    AttendBlock(d, src, scale, t, st);
    return;
  }
  if (!b.warm) {
    HotSource<D> src;
    src.k = HotRows(d, kv, b.k, t.np_all, st.kbuf, &src.ks);
    src.v = HotRows(d, kv, b.v, t.np_all, st.vbuf, &src.vs);
    AttendBlock(d, src, scale, t, st);
    return;
  }
  const int64_t H = kv.n_kv_heads;
  const int64_t row0 = int64_t{b.t0} * H + t.kvh;  // the block's first row of this head in the slot
  switch (kv.warm_format) {
    case WarmFormat::kInt8: {
      WarmScales(kv, layout, b, t.kvh, t.np_all, st.s_stride, st.warm);
      const Int8Source<D> src{reinterpret_cast<const int8_t*>(b.k) + row0 * hd,
                              reinterpret_cast<const int8_t*>(b.v) + row0 * hd, H * hd, st.warm.kscale,
                              st.warm.vscale};
      AttendBlock(d, src, scale, t, st);
      break;
    }
    case WarmFormat::kFp8: {
      WarmScales(kv, layout, b, t.kvh, t.np_all, st.s_stride, st.warm);
      const Fp8Source<D> src{b.k + row0 * hd, b.v + row0 * hd, H * hd, st.warm.kscale, st.warm.vscale};
      AttendBlock(d, src, scale, t, st);
      break;
    }
    case WarmFormat::kInt4: {
      Int4Params(kv, layout, b, t.kvh, st.warm);
      Int4Source<D> src;
      src.k = b.k + row0 * hd / 2;
      src.v = b.v + row0 * hd / 2;
      src.stride = H * hd / 2;
      src.v_groups = static_cast<int32_t>(layout.v_groups);
      src.v_group_shift = layout.v_groups > 1 ? 5 : 31;
      src.w = &st.warm;
      AttendBlock(d, src, scale, t, st);
      break;
    }
    case WarmFormat::kNone: break;  // locate_block() only reports warm blocks with a warm tier
  }
}

// o / l into the output rows: normalising once at the end is what lets each block skip it.
HWY_INLINE void WriteOutputs(const ItemTile& t, const AttnItemState& st, float* out) {
  for (int32_t j = 0; j < t.nvec; ++j) {
    const int32_t i = t.i0 + j / t.group, h = t.kvh * t.group + j % t.group;
    float* dst = out + (int64_t{t.q_begin + i} * t.n_head + h) * t.hd;
    const float inv = 1.0f / st.l[j];
    const float* o = st.o + int64_t{j} * t.hd;
    for (int32_t e = 0; e < t.hd; ++e) dst[e] = o[e] * inv;
  }
}

// The softmax weight of each key a counted vector saw, into the thread's accumulator: the saved
// weights rescaled from their block's running max to the final one and divided by the sum.
HWY_INLINE void AddImportance(const ItemTile& t, const AttnItemState& st, int32_t importance_from, int32_t bs) {
  for (int32_t j = 0; j < t.nvec; ++j) {
    const int32_t i = t.i0 + j / t.group;
    if (i < importance_from) continue;
    const int32_t n_vis = t.start_pos + i + 1;
    const float inv_l = 1.0f / st.l[j];
    const float* w = st.wsave + int64_t{j} * st.w_stride;
    const float* mb = st.mblk + int64_t{j} * st.mb_stride;
    for (int32_t b = 0; b * bs < n_vis; ++b) {
      const float f = std::exp(mb[b] - st.m[j]) * inv_l;
      const int32_t p_end = std::min(n_vis, (b + 1) * bs);
      for (int32_t p = b * bs; p < p_end; ++p) st.acc[p] += w[p] * f;
    }
  }
}

// One work item: rows [i0, i1) of sequence s, kv head kvh, query heads kvh·group .. + group - 1,
// walking the keys one KV block at a time. D's lane count divides head_dim.
template <class D>
void RunItem(D d, const float* q, const KvLayerView& kv, const AttentionSeq& s, int32_t kvh, int32_t i0, int32_t i1,
             int32_t n_head, int32_t group, float scale, float* out, const AttnItemState& st) {
  const int32_t bs = kv.block_size;
  ItemTile t{q, s.q_begin, s.start_pos, i0, (i1 - i0) * group, group, kvh, n_head, kv.head_dim,
             static_cast<int32_t>(bs / 4 * 4)};
  ResetState(t, st);
  const WarmLayout layout = kv.warm_format != WarmFormat::kNone ? WarmLayout(kv) : WarmLayout{};
  const int32_t last_key = s.start_pos + i1 - 1;
  for (int32_t blk = 0; blk * bs <= last_key; ++blk) {
    t.p0 = blk * bs;
    t.blk = blk;
    t.np_all = std::min(bs, last_key + 1 - t.p0);
    AttendKvBlock(d, kv, layout, locate_block(kv, s.blocks[blk], kvh), scale, t, st);
  }
  if (st.wsave != nullptr) AddImportance(t, st, s.importance_from, bs);
  WriteOutputs(t, st, out);
}

void AttentionItem(const float* q, const KvLayerView& kv, const AttentionSeq& s, int32_t kvh, int32_t i0, int32_t i1,
                   int32_t n_head, float scale, float* out, const AttnItemState& st) {
  const int32_t group = n_head / kv.n_kv_heads;
  const hn::ScalableTag<float> df;
  const hn::CappedTag<float, 4> d4;
  const hn::CappedTag<float, 1> d1;
  if (kv.head_dim % static_cast<int32_t>(hn::Lanes(df)) == 0) {
    RunItem(df, q, kv, s, kvh, i0, i1, n_head, group, scale, out, st);
  } else if (kv.head_dim % static_cast<int32_t>(hn::Lanes(d4)) == 0) {
    RunItem(d4, q, kv, s, kvh, i0, i1, n_head, group, scale, out, st);
  } else {
    RunItem(d1, q, kv, s, kvh, i0, i1, n_head, group, scale, out, st);
  }
}

}  // namespace strata::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace strata::cpu {

HWY_EXPORT(AttentionItem);

void paged_attention(const float* q, const KvLayerView& kv, std::span<const AttentionSeq> seqs, int32_t n_head,
                     float scale, float* out, ThreadPool& pool, KernelScratch& scratch) {
  if (seqs.empty()) return;
  STRATA_CHECK(kv.n_kv_heads > 0 && n_head % kv.n_kv_heads == 0, "attention: {} heads over {} kv heads", n_head,
               kv.n_kv_heads);
  const int32_t group = n_head / kv.n_kv_heads;
  const int32_t tile_rows = std::max(1, kAttnTileVectors / group);
  const int32_t tile_vectors = tile_rows * group;
  const int32_t hd = kv.head_dim, bs = kv.block_size;
  const auto n_seqs = static_cast<int64_t>(seqs.size());

  // Scratch: item offsets per sequence, then one AttnItemState per thread.
  const size_t offsets_bytes = (static_cast<size_t>(n_seqs + 1) * sizeof(int64_t) + 63) / 64 * 64;
  const int32_t s_stride = (bs + 15) / 16 * 16;
  const size_t warm_floats = kv.warm_format != WarmFormat::kNone ? WarmParams::words(bs, hd, s_stride) : 0;
  const size_t state_floats =
      static_cast<size_t>(tile_vectors) * (hd + 3 + s_stride) + 2 * static_cast<size_t>(bs) * hd + warm_floats;
  // Importance: per thread, the weights and block maxima of one item (sized for the longest
  // sequence that asks) and an accumulator over every asking sequence's keys.
  int32_t imp_keys_max = 0;
  int64_t imp_keys_total = 0;
  for (const AttentionSeq& s : seqs) {
    if (s.importance == nullptr) continue;
    imp_keys_max = std::max(imp_keys_max, s.start_pos + s.n_q);
    imp_keys_total += s.start_pos + s.n_q;
  }
  const int32_t w_stride = imp_keys_max > 0 ? (imp_keys_max + 15) / 16 * 16 + 16 : 0;
  const int32_t mb_stride = imp_keys_max > 0 ? (imp_keys_max + bs - 1) / bs : 0;
  const size_t imp_floats = imp_keys_max > 0 ? static_cast<size_t>(tile_vectors) * (w_stride + mb_stride) +
                                                   static_cast<size_t>(imp_keys_total)
                                             : 0;
  const size_t state_bytes = ((state_floats + imp_floats) * sizeof(float) + 63) / 64 * 64;
  const size_t acc_offsets_bytes = imp_keys_max > 0 ? (static_cast<size_t>(n_seqs) * sizeof(int64_t) + 63) / 64 * 64 : 0;
  uint8_t* mem = scratch.get(offsets_bytes + acc_offsets_bytes + state_bytes * static_cast<size_t>(pool.size()));
  auto* offsets = reinterpret_cast<int64_t*>(mem);
  auto* acc_offsets = reinterpret_cast<int64_t*>(mem + offsets_bytes);
  if (imp_keys_max > 0) {
    int64_t o = 0;
    for (int64_t i = 0; i < n_seqs; ++i) {
      acc_offsets[i] = o;
      if (seqs[i].importance != nullptr) o += seqs[i].start_pos + seqs[i].n_q;
    }
  }
  const size_t states_at = offsets_bytes + acc_offsets_bytes;
  offsets[0] = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    const AttentionSeq& s = seqs[i];
    STRATA_CHECK(int64_t{s.n_blocks} * bs >= int64_t{s.start_pos} + s.n_q, "attention: block table too short");
    for (int32_t b = 0; b < s.n_blocks; ++b) {
      STRATA_CHECK(s.blocks[b] >= 0 && (s.blocks[b] < kv.n_hot_blocks || kv.warm_format != WarmFormat::kNone ||
                                        (kv.is_host(s.blocks[b]) && kv.host != nullptr)),
                   "attention: block id {} of a table is neither hot, warm nor in a host slot", s.blocks[b]);
    }
    offsets[i + 1] = offsets[i] + int64_t{kv.n_kv_heads} * ((s.n_q + tile_rows - 1) / tile_rows);
  }
  const int64_t n_items = offsets[n_seqs];
  std::atomic<int64_t> next{0};
  pool.run([&](int t) {
    float* f = reinterpret_cast<float*>(mem + states_at + state_bytes * static_cast<size_t>(t));
    AttnItemState st;
    st.o = f;
    st.m = st.o + int64_t{tile_vectors} * hd;
    st.l = st.m + tile_vectors;
    st.corr = st.l + tile_vectors;
    st.s = st.corr + tile_vectors;
    st.s_stride = s_stride;
    st.kbuf = st.s + int64_t{tile_vectors} * s_stride;
    st.vbuf = st.kbuf + int64_t{bs} * hd;
    if (warm_floats > 0) st.warm = WarmParams::carve(st.vbuf + int64_t{bs} * hd, bs, hd, s_stride);
    float* imp = f + state_floats;  // this thread's importance region
    if (imp_keys_max > 0) std::fill(imp + static_cast<size_t>(tile_vectors) * (w_stride + mb_stride),
                                    imp + imp_floats, 0.0f);
    for (int64_t it = next.fetch_add(1, std::memory_order_relaxed); it < n_items;
         it = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t si = std::upper_bound(offsets, offsets + n_seqs + 1, it) - offsets - 1;
      const AttentionSeq& s = seqs[si];
      const int64_t local = it - offsets[si];
      const int32_t n_tiles = (s.n_q + tile_rows - 1) / tile_rows;
      // Last tile first: the longest rows of a prompt start early.
      const auto tile = static_cast<int32_t>(n_tiles - 1 - local / kv.n_kv_heads);
      const auto kvh = static_cast<int32_t>(local % kv.n_kv_heads);
      const int32_t i0 = tile * tile_rows, i1 = std::min(s.n_q, i0 + tile_rows);
      if (s.importance != nullptr && i1 > s.importance_from) {
        st.wsave = imp;
        st.w_stride = w_stride;
        st.mblk = imp + static_cast<size_t>(tile_vectors) * w_stride;
        st.mb_stride = mb_stride;
        st.acc = imp + static_cast<size_t>(tile_vectors) * (w_stride + mb_stride) + acc_offsets[si];
      } else {
        st.wsave = st.mblk = st.acc = nullptr;
      }
      HWY_DYNAMIC_DISPATCH(AttentionItem)(q, kv, s, kvh, i0, i1, n_head, scale, out, st);
    }
  });
  if (imp_keys_max == 0) return;
  // The threads' accumulators into each asking sequence's buffer.
  for (int64_t i = 0; i < n_seqs; ++i) {
    const AttentionSeq& s = seqs[i];
    if (s.importance == nullptr) continue;
    const int32_t keys = s.start_pos + s.n_q;
    for (int t = 0; t < pool.size(); ++t) {
      const float* a = reinterpret_cast<const float*>(mem + states_at + state_bytes * static_cast<size_t>(t)) +
                       state_floats + static_cast<size_t>(tile_vectors) * (w_stride + mb_stride) + acc_offsets[i];
      for (int32_t k = 0; k < keys; ++k) s.importance[k] += a[k];
    }
  }
}

}  // namespace strata::cpu
#endif  // HWY_ONCE
