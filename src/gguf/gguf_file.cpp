#include "gguf/gguf_file.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "core/error.h"

namespace strata {
namespace {

constexpr uint32_t kMaxArrayDepth = 8;

// Bounds-checked little-endian cursor over the file's bytes.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& source) : bytes_(bytes), source_(source) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining()) {
      fail("{}: truncated or corrupt file: {} claims {} bytes at offset {}, but only {} remain", source_, what, len,
           pos_, remaining());
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      fail("{}: truncated file: reading {} needs {} bytes at offset {}, but only {} remain", source_, what, n, pos_,
           remaining());
    }
  }

  // Fails unless `count` items of at least `min_size` bytes each can still fit in the file.
  void check_count(uint64_t count, uint64_t min_size, std::string_view what) const {
    if (min_size > 0 && count > remaining() / min_size) {
      fail("{}: corrupt file: {} count {} at offset {} cannot fit in the {} remaining bytes", source_, what, count,
           pos_, remaining());
    }
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& source_;
  size_t pos_ = 0;
};

uint64_t min_value_size(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

GgufValue read_value(Cursor& c, uint32_t type, const std::string& key, const std::string& source, uint32_t depth) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8: return GgufValue::u8(c.read<uint8_t>(key));
    case GgufType::kInt8: return GgufValue::i8(c.read<int8_t>(key));
    case GgufType::kUint16: return GgufValue::u16(c.read<uint16_t>(key));
    case GgufType::kInt16: return GgufValue::i16(c.read<int16_t>(key));
    case GgufType::kUint32: return GgufValue::u32(c.read<uint32_t>(key));
    case GgufType::kInt32: return GgufValue::i32(c.read<int32_t>(key));
    case GgufType::kFloat32: return GgufValue::f32(c.read<float>(key));
    case GgufType::kUint64: return GgufValue::u64(c.read<uint64_t>(key));
    case GgufType::kInt64: return GgufValue::i64(c.read<int64_t>(key));
    case GgufType::kFloat64: return GgufValue::f64(c.read<double>(key));
    case GgufType::kBool: {
      const uint8_t b = c.read<uint8_t>(key);
      if (b > 1) fail("{}: corrupt file: key '{}' has bool value {} (expected 0 or 1)", source, key, b);
      return GgufValue::boolean(b != 0);
    }
    case GgufType::kString: return GgufValue::str(c.read_string(fmt::format("string value of key '{}'", key)));
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth) fail("{}: corrupt file: key '{}' nests arrays deeper than {}", source, key, kMaxArrayDepth);
      const uint32_t elem = c.read<uint32_t>(key);
      if (elem >= kGgufTypeCount) fail("{}: corrupt file: key '{}' has array element type {} (unknown)", source, key, elem);
      const uint64_t n = c.read<uint64_t>(key);
      c.check_count(n, min_value_size(elem), fmt::format("array of key '{}'", key));
      std::vector<GgufValue> items;
      items.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i) items.push_back(read_value(c, elem, key, source, depth + 1));
      return GgufValue::array(static_cast<GgufType>(elem), std::move(items));
    }
  }
  fail("{}: corrupt file: key '{}' has value type {} (unknown)", source, key, type);
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

std::string GgufTensorInfo::shape_string() const {
  std::string s = "[";
  for (uint32_t i = 0; i < n_dims; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto mapping = std::make_unique<MappedFile>(path);
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = mapping->bytes();
  f->mapping_ = std::move(mapping);
  f->source_ = path;
  f->parse_all();
  return f;
}

std::unique_ptr<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string source) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = bytes;
  f->source_ = std::move(source);
  f->parse_all();
  return f;
}

