#include "gguf/quantize_model.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "gguf/quant.h"

namespace strata {

int llama_file_type_of(GgmlType type) {
  switch (type) {  // llama.h's enum llama_ftype ("mostly" types; K-quants as their _M/pure variants)
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ4_0: return 2;
    case GgmlType::kQ4_1: return 3;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kQ5_0: return 8;
    case GgmlType::kQ5_1: return 9;
    case GgmlType::kQ2_K: return 10;
    case GgmlType::kQ3_K: return 12;  // Q3_K_M
    case GgmlType::kQ4_K: return 15;  // Q4_K_M
    case GgmlType::kQ5_K: return 17;  // Q5_K_M
    case GgmlType::kQ6_K: return 18;
    case GgmlType::kBF16: return 32;
    default: return -1;
  }
}

int quantize_model(const GgufFile& in, GgmlType type, const std::string& out_path) {
  if (!can_quantize(type) || llama_file_type_of(type) < 0) {
    fail("cannot quantize a model to {}", ggml_type_name(type));
  }
  GgufWriter w;
  for (const auto& kv : in.metadata()) w.set(kv.key, kv.value);
  w.set("general.file_type", GgufValue::u32(static_cast<uint32_t>(llama_file_type_of(type))));
  int converted = 0;
  for (const GgufTensorInfo& t : in.tensors()) {
    std::vector<uint64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    if (t.n_dims < 2 || t.type == type) {
      std::vector<uint8_t> bytes(t.bytes().begin(), t.bytes().end());
      w.add_tensor(t.name, t.type, shape, std::move(bytes));
      continue;
    }
    if (!can_dequantize(t.type)) fail("{}: tensor {} has type {}, which cannot be read", in.source(), t.name, ggml_type_name(t.type));
    const int64_t cols = static_cast<int64_t>(t.ne[0]);
    if (cols % ggml_type_traits(type).block_size != 0) {
      fail("{}: tensor {} has rows of {} elements, not a multiple of {}'s block of {}", in.source(), t.name, cols,
           ggml_type_name(type), ggml_type_traits(type).block_size);
    }
    const GgmlType src_type = t.type;
    const uint8_t* src = t.data;
    const uint64_t rows = t.n_rows();
    w.add_tensor(t.name, type, shape, [=](std::span<uint8_t> out) {
      std::vector<float> row(static_cast<size_t>(cols));
      const uint64_t in_row = ggml_row_size(src_type, cols), out_row = ggml_row_size(type, cols);
      for (uint64_t r = 0; r < rows; ++r) {
        dequantize_row(src_type, src + r * in_row, row.data(), cols);
        quantize_row(type, row.data(), out.data() + r * out_row, cols);
      }
    });
    ++converted;
  }
  w.write_file(out_path);
  return converted;
}

std::vector<std::pair<std::string, std::string>> tensor_digests(const GgufFile& file) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const GgufTensorInfo& t : file.tensors()) {
    const XXH128_hash_t h = XXH3_128bits(t.data, t.n_bytes);
    char hex[33];
    std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                  static_cast<unsigned long long>(h.low64));
    out.emplace_back(t.name, hex);
  }
  return out;
}

}  // namespace strata
