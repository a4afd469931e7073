// libFuzzer target for the GGUF parser: any byte string must either parse or fail with
// strata::Error — no crash, no undefined behaviour, no unbounded allocation.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "gguf/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = strata::GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz");
    size_t sink = 0;
    for (const auto& kv : f->metadata()) sink += kv.value.to_string().size();
    for (const auto& t : f->tensors()) {
      sink += t.shape_string().size();
      if (t.n_bytes > 0) sink += t.data[0] + t.data[t.n_bytes - 1];  // must be inside the input
    }
    (void)f->find_string("general.architecture");
    return sink == 0xdeadbeef ? 1 : 0;
  } catch (const strata::Error&) {
    return 0;
  }
}
