// Encodings of the warm KV tier: full blocks older than the hot window are re-encoded into one of
// these compact formats and stored in a pool of smaller slots. Attention reads them directly,
// dequantizing in its inner loop.
//
// A warm slot holds `span` consecutive logical blocks of one sequence (span * block_size tokens,
// "T" below) for one layer, K and V separately; span > 1 only for int4 with blocks of fewer than
// 32 tokens, so that keys can be grouped per channel over 32 tokens as KIVI does. Per slot, with
// H = n_kv_heads and D = head_dim:
//
//  int8  (span 1)  symmetric, a scale per token and head:
//        data  int8  [T][H][D]       x = scale * q
//        scale f16   [T][H]          scale = max|x| / 127
//  fp8   (span 1)  OCP e4m3 (bias 7, max 448, no infinities) with a scale per block and head:
//        data  u8    [T][H][D]       x = scale * e4m3(q)
//        scale f32   [H]             scale = max|x| / 448 over the block's T tokens of head h
//  int4  (span ceil(32 / block_size)), asymmetric, a scale and an integer zero point per group,
//        q in [0, 15], x = scale * (q - zero), scale = (max - min) / 15, zero = round(-min / scale)
//        as int8 (the scale widens in the rare group whose offset would not fit int8):
//        K: data u8 [T][H][D/2] (channel 2i in the low nibble, 2i+1 in the high nibble);
//           per-channel groups of Gk tokens (Gk = 32 when T % 32 == 0, else T):
//           scale f16 [T/Gk][H][D], zero i8 [T/Gk][H][D]
//        V: data u8 [T][H][D/2]; per-token groups of Gv channels (Gv = 32 when D % 32 == 0, else D):
//           scale f16 [T][H][D/Gv], zero i8 [T][H][D/Gv]
//  Sections follow each other in the order listed, each starting at a multiple of 4 bytes.
//
// Thread-safety: pure functions over caller memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kv/kv_types.h"

namespace strata {

enum class WarmFormat : uint8_t { kNone, kInt8, kFp8, kInt4 };

std::string_view warm_format_name(WarmFormat f);
std::optional<WarmFormat> warm_format_from_name(std::string_view name);  // "none", "int8", "fp8", "int4"

// Logical blocks per warm slot.
int32_t warm_span(WarmFormat f, int32_t block_size);

// Bytes of one slot of K (is_value = false) or V for one layer.
int64_t warm_slot_bytes(WarmFormat f, bool is_value, int32_t block_size, int32_t n_kv_heads, int32_t head_dim);

// OCP fp8 e4m3 (bias 7, max 448, NaN 0x7f/0xff, no infinities), round to nearest even,
// saturating. Reference conversions.
uint8_t f32_to_e4m3(float x);
float e4m3_to_f32(uint8_t v);

// Encodes `span` consecutive full hot blocks of one layer (ids `blocks`, read through `hot`) into
// one warm slot: K into k_slot, V into v_slot (warm_slot_bytes each).
void warm_encode(WarmFormat f, const KvLayerView& hot, const BlockId* blocks, int32_t span, uint8_t* k_slot,
                 uint8_t* v_slot);

// Reference decoder: token `t` (0 <= t < span * block_size) of head `h` from a K or V slot into
// out[head_dim]. Attention kernels must agree with it.
void warm_decode_row(WarmFormat f, bool is_value, const uint8_t* slot, int32_t span, int32_t block_size,
                     int32_t n_kv_heads, int32_t head_dim, int32_t t, int32_t h, float* out);

}  // namespace strata
