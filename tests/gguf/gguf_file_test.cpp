// GGUF reader and writer: round trips, accessors, and hostile input.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "support/test_support.h"

namespace strata {
namespace {

GgufWriter sample_writer() {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("u8", GgufValue::u8(200));
  w.set("i8", GgufValue::i8(-100));
  w.set("u16", GgufValue::u16(60000));
  w.set("i16", GgufValue::i16(-30000));
  w.set("u32", GgufValue::u32(4000000000u));
  w.set("i32", GgufValue::i32(-2000000000));
  w.set("f32", GgufValue::f32(1.5f));
  w.set("bool", GgufValue::boolean(true));
  w.set("str", GgufValue::str("héllo\nworld"));
  w.set("u64", GgufValue::u64(18000000000000000000ull));
  w.set("i64", GgufValue::i64(-9000000000000000000ll));
  w.set("f64", GgufValue::f64(-2.25));
  w.set("strings", GgufValue::array_of_strings({"a", "", "ccc"}));
  w.set("floats", GgufValue::array_of_f32({0.5f, -1.0f}));
  w.set("nested", GgufValue::array(GgufType::kArray, {GgufValue::array_of_i32({1, 2}), GgufValue::array_of_i32({})}));
  w.set("empty", GgufValue::array(GgufType::kUint8, {}));
  std::vector<uint8_t> t0(4 * 6);
  for (size_t i = 0; i < t0.size(); ++i) t0[i] = static_cast<uint8_t>(i);
  w.add_tensor("t0", GgmlType::kF32, {3, 2}, t0);
  std::vector<uint8_t> t1(34 * 2, 0x5a);
  w.add_tensor("blk.0.q8", GgmlType::kQ8_0, {32, 2}, t1);
  return w;
}

TEST(GgufFile, RoundTripKeepsEveryValueTypeAndTensor) {
  GgufWriter w = sample_writer();
  std::vector<uint8_t> bytes = w.write_memory();
  auto f = GgufFile::parse(bytes);
  EXPECT_EQ(f->version(), 3u);
  ASSERT_EQ(f->metadata().size(), 17u);
  EXPECT_EQ(f->get_uint("u8"), 200u);
  EXPECT_EQ(f->get_int("i8"), -100);
  EXPECT_EQ(f->get_uint("u16"), 60000u);
  EXPECT_EQ(f->get_int("i16"), -30000);
  EXPECT_EQ(f->get_uint("u32"), 4000000000u);
  EXPECT_EQ(f->get_int("i32"), -2000000000);
  EXPECT_EQ(f->get_float("f32"), 1.5);
  EXPECT_TRUE(f->get_bool("bool"));
  EXPECT_EQ(f->get_string("str"), "héllo\nworld");
  EXPECT_EQ(f->get_uint("u64"), 18000000000000000000ull);
  EXPECT_EQ(f->get_int("i64"), -9000000000000000000ll);
  EXPECT_EQ(f->get_float("f64"), -2.25);
  EXPECT_EQ(f->get_string_array("strings"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f->get_float_array("floats"), (std::vector<float>{0.5f, -1.0f}));
  const GgufArray& nested = f->get_array("nested");
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].as_array().items.size(), 2u);
  EXPECT_EQ(nested.items[0].as_array().items[1].as_int(), 2);
  EXPECT_EQ(f->get_array("empty").items.size(), 0u);
  EXPECT_EQ(f->architecture(), "llama");

  ASSERT_EQ(f->tensors().size(), 2u);
  const GgufTensorInfo* t0 = f->find_tensor("t0");
  ASSERT_NE(t0, nullptr);
  EXPECT_EQ(t0->n_dims, 2u);
  EXPECT_EQ(t0->ne[0], 3u);
  EXPECT_EQ(t0->ne[1], 2u);
  EXPECT_EQ(t0->n_bytes, 24u);
  EXPECT_EQ((reinterpret_cast<uintptr_t>(t0->data) - reinterpret_cast<uintptr_t>(bytes.data())) % 32, 0u);
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(t0->data[i], i);
  const GgufTensorInfo* t1 = f->find_tensor("blk.0.q8");
  ASSERT_NE(t1, nullptr);
  EXPECT_EQ(t1->type, GgmlType::kQ8_0);
  EXPECT_EQ(t1->n_bytes, 68u);
  EXPECT_EQ(t1->offset % 32, 0u);
  EXPECT_EQ(t1->data[67], 0x5a);