void GgufFile::parse_all() {
  const std::string& src = source_;
  Cursor c(bytes_, src);
  if (bytes_.size() < 4) fail("{}: not a GGUF file: only {} bytes", src, bytes_.size());
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kGgufMagic) {
    fail("{}: not a GGUF file: bad magic {:02x} {:02x} {:02x} {:02x} (expected 'GGUF')", src, bytes_[0], bytes_[1],
         bytes_[2], bytes_[3]);
  }
  version_ = c.read<uint32_t>("version");
  if (version_ == 1) fail("{}: GGUF version 1 is not supported (only 2 and 3)", src);
  if ((version_ & 0xffff) == 0 && version_ != 0) fail("{}: big-endian GGUF files are not supported", src);
  if (version_ != 2 && version_ != 3) fail("{}: unsupported GGUF version {} (only 2 and 3)", src, version_);

  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  c.check_count(n_kv, 8 + 4 + 1, "metadata");
  kvs_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string(fmt::format("key of metadata entry {}", i));
    if (key.empty()) fail("{}: corrupt file: metadata entry {} has an empty key", src, i);
    const uint32_t type = c.read<uint32_t>(fmt::format("type of key '{}'", key));
    if (type >= kGgufTypeCount) fail("{}: corrupt file: key '{}' has value type {} (unknown)", src, key, type);
    GgufValue v = read_value(c, type, key, src, 0);
    if (kv_index_.count(key)) fail("{}: corrupt file: duplicate key '{}'", src, key);
    kv_index_.emplace(key, kvs_.size());
    kvs_.push_back({std::move(key), std::move(v)});
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type() != GgufType::kUint32) {
      fail("{}: key 'general.alignment' has type {}, expected u32", src, gguf_type_name(a->type()));
    }
    alignment_ = std::get<uint32_t>(a->data);
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
      fail("{}: key 'general.alignment' is {}, expected a non-zero power of two", src, alignment_);
    }
  }

  c.check_count(n_tensors, 8 + 4 + 4 + 8, "tensor");
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.read_string(fmt::format("name of tensor {}", i));
    t.n_dims = c.read<uint32_t>(fmt::format("dimension count of tensor '{}'", t.name));
    if (t.n_dims == 0 || t.n_dims > kGgufMaxDims) {
      fail("{}: corrupt file: tensor '{}' has {} dimensions (expected 1 to {})", src, t.name, t.n_dims, kGgufMaxDims);
    }
    uint64_t n_elem = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      t.ne[d] = c.read<uint64_t>(fmt::format("shape of tensor '{}'", t.name));
      if (t.ne[d] == 0) fail("{}: corrupt file: tensor '{}' has a zero dimension", src, t.name);
      if (t.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || mul_overflows(n_elem, t.ne[d], &n_elem) ||
          n_elem > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail("{}: corrupt file: tensor '{}' has an impossible shape (element count overflows)", src, t.name);
      }
    }
    const uint32_t type_id = c.read<uint32_t>(fmt::format("type of tensor '{}'", t.name));
    const auto traits = ggml_type_traits(type_id);
    if (!traits) fail("{}: tensor '{}' has unknown type id {}", src, t.name, type_id);
    t.type = static_cast<GgmlType>(type_id);
    if (t.ne[0] % traits->block_size != 0) {
      fail("{}: corrupt file: tensor '{}' of type {} has a row of {} elements, not a multiple of the block size {}", src,
           t.name, traits->name, t.ne[0], traits->block_size);
    }
    uint64_t row_bytes = t.ne[0] / traits->block_size * traits->type_size;
    if (mul_overflows(row_bytes, t.ne[1] * t.ne[2] * t.ne[3], &t.n_bytes)) {
      fail("{}: corrupt file: tensor '{}' has an impossible size", src, t.name);
    }
    t.offset = c.read<uint64_t>(fmt::format("offset of tensor '{}'", t.name));
    if (t.offset % alignment_ != 0) {
      fail("{}: corrupt file: tensor '{}' has offset {}, not a multiple of the alignment {}", src, t.name, t.offset,
           alignment_);
    }
    if (tensor_index_.count(t.name)) fail("{}: corrupt file: duplicate tensor name '{}'", src, t.name);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  const uint64_t pos = c.pos();
  data_offset_ = (pos + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t size = bytes_.size();
  for (auto& t : tensors_) {
    uint64_t end = 0;
    if (data_offset_ > size || __builtin_add_overflow(data_offset_, t.offset, &end) ||
        __builtin_add_overflow(end, t.n_bytes, &end) || end > size) {
      fail("{}: truncated or corrupt file: tensor '{}' ({} bytes at data offset {}) extends past the end of the file "
           "({} bytes)",
           src, t.name, t.n_bytes, t.offset, size);
    }
    t.data = bytes_.data() + data_offset_ + t.offset;
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

namespace {

template <typename F>
auto with_key(const GgufFile& f, std::string_view key, F&& fn) -> decltype(fn(std::declval<const GgufValue&>())) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) fail("{}: missing metadata key '{}'", f.source(), key);
  try {
    return fn(*v);
  } catch (const Error& e) {
    fail("{}: metadata key '{}': {}", f.source(), key, e.what());
  }
}

template <typename T, typename F>
std::vector<T> array_with_key(const GgufFile& f, std::string_view key, F&& conv) {
  return with_key(f, key, [&](const GgufValue& v) {
    const GgufArray& a = v.as_array();
    std::vector<T> out;
    out.reserve(a.items.size());
    for (const auto& item : a.items) out.push_back(conv(item));
    return out;
  });
}

}  // namespace

uint64_t GgufFile::get_uint(std::string_view key) const {
  return with_key(*this, key, [](const GgufValue& v) { return v.as_uint(); });
}
int64_t GgufFile::get_int(std::string_view key) const {
  return with_key(*this, key, [](const GgufValue& v) { return v.as_int(); });
}
double GgufFile::get_float(std::string_view key) const {
  return with_key(*this, key, [](const GgufValue& v) { return v.as_float(); });
}
bool GgufFile::get_bool(std::string_view key) const {
  return with_key(*this, key, [](const GgufValue& v) { return v.as_bool(); });
}
const std::string& GgufFile::get_string(std::string_view key) const {
  return with_key(*this, key, [](const GgufValue& v) -> const std::string& { return v.as_string(); });
}
const GgufArray& GgufFile::get_array(std::string_view key) const {
  return with_key(*this, key, [](const GgufValue& v) -> const GgufArray& { return v.as_array(); });
}
std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  return array_with_key<std::string>(*this, key, [](const GgufValue& v) { return v.as_string(); });
}
std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  return array_with_key<float>(*this, key, [](const GgufValue& v) { return static_cast<float>(v.as_float()); });
}
std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  return array_with_key<int64_t>(*this, key, [](const GgufValue& v) { return v.as_int(); });
}

std::optional<uint64_t> GgufFile::find_uint(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_uint(key);
}
std::optional<double> GgufFile::find_float(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_float(key);
}
std::optional<bool> GgufFile::find_bool(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_bool(key);
}
std::optional<std::string> GgufFile::find_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_string(key);
}

std::string GgufFile::architecture() const { return find_string("general.architecture").value_or(""); }

void GgufFile::drop_pages(const uint8_t* p, uint64_t bytes) const {
  if (mapping_) mapping_->drop_pages(p, bytes);
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace strata
