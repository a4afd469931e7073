// Writes the seed corpus of the GGUF fuzzer (small synthetic files covering every value type,
// nested arrays, alignment and several tensor types). Run by `make fuzz-seeds`.
#include <cstdio>
#include <string>

#include "gguf/gguf_writer.h"

int main(int argc, char** argv) {
  using namespace strata;
  const std::string dir = argc > 1 ? argv[1] : ".";
  {
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("llama"));
    w.set("llama.block_count", GgufValue::u32(1));
    w.set("a.u8", GgufValue::u8(1));
    w.set("a.i8", GgufValue::i8(-1));
    w.set("a.u16", GgufValue::u16(2));
    w.set("a.i16", GgufValue::i16(-2));
    w.set("a.i32", GgufValue::i32(-3));
    w.set("a.f32", GgufValue::f32(0.5f));
    w.set("a.bool", GgufValue::boolean(true));
    w.set("a.u64", GgufValue::u64(4));
    w.set("a.i64", GgufValue::i64(-4));
    w.set("a.f64", GgufValue::f64(0.25));
    w.set("tokenizer.ggml.tokens", GgufValue::array_of_strings({"<unk>", "<s>", "</s>", "a", "b"}));
    w.set("tokenizer.ggml.scores", GgufValue::array_of_f32({0, 0, 0, -1, -2}));
    w.set("nested", GgufValue::array(GgufType::kArray, {GgufValue::array_of_i32({1, 2, 3})}));
    w.add_tensor("token_embd.weight", GgmlType::kF32, {4, 5}, std::vector<uint8_t>(80, 0));
    w.add_tensor("blk.0.attn_q.weight", GgmlType::kQ8_0, {32, 2}, std::vector<uint8_t>(68, 1));
    w.add_tensor("blk.0.ffn_up.weight", GgmlType::kQ4_K, {256, 1}, std::vector<uint8_t>(144, 2));
    w.write_file(dir + "/types.gguf");
  }
  {
    GgufWriter w;
    w.set("general.alignment", GgufValue::u32(64));
    w.add_tensor("x", GgmlType::kF16, {3, 1, 1, 2}, std::vector<uint8_t>(12, 3));
    w.add_tensor("y", GgmlType::kBF16, {1}, std::vector<uint8_t>(2, 4));
    w.write_file(dir + "/aligned.gguf");
  }
  {
    GgufWriter w;
    w.set("general.name", GgufValue::str("empty"));
    w.write_file(dir + "/no-tensors.gguf");
  }
  return 0;
}