  // read(write(x)) == x, metadata by metadata, and writing the read file again gives the same bytes.
  GgufWriter w2;
  for (const auto& kv : f->metadata()) w2.set(kv.key, kv.value);
  for (const auto& t : f->tensors()) {
    w2.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                  std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  EXPECT_EQ(w2.write_memory(), bytes);
  auto f2 = GgufFile::parse(bytes);
  for (size_t i = 0; i < f->metadata().size(); ++i) {
    EXPECT_EQ(f->metadata()[i].key, f2->metadata()[i].key);
    EXPECT_TRUE(f->metadata()[i].value == f2->metadata()[i].value);
  }
}

TEST(GgufFile, CustomAlignmentIsHonoured) {
  GgufWriter w;
  w.set("general.alignment", GgufValue::u32(64));
  w.add_tensor("a", GgmlType::kF32, {1}, std::vector<uint8_t>(4, 1));
  w.add_tensor("b", GgmlType::kF32, {1}, std::vector<uint8_t>(4, 2));
  auto bytes = w.write_memory();
  auto f = GgufFile::parse(bytes);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find_tensor("b")->offset, 64u);
  EXPECT_EQ(f->find_tensor("b")->data[0], 2);
}

// Tensors are produced several at once and written in order: the bytes are the same with one
// thread or eight, several producers did run at the same time, and a producer's error reaches the
// caller with the others' threads joined.
std::string tensor_name(int i) {
  std::string s = "t";
  s += std::to_string(i);
  return s;
}

TEST(GgufFile, ConcurrentProducersWriteTheSameBytesInOrder) {
  std::atomic<int> running{0}, most{0};
  auto writer = [&](unsigned threads) {
    GgufWriter w;
    w.set_threads(threads);
    w.set("general.architecture", GgufValue::str("llama"));
    for (int i = 0; i < 24; ++i) {
      const uint64_t n = 1 + static_cast<uint64_t>(i * 37 % 101);  // odd sizes: every tensor padded
      w.add_tensor(tensor_name(i), GgmlType::kF32, {n}, [&, i, threads](std::span<uint8_t> out) {
        const int now = running.fetch_add(1) + 1;
        for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
        }
        // With several threads the first producer waits (at most 2 s) for a second one to start,
        // and later tensors finish first, so an in-order writer must wait for the earlier ones.
        for (int k = 0; threads > 1 && i == 0 && k < 2000 && most.load() < 2; ++k) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100 * (24 - i)));
        for (size_t b = 0; b < out.size(); ++b) out[b] = static_cast<uint8_t>(i * 31 + b);
        running.fetch_sub(1);
      });
    }
    return w;
  };
  const std::vector<uint8_t> one = writer(1).write_memory();
  EXPECT_EQ(most.load(), 1);
  most = 0;
  const std::vector<uint8_t> eight = writer(8).write_memory();
  EXPECT_GE(most.load(), 2);
  EXPECT_LE(most.load(), 8);
  EXPECT_EQ(one, eight);
  auto f = GgufFile::parse(eight);
  ASSERT_EQ(f->tensors().size(), 24u);
  for (int i = 0; i < 24; ++i) {
    const auto* t = f->find_tensor(tensor_name(i));
    ASSERT_NE(t, nullptr);
    for (uint64_t b = 0; b < t->n_bytes; ++b) ASSERT_EQ(t->data[b], static_cast<uint8_t>(i * 31 + b)) << i;
  }

  GgufWriter bad;
  bad.set_threads(4);
  for (int i = 0; i < 6; ++i) {
    bad.add_tensor(tensor_name(i), GgmlType::kF32, {4}, [i](std::span<uint8_t> out) {
      if (i == 3) throw std::runtime_error("producer 3 failed");
      std::fill(out.begin(), out.end(), uint8_t{1});
    });
  }
  EXPECT_THROW(
      {
        try {
          bad.write_memory();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "producer 3 failed");
          throw;
        }
      },
      std::runtime_error);
}

