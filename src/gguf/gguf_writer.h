// Writing GGUF v3 files: metadata in insertion order, then tensor infos, then aligned tensor data.
// Tensor bytes come from a producer callback so that multi-GB models are streamed, not held in
// memory. Tensors are produced by several threads at once (set_threads), each into its own
// buffer, and written in order, so the file's bytes do not depend on the thread count; producers
// must therefore be safe to call concurrently (pure functions of what they captured).
// Thread-safety: the writer itself is not thread-safe; one writer per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf_value.h"
#include "gguf/tensor_type.h"

namespace strata {

class GgufWriter {
 public:
  // Fills exactly the tensor's byte size.
  using Producer = std::function<void(std::span<uint8_t> out)>;

  // Sets a metadata key (replacing an earlier value of the same key, keeping its position).
  void set(const std::string& key, GgufValue value);

  // Adds a tensor; `shape` has 1..4 dims, shape[0] a multiple of the type's block size.
  void add_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& shape, Producer produce);
  void add_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& shape,
                  std::vector<uint8_t> bytes);

  // How many tensors are produced at once: 0 (the default) for the hardware's threads, at most 16;
  // fewer while the tensors in flight hold 2 GiB or more (one always runs).
  void set_threads(unsigned n) { threads_ = n; }

  // Writes the file; the alignment is taken from "general.alignment" when set (u32), else 32.
  // Throws strata::Error on I/O failure.
  void write_file(const std::string& path) const;
  std::vector<uint8_t> write_memory() const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> shape;
    uint64_t n_bytes;
    Producer produce;
  };
  template <typename Sink>
  void write_to(Sink& sink) const;
  uint32_t alignment() const;

  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::vector<Tensor> tensors_;
  unsigned threads_ = 0;
};

}  // namespace strata
