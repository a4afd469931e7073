#include "gguf/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <thread>

#include "core/check.h"
#include "core/error.h"
#include "gguf/gguf_file.h"

namespace strata {
namespace {

class MemorySink {
 public:
  void write(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  uint64_t pos() const { return out.size(); }
  std::vector<uint8_t> out;
};

class FileSink {
 public:
  explicit FileSink(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    if (!f_) fail("cannot create '{}': {}", path, std::strerror(errno));
  }
  ~FileSink() {
    if (f_) std::fclose(f_);
  }
  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail("cannot write '{}': {}", path_, std::strerror(errno));
    pos_ += n;
  }
  void close() {
    FILE* f = f_;
    f_ = nullptr;
    if (std::fclose(f) != 0) fail("cannot write '{}': {}", path_, std::strerror(errno));
  }
  uint64_t pos() const { return pos_; }

 private:
  std::string path_;
  FILE* f_;
  uint64_t pos_ = 0;
};

template <typename Sink, typename T>
void put(Sink& s, T v) {
  s.write(&v, sizeof v);
}

template <typename Sink>
void put_string(Sink& s, const std::string& str) {
  put<Sink, uint64_t>(s, str.size());
  s.write(str.data(), str.size());
}

template <typename Sink>
void put_value(Sink& s, const GgufValue& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          put_string(s, x);
        } else if constexpr (std::is_same_v<T, std::shared_ptr<GgufArray>>) {
          put<Sink, uint32_t>(s, static_cast<uint32_t>(x->elem_type));
          put<Sink, uint64_t>(s, x->items.size());
          for (const auto& item : x->items) {
            STRATA_CHECK(item.type() == x->elem_type, "array item of type {} in an array of {}",
                         gguf_type_name(item.type()), gguf_type_name(x->elem_type));
            put_value(s, item);
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          put<Sink, uint8_t>(s, x ? 1 : 0);
        } else {
          put<Sink, T>(s, x);
        }
      },
      v.data);
}

template <typename Sink>
void pad_to(Sink& s, uint64_t alignment) {
  static const uint8_t zeros[256] = {};
  uint64_t pad = (alignment - s.pos() % alignment) % alignment;
  while (pad > 0) {
    const uint64_t n = pad < sizeof zeros ? pad : sizeof zeros;
    s.write(zeros, static_cast<size_t>(n));
    pad -= n;
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& kv : kvs_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kvs_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& shape,
                            Producer produce) {
  STRATA_CHECK(!shape.empty() && shape.size() <= kGgufMaxDims, "tensor '{}' has {} dims", name, shape.size());
  for (const auto& t : tensors_) STRATA_CHECK(t.name != name, "duplicate tensor '{}'", name);
  uint64_t rows = 1;
  for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];
  tensors_.push_back({name, type, shape, ggml_row_size(type, shape[0]) * rows, std::move(produce)});
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& shape,
                            std::vector<uint8_t> bytes) {
  auto data = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add_tensor(name, type, shape, [data, name](std::span<uint8_t> out) {
    STRATA_CHECK(out.size() == data->size(), "tensor '{}' has {} bytes, expected {}", name, data->size(), out.size());
    std::memcpy(out.data(), data->data(), out.size());
  });
}

uint32_t GgufWriter::alignment() const {
  for (const auto& kv : kvs_) {
    if (kv.first == "general.alignment") return static_cast<uint32_t>(kv.second.as_uint());
  }
  return kGgufDefaultAlignment;
}

template <typename Sink>
void GgufWriter::write_to(Sink& s) const {
  const uint64_t align = alignment();
  put<Sink, uint32_t>(s, kGgufMagic);
  put<Sink, uint32_t>(s, 3);
  put<Sink, uint64_t>(s, tensors_.size());
  put<Sink, uint64_t>(s, kvs_.size());
  for (const auto& [key, value] : kvs_) {
    put_string(s, key);
    put<Sink, uint32_t>(s, static_cast<uint32_t>(value.type()));
    put_value(s, value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(s, t.name);
    put<Sink, uint32_t>(s, static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) put<Sink, uint64_t>(s, d);
    put<Sink, uint32_t>(s, static_cast<uint32_t>(t.type));
    put<Sink, uint64_t>(s, offset);
    offset += (t.n_bytes + align - 1) / align * align;
  }
  pad_to(s, align);
  // A window of tensors produced concurrently, each into its own buffer, written in order as each
  // one's turn comes. The window is bounded by the thread count and by the bytes in flight.
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t workers = std::min<size_t>(threads_ != 0 ? threads_ : std::min(hw, 16u), std::max<size_t>(tensors_.size(), 1));
  constexpr uint64_t kMaxBytesInFlight = uint64_t{2} << 30;
  struct Pending {
    std::future<std::vector<uint8_t>> bytes;
    uint64_t n_bytes;
  };
  std::deque<Pending> window;
  uint64_t in_flight = 0;
  size_t next = 0;
  auto start = [&](const Tensor& t) {
    window.push_back({std::async(std::launch::async,
                                 [&t] {
                                   std::vector<uint8_t> buf(static_cast<size_t>(t.n_bytes), 0);
                                   t.produce(buf);
                                   return buf;
                                 }),
                      t.n_bytes});
    in_flight += t.n_bytes;
  };
  while (next < tensors_.size() || !window.empty()) {
    while (next < tensors_.size() && window.size() < workers &&
           (window.empty() || in_flight + tensors_[next].n_bytes <= kMaxBytesInFlight)) {
      start(tensors_[next++]);
    }
    Pending p = std::move(window.front());
    window.pop_front();
    const std::vector<uint8_t> buf = p.bytes.get();  // rethrows a producer's error
    in_flight -= p.n_bytes;
    s.write(buf.data(), buf.size());
    pad_to(s, align);
  }
}

void GgufWriter::write_file(const std::string& path) const {
  FileSink s(path);
  write_to(s);
  s.close();
}

std::vector<uint8_t> GgufWriter::write_memory() const {
  MemorySink s;
  write_to(s);
  return std::move(s.out);
}

}  // namespace strata
