// Reading GGUF files (v2 and v3): metadata and tensor infos, tensor bytes as views into a read-only
// memory mapping. Every count, offset and size is checked against the file before use, so hostile
// or damaged files end in a strata::Error naming the problem, never in undefined behaviour.
// Thread-safety: immutable after construction; any thread may read concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mapped_file.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor_type.h"

namespace strata {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufMaxDims = 4;

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  uint32_t n_dims = 0;
  std::array<uint64_t, kGgufMaxDims> ne = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;          // from the start of the data section
  uint64_t n_bytes = 0;         // size of the tensor data
  const uint8_t* data = nullptr;  // view into the file's bytes

  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  uint64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(n_bytes)}; }
  std::string shape_string() const;  // "[64, 512]"
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws strata::Error with the path and the problem on failure.
  static std::unique_ptr<GgufFile> open(const std::string& path);

  // Parses bytes owned by the caller, who must keep them alive as long as the GgufFile.
  // `source` names the input in error messages.
  static std::unique_ptr<GgufFile> parse(std::span<const uint8_t> bytes, std::string source = "<memory>");

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section in the file
  uint64_t file_size() const { return bytes_.size(); }
  const std::string& source() const { return source_; }

  // Metadata in file order.
  const std::vector<GgufKeyValue>& metadata() const { return kvs_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed accessors: throw strata::Error naming the key when it is missing or of the wrong type.
  uint64_t get_uint(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const GgufArray& get_array(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;

  // Same, but nullopt when the key is absent (still throwing on a wrong type).
  std::optional<uint64_t> find_uint(std::string_view key) const;
  std::optional<double> find_float(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;
  std::optional<std::string> find_string(std::string_view key) const;

  // "general.architecture", or "" when absent.
  std::string architecture() const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // MappedFile::drop_pages on the file's mapping (nothing for a file parsed from memory): for
  // tensor bytes a backend has copied.
  void drop_pages(const uint8_t* p, uint64_t bytes) const;

 private:
  GgufFile() = default;
  void parse_all();

  std::unique_ptr<MappedFile> mapping_;
  std::span<const uint8_t> bytes_;
  std::string source_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace strata