TEST(GgufFile, TypedAccessorsNameTheKey) {
  auto bytes = sample_writer().write_memory();
  auto f = GgufFile::parse(bytes, "x.gguf");
  try {
    f->get_uint("missing.key");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing metadata key 'missing.key'"), std::string::npos) << e.what();
  }
  try {
    f->get_string("u32");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'u32'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected a string, found a u32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f->get_uint("i8"), Error);  // negative
  EXPECT_FALSE(f->find_uint("nope").has_value());
  EXPECT_THROW(f->find_bool("str"), Error);
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    GgufFile::parse(bytes, "bad.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  uint8_t x[4];
  std::memcpy(x, &v, 4);
  b.insert(b.end(), x, x + 4);
}
void put_u64(std::vector<uint8_t>& b, uint64_t v) {
  uint8_t x[8];
  std::memcpy(x, &v, 8);
  b.insert(b.end(), x, x + 8);
}

TEST(GgufFile, HostileCountsFailFastWithoutAllocating) {
  // A 1 KB file that claims 10^12 tensors.
  std::vector<uint8_t> b;
  put_u32(b, kGgufMagic);
  put_u32(b, 3);
  put_u64(b, 1000000000000ull);
  put_u64(b, 0);
  b.resize(1024, 0);
  EXPECT_NE(parse_error(b).find("tensor count 1000000000000"), std::string::npos) << parse_error(b);

  std::vector<uint8_t> kv;
  put_u32(kv, kGgufMagic);
  put_u32(kv, 3);
  put_u64(kv, 0);
  put_u64(kv, 1);
  put_u64(kv, 3);
  kv.insert(kv.end(), {'a', 'r', 'r'});
  put_u32(kv, 9);  // array
  put_u32(kv, 8);  // of strings
  put_u64(kv, 1ull << 60);
  kv.resize(1024, 0);
  EXPECT_NE(parse_error(kv).find("array of key 'arr'"), std::string::npos) << parse_error(kv);

  std::vector<uint8_t> s;
  put_u32(s, kGgufMagic);
  put_u32(s, 3);
  put_u64(s, 0);
  put_u64(s, 1);
  put_u64(s, ~0ull);  // key length
  s.resize(1024, 0);
  EXPECT_NE(parse_error(s).find("claims 18446744073709551615 bytes"), std::string::npos) << parse_error(s);
}

TEST(GgufFile, MalformedHeadersNameTheProblem) {
  EXPECT_NE(parse_error({}).find("not a GGUF file"), std::string::npos);
  EXPECT_NE(parse_error({'G', 'G', 'U', 'X', 3, 0, 0, 0}).find("bad magic"), std::string::npos);
  std::vector<uint8_t> v1;
  put_u32(v1, kGgufMagic);
  put_u32(v1, 1);
  EXPECT_NE(parse_error(v1).find("version 1 is not supported"), std::string::npos);
  std::vector<uint8_t> v9;
  put_u32(v9, kGgufMagic);
  put_u32(v9, 9);
  EXPECT_NE(parse_error(v9).find("unsupported GGUF version 9"), std::string::npos);

  // Tensor data past the end of the file.
  auto good = sample_writer().write_memory();
  std::vector<uint8_t> cut(good.begin(), good.end() - 40);
  EXPECT_NE(parse_error(cut).find("extends past the end of the file"), std::string::npos) << parse_error(cut);

  // Unknown tensor type id.
  GgufWriter w;
  w.add_tensor("x", GgmlType::kF32, {4}, std::vector<uint8_t>(16));
  auto bytes = w.write_memory();
  // layout: magic, version, n_tensors, n_kv, name(8+1), n_dims(4), ne(8), type(4)
  const size_t type_pos = 4 + 4 + 8 + 8 + 8 + 1 + 4 + 8;
  bytes[type_pos] = 77;
  EXPECT_NE(parse_error(bytes).find("tensor 'x' has unknown type id 77"), std::string::npos) << parse_error(bytes);
}

TEST(GgufFile, EveryTruncationOfAValidFileFailsCleanly) {
  auto good = sample_writer().write_memory();
  // Cuts inside the zero padding after the last tensor leave a valid file.
  auto f = GgufFile::parse(good);
  uint64_t end = 0;
  for (const auto& t : f->tensors()) end = std::max(end, f->data_offset() + t.offset + t.n_bytes);
  ASSERT_LT(end, good.size());
  for (size_t n = 0; n < end; ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
    EXPECT_FALSE(parse_error(cut).empty()) << "truncated at " << n;
  }
  EXPECT_TRUE(parse_error(good).empty());
}

TEST(GgufFile, RandomCorruptionNeverCrashes) {
  const std::string model = test::read_file(test::shared_path("models/stories260K.gguf"));
  std::mt19937 rng(1234);
  const size_t header = 4096;
  int errors = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bytes(model.begin(), model.end());
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) bytes[rng() % header] ^= static_cast<uint8_t>(1u << (rng() % 8));
    try {
      auto f = GgufFile::parse(bytes);
      for (const auto& kv : f->metadata()) (void)kv.value.to_string();
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);  // some flips must be detected
}

TEST(GgufFile, ReadsTheSharedModel) {
  auto f = GgufFile::open(test::shared_path("models/stories260K.gguf"));
  EXPECT_EQ(f->architecture(), "llama");
  EXPECT_EQ(f->get_uint("llama.block_count"), 5u);
  EXPECT_EQ(f->get_uint("llama.embedding_length"), 64u);
  EXPECT_EQ(f->get_uint("llama.attention.head_count"), 8u);
  EXPECT_EQ(f->get_uint("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f->tensors().size(), 48u);
  uint64_t n_params = 0;
  for (const auto& t : f->tensors()) {
    EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
    n_params += t.n_elements();
  }
  EXPECT_NEAR(static_cast<double>(n_params), 292.8e3, 0.1e3);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens").size(), 512u);
  EXPECT_THROW(GgufFile::open("/nonexistent/file.gguf"), Error);
}

}  // namespace
}  // namespace strata
