#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_fused.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_transfer.h"
#include "core/check.h"
#include "core/error.h"
#include "kv/kv_view_digest.h"

namespace strata {

namespace cuda {

// cuBLAS is opened with dlopen when the first CudaBackend is made, not linked: its libraries are
// ~700 MB, and mapping them at every start of `strata` (most runs never touch a GPU) cost ~70 ms.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // Spelled out: cublasGemmEx has C++ overloads.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

namespace {

CublasApi* g_cublas = nullptr;

template <typename F>
void load_symbol(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (out == nullptr) fail("--device cuda: {} has no symbol {}", fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR), name);
}

}  // namespace

// Loads cuBLAS once (the loader's search path, then the toolkit's library folder of the build).
const CublasApi& cublas_api() {
  static std::once_flag once;
  static CublasApi api;
  std::call_once(once, [] {
    const std::string name = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen((std::string(STRATA_CUDA_LIB_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      fail("--device cuda: cannot load {} ({}); put the CUDA toolkit's lib64 on LD_LIBRARY_PATH", name, dlerror());
    }
    load_symbol(lib, "cublasCreate_v2", api.create);
    load_symbol(lib, "cublasDestroy_v2", api.destroy);
    load_symbol(lib, "cublasSetStream_v2", api.set_stream);
    load_symbol(lib, "cublasSetMathMode", api.set_math_mode);
    load_symbol(lib, "cublasSetWorkspace_v2", api.set_workspace);
    load_symbol(lib, "cublasGemmEx", api.gemm_ex);
    load_symbol(lib, "cublasGetStatusString", api.status_string);
    g_cublas = &api;
  });
  if (g_cublas == nullptr) fail("--device cuda: cuBLAS could not be loaded");
  return *g_cublas;
}

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  throw Error(fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(e), cudaGetErrorString(e), call, file, line));
}

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  const char* what = g_cublas != nullptr ? g_cublas->status_string(static_cast<cublasStatus_t>(status)) : "?";
  throw Error(fmt::format("cuBLAS error {} ({}) in {} at {}:{}", status, what, call, file, line));
}

}  // namespace cuda

namespace {

class CudaBuffer final : public DeviceBuffer {
 public:
  CudaBuffer(uint64_t bytes) : bytes_(bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<uint64_t>(bytes, 256));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail("cannot allocate {:.1f} MiB of GPU memory: {}", static_cast<double>(bytes) / (1 << 20), cudaGetErrorString(e));
    }
    data_ = static_cast<uint8_t*>(p);
  }
  ~CudaBuffer() override { (void)cudaFree(data_); }
  uint8_t* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t bytes_;
};

// Page-locked host memory (MemoryUse::kPinnedHost): the GPU's copy engines reach it at full PCIe
// speed, and a copy from or to it can be asynchronous. Portable (every context), mapped (a device
// pointer exists for kernels that read it in place).
class PinnedHostBuffer final : public DeviceBuffer {
 public:
  PinnedHostBuffer(uint64_t bytes) : bytes_(bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, std::max<uint64_t>(bytes, 256), cudaHostAllocPortable | cudaHostAllocMapped);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail("cannot allocate {:.1f} MiB of pinned host memory: {}", static_cast<double>(bytes) / (1 << 20), cudaGetErrorString(e));
    }
    data_ = static_cast<uint8_t*>(p);
  }
  ~PinnedHostBuffer() override { (void)cudaFreeHost(data_); }
  uint8_t* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t bytes_;
};

// Small host arrays on their way to the device: a pinned ring mirrored by a device ring, copied
// asynchronously with the ops that read them. Stream order makes reusing the device ring safe;
// the host ring is reused only after the stream has drained once per wrap.
class ArgStager {
 public:
  explicit ArgStager(size_t cap) { reserve(cap); }
  ~ArgStager() { release(); }

  const void* put(const void* src, size_t n, cudaStream_t s) {
    const size_t need = (std::max<size_t>(n, 1) + 255) / 256 * 256;
    if (need > cap_) {
      STRATA_CUDA(cudaStreamSynchronize(s));
      release();
      reserve(std::max(need, 2 * cap_));
      ++generation_;
    } else if (off_ + need > cap_) {
      STRATA_CUDA(cudaStreamSynchronize(s));
      off_ = 0;
      ++generation_;
    }
    std::memcpy(host_ + off_, src, n);
    STRATA_CUDA(cudaMemcpyAsync(dev_ + off_, host_ + off_, n, cudaMemcpyHostToDevice, s));
    const void* out = dev_ + off_;
    off_ += need;
    return out;
  }
  uint64_t generation() const { return generation_; }

 private:
  void reserve(size_t cap) {
    void* h = nullptr;
    STRATA_CUDA(cudaHostAlloc(&h, cap, cudaHostAllocDefault));
    host_ = static_cast<uint8_t*>(h);
    void* d = nullptr;
    STRATA_CUDA(cudaMalloc(&d, cap));
    dev_ = static_cast<uint8_t*>(d);
    cap_ = cap;
    off_ = 0;
  }
  void release() {
    if (host_) (void)cudaFreeHost(host_);
    if (dev_) (void)cudaFree(dev_);
    host_ = dev_ = nullptr;
  }
  uint8_t* host_ = nullptr;
  uint8_t* dev_ = nullptr;
  size_t cap_ = 0, off_ = 0;
  uint64_t generation_ = 0;
};

// The last array staged for one purpose: the same bytes again are not copied again.
struct StagedMemo {
  std::vector<uint8_t> bytes;
  const void* dev = nullptr;
  uint64_t generation = ~uint64_t{0};
  uint64_t graph_seq = ~uint64_t{0};
};

// kWarm: the first pass of a shape, run as it comes but with its arrays laid out as a recording
// would (so it sizes every scratch buffer the recording will use); kCapture: the second, recorded;
// kReplay: later ones, which only stage their arrays and launch the recording.
enum class Mode { kEager, kWarm, kCapture, kReplay };

// A device scratch buffer that only grows. A growth moves it, which invalidates every recorded
// graph (they hold its address): *epoch counts growths. It grows to twice its size (at most
// `limit`) or to `bytes`, whichever is more.
struct Scratch {
  std::unique_ptr<CudaBuffer> buf;
  void* get(uint64_t bytes, uint64_t* epoch, bool capturing, uint64_t limit = UINT64_MAX) {
    if (!buf || buf->bytes() < bytes) {
      STRATA_CHECK(!capturing, "scratch growth while recording a graph");
      const uint64_t grown = std::max<uint64_t>(bytes, buf ? std::min(2 * buf->bytes(), limit) : 0);
      buf.reset();  // the old buffer may still be read by queued kernels: cudaFree waits for them
      buf = std::make_unique<CudaBuffer>(grown);
      ++*epoch;
    }
    return buf->data();
  }
};

}  // namespace

// STRATA_CUDA_PROFILE=1: every op is timed on the host between two stream synchronisations
// (so each figure includes one launch, ~5 us), summed per op and weight type, and the table is
// printed to stderr when the backend is destroyed. Recording graphs is off then.
class OpProfile {
 public:
  explicit OpProfile(cudaStream_t s) : stream_(s) {}
  void begin() {
    STRATA_CUDA(cudaStreamSynchronize(stream_));
    t0_ = std::chrono::steady_clock::now();
  }
  void end(const std::string& name) {
    STRATA_CUDA(cudaStreamSynchronize(stream_));
    samples_[name].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count());
  }
  // Per op: calls, median and the sum of medians (first calls, which load kernels, do not skew it).
  void print() const {
    struct Row {
      std::string name;
      size_t calls;
      double median_us;
    };
    std::vector<Row> rows;
    double total = 0;
    for (const auto& [name, v] : samples_) {
      std::vector<double> s = v;
      std::nth_element(s.begin(), s.begin() + static_cast<long>(s.size() / 2), s.end());
      rows.push_back({name, v.size(), s[s.size() / 2]});
      total += s[s.size() / 2] * static_cast<double>(v.size());
    }
    std::sort(rows.begin(), rows.end(),
              [](const Row& a, const Row& b) { return a.median_us * a.calls > b.median_us * b.calls; });
    fmt::print(stderr, "CUDA op profile (host-timed, synchronised per op; calls x median = {:.2f} ms)\n", total / 1000);
    fmt::print(stderr, "| op | calls | median us | calls x median ms | share |\n| --- | --- | --- | --- | --- |\n");
    for (const Row& r : rows) {
      const double t = r.median_us * static_cast<double>(r.calls);
      fmt::print(stderr, "| {} | {} | {:.1f} | {:.3f} | {:.1f}% |\n", r.name, r.calls, r.median_us, t / 1000, 100 * t / total);
    }
  }

 private:
  cudaStream_t stream_;
  std::chrono::steady_clock::time_point t0_;
  std::map<std::string, std::vector<double>> samples_;
};

struct CudaBackend::Impl {
  std::unique_ptr<OpProfile> profile;  // STRATA_CUDA_PROFILE=1
  bool graphs_enabled = true;          // STRATA_CUDA_GRAPHS=0 turns recording off
  int device = 0;
  cudaDeviceProp props{};
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::vector<std::unique_ptr<CudaBuffer>> owned;  // uploaded weights and vectors
  std::unique_ptr<ArgStager> stager;
  StagedMemo memo_pos, memo_slots, memo_tokens, memo_rows, memo_attn, memo_blocks, memo_imp, memo_moves;
  Scratch x16, x16_lo, w16, attn_scratch, imp_scores, imp_ml, imp_mass, imp_part, rows_out;
  Scratch xq;  // x quantized to 8 bits for a GEMV (cuda::gemv_xq_bytes)
  Scratch xq2;  // the 8-bit output of a one-row producer that reads xq (or xq2: producer_xq)
  // What xq holds when a kernel other than a GEMV's own quantization wrote it (the decode
  // attention: xq_out_for, xq_wrote): the 8-bit form of n rows of cols at x, in buffer buf. Any
  // GEMV's xq_for or a write overlapping x forgets it.
  struct XqTag {
    const float* x = nullptr;
    int64_t n = 0, cols = 0;
    const void* buf = nullptr;
  } xq_tag;
  bool xq_last = false;  // the last GEMV read 8-bit x
  bool xq_out = false;   // one-row producers write their output's 8-bit form (producer_xq)
  int xq_out_rows_per_warp = 2;  // their blocks: 16 warps of two rows (the default) or 32 of one (STRATA_CUDA_XQ_OUT=1)
  int xq_out_staged = 0;  // cuda::GemvXq::out_staged (STRATA_CUDA_XQ_OUT=s, s2, s4)
  uint64_t xq_out_staged_max = 0;  // cuda::GemvXq::out_staged_max_bytes (STRATA_CUDA_XQ_STAGE_MAX)
  int xq_out_staged_slots = 0;     // cuda::GemvXq::out_staged_slots (STRATA_CUDA_XQ_STAGE_SLOTS; 0: auto)
  bool xq_out_staged_default = false;  // STRATA_CUDA_XQ_OUT unset: the staged form where staged_by_default
  // The weight types whose one-row GEMVs over 8-bit x take the staged forms by default (where they
  // measured faster: docs/PERFORMANCE.md).
  // Q8_0 too since the sixth session of 2026-12-06: on 8-bit x (its GEMVs' default since then) with
  // the staged producers and float GEMVs, 17% less GPU time per step than on the f32 x (H100,
  // llama-1b: 1,178.6 -> 981.5 us); on the f32 x (STRATA_CUDA_GEMV_Q8X=0) its staged float GEMVs
  // measured 4.6% faster (1,258.8 / 1,256.3 -> 1,200.9 / 1,197.5 us). F16's and BF16's float GEMVs were
  // level staged (-0.3%, +0.1%), so not by default.
  static bool staged_by_default(GgmlType t) { return t == GgmlType::kQ4_K || t == GgmlType::kQ6_K || t == GgmlType::kQ8_0; }
  int gemv_staged = -1;  // STRATA_CUDA_GEMV_STAGED: 1 every type, 2 (qkv) every type's lazy-norm consumers only, 0 none, -1 (unset) staged_by_default's
  // Attention importance of the pass in flight (attention_importance / collect_importance): the
  // host buffers that asked, where their keys sit in the packed sums, and whether a layer wrote yet.
  struct ImpTarget {
    float* host;
    int32_t keys;
    int32_t off;
  };
  std::vector<ImpTarget> imp_targets;
  std::vector<int32_t> imp_host;
  bool imp_open = false;
  int64_t imp_floats = 0;  // keys of the sequences that asked, packed
  int32_t imp_parts = 0;   // partial sums per key (cuda::ImportanceScratch::parts)
  int64_t imp_stride = 0;  // floats per partial
  float* imp_pinned = nullptr;  // collect_importance's landing buffer
  size_t imp_pinned_floats = 0;
  cudaEvent_t imp_copied = nullptr;  // collect_importance's copy into imp_pinned
  bool imp_unfinished = false;       // collected, finish_importance not yet run
  int32_t imp_layers = 0;            // layers of the pass in flight that asked
  int32_t imp_layers_last = 0;       // ... of the last collected pass (how many slices a pass wants)
  // Decode passes: each layer's attention writes its scores and its splits' (max, sum) into a
  // slice of imp_scores / imp_ml of its own (`slots` of them); one importance_decode_mass launch
  // sums the gathered layers when every slice is written (after a layer's attention, in the pass)
  // and, for what is left, in collect_importance.
  struct ImpDecode {
    int32_t slots = 1;     // slices per buffer in this pass
    int32_t pending = 0;   // layers gathered and not summed yet
    bool written = false;  // a launch wrote the partial sums in this pass: the next ones add
    int32_t n_head = 0, nsplit = 0, n_seqs = 0, max_ctx = 0;
    int64_t score_floats = 0, ml_floats = 0;  // one slice
  } imp_dec;
  std::vector<int32_t> imp_seq_host;  // the pass's attention descriptors (restaged for collect's launch)
  StagedMemo memo_imp_seqs;
  std::unordered_map<uint64_t, int32_t> imp_graph_slots;  // a recorded pass (key) -> its imp_dec.slots
  // What x16 holds: the IEEE-half rounding of the f32 array [x16_of, x16_of + x16_n), written by
  // the last conversion or by an op that wrote an f32 result and its half copy together (rms_norm,
  // add_rms_norm, silu_mul: their prefill-sized results feed a cuBLAS GEMM next), so that GEMM
  // skips the conversion pass. Every other op that writes device memory forgets it (forget_x16);
  // so do the pass boundaries of recorded graphs.
  const float* x16_of = nullptr;
  int64_t x16_n = 0;
  bool half_products = false;  // the last cuBLAS product took half activations: producers write a copy
  std::unique_ptr<CudaBuffer> cublas_workspace;
  std::vector<int32_t> attn_host;
  float* pinned_results = nullptr;  // host_result_buffer
  size_t pinned_results_floats = 0;
  std::map<std::pair<int32_t, double>, std::unique_ptr<CudaBuffer>> rope_tables;  // (n_rot, base) -> inv_freq

  // CUDA graphs of replayable passes (begin_replay/end_replay). Their host arrays are staged into
  // a fixed arena (pinned, mirrored on the device), from offset 0 in every pass, so a replay finds
  // them where the recording put them.
  Mode mode = Mode::kEager;
  uint64_t graph_seq = 0;  // changes at every begin/end: memos never cross a pass boundary
  uint8_t* arena_host = nullptr;  // the half of arena_halves this pass stages into
  std::unique_ptr<CudaBuffer> arena_dev;
  // The arena's host side in two halves, a pass in each in turn, so that a pass can be staged while
  // the copy of the one before is still queued (a decode loop that enqueues step t + 1 before it
  // reads step t's picks). A recorded pass's arrays go up in one copy before its graph launch (not
  // in the graph: a graph would bake one half's address in); arena_read[i] follows the last copy
  // that read half i.
  uint8_t* arena_halves[2] = {nullptr, nullptr};
  cudaEvent_t arena_read[2] = {nullptr, nullptr};
  bool arena_read_pending[2] = {false, false};
  int arena_half = 0;
  // Greedy picks (greedy_pick, embed_picked, collect_picks, picks): the device's pick buffer (one
  // address for every recording), the rows the last greedy_pick wrote, and kPickTickets pinned
  // landing slots with their copies' events, a ticket's slot = ticket % kPickTickets.
  static constexpr int64_t kMaxPickRows = 65536;
  std::unique_ptr<CudaBuffer> picks_dev;  // [2][kMaxPickRows]: the picks (-1: none), then what embed_picked reads
  int64_t picks_rows = 0;
  int32_t* picks_host = nullptr;
  cudaEvent_t pick_copied[Backend::kPickTickets] = {};
  int64_t pick_rows[Backend::kPickTickets] = {};
  uint64_t pick_next = 0;
  size_t arena_cap = size_t{4} << 20, arena_off = 0;
  std::unordered_map<uint64_t, cudaGraphExec_t> graphs;
  std::unordered_set<uint64_t> seen;
  uint64_t key = 0;
  int32_t pad_blocks = 0;
  int32_t plan_ctx = 0;  // AttnBatch::plan_ctx of the recorded pass (decode_plan_ctx of its longest context)
  uint64_t mem_epoch = 0, graphs_epoch = 0;
  // STRATA_CUDA_REPLAY_TIMING=1: the GPU time of each graph launch (events around it) and the host
  // time between launches, printed at exit, so a decode step's host share (launch-to-launch minus
  // GPU time) can be read off a `bench model` run.
  // A ring of event pairs: a launch may be queued behind the last one (enqueued ahead), so its
  // events are read once they have completed, at the latest kSlots launches later.
  struct ReplayTiming {
    static constexpr int kSlots = 4;
    cudaEvent_t start[kSlots] = {}, stop[kSlots] = {};
    int64_t launches = 0, timed = 0;  // launches so far; those whose GPU time is summed
    double gpu_ms = 0, between_ms = 0;
    std::chrono::steady_clock::time_point last{};
    // Sums the GPU time of the launches not yet summed: every one when `all`, else those complete
    // and at least the oldest when the ring is full.
    void harvest(bool all) {
      while (timed < launches) {
        const int i = static_cast<int>(timed % kSlots);
        const bool must = all || launches - timed >= kSlots;
        if (!must && cudaEventQuery(stop[i]) != cudaSuccess) break;
        STRATA_CUDA(cudaEventSynchronize(stop[i]));
        float ms = 0;
        STRATA_CUDA(cudaEventElapsedTime(&ms, start[i], stop[i]));
        gpu_ms += ms;
        ++timed;
      }
    }
  };
  std::unique_ptr<ReplayTiming> replay_timing;
  // STRATA_CUDA_STEP_TRACE=N (a build with -DSTRATA_CUDA_STEP_TRACE=ON): the N-th graph launch of
  // the process (counted from 0) is traced (launch.cuh) and its records written as CSV to
  // STRATA_CUDA_STEP_TRACE_FILE (default /tmp/step_trace.csv); scripts/cuda/step_trace.py reads it.
  struct StepTrace {
    static constexpr unsigned kCap = 1u << 18;  // records (8 MB)
    int64_t at = -1, launches = 0;
    std::string file = "/tmp/step_trace.csv";
    std::unique_ptr<CudaBuffer> buf;  // the count (256 bytes), then the records
    static void set(const cuda::StepTraceDev& d, cudaStream_t s) {
      cuda::step_trace_set_attention(d, s);
      cuda::step_trace_set_elementwise(d, s);
      cuda::step_trace_set_importance(d, s);
      cuda::step_trace_set_matmul(d, s);
    }
    // Arms the trace for this launch if it is the one asked for; true if armed.
    bool arm(cudaStream_t s) {
      if (launches++ != at) return false;
      buf = std::make_unique<CudaBuffer>(size_t{kCap} * 32 + 256);
      STRATA_CUDA(cudaMemsetAsync(buf->data(), 0, 256, s));
      cuda::StepTraceDev d;
      d.n = reinterpret_cast<unsigned*>(buf->data());
      d.rec = reinterpret_cast<unsigned long long*>(buf->data() + 256);
      d.cap = kCap;
      set(d, s);
      return true;
    }
    // After the traced launch: disarms, waits for it, writes the file.
    void finish(cudaStream_t s) {
      set(cuda::StepTraceDev{}, s);
      STRATA_CUDA(cudaStreamSynchronize(s));
      unsigned n = 0;
      STRATA_CUDA(cudaMemcpy(&n, buf->data(), sizeof n, cudaMemcpyDeviceToHost));
      n = std::min(n, kCap);
      std::vector<unsigned long long> rec(size_t{n} * 4);
      STRATA_CUDA(cudaMemcpy(rec.data(), buf->data() + 256, rec.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      buf.reset();
      FILE* out = std::fopen(file.c_str(), "w");
      if (out == nullptr) {
        std::fprintf(stderr, "STRATA_CUDA_STEP_TRACE: cannot write %s\n", file.c_str());
        return;
      }
      std::fprintf(out, "i,t_arrive,t_release,grid,block,threads,smid\n");
      for (unsigned i = 0; i < n; ++i) {
        const unsigned long long* r = &rec[size_t{i} * 4];
        std::fprintf(out, "%u,%llu,%llu,%llu,%llu,%llu,%llu\n", i, r[0], r[1], r[2] >> 32, r[2] & 0xffffffffull,
                     r[3] >> 32, r[3] & 0xffffffffull);
      }
      std::fclose(out);
      std::fprintf(stderr, "STRATA_CUDA_STEP_TRACE: graph launch %lld, %u records in %s%s\n", static_cast<long long>(at), n,
                   file.c_str(), n == kCap ? " (full: later records lost)" : "");
    }
  };
  std::unique_ptr<StepTrace> step_trace;
  // The KV views the ops of a recorded or replayed pass took, chained in call order
  // (kv_view_digest): kernels take a view by value, so a recording holds its fields. Kept per
  // recording and compared at each replay: a replay key that missed a field of the views (as it
  // once missed the host slots of --kv-offload) stops the process instead of replaying stale ones.
  uint64_t views_digest = 0;
  std::unordered_map<uint64_t, uint64_t> graph_views;  // a recorded pass (key) -> its views_digest
  std::unique_ptr<cuda::KvTransfer> transfer;  // KV block transfers (their own copy stream)
  // Lazy norm (STRATA_CUDA_LAZY_NORM, read when the backend is made: see the constructor): matmul_add_rms_norm leaves
  // decode batches' norms pending; the producer's partial sums of squares live in norm_parts
  // ([kGemvMaxRows][n_parts], compact per call), one fixed address for every recorded graph.
  bool lazy_norm = false;
  bool lazy_norm_every_type = false;  // else only F16/BF16/F32 weights take it
  int64_t lazy_norm_max_rows = cuda::kGemvMaxRows;  // STRATA_CUDA_LAZY_NORM_ROWS: a lower cap
  std::unique_ptr<CudaBuffer> norm_parts;
  // Fused decode passes (decode_layers; STRATA_CUDA_FUSED_DECODE=1 turns them on): the layer
  // descriptors staged per pass, the kernel's work buffer and barrier counter.
  bool fused_decode = false;
  StagedMemo memo_fused;
  Scratch fused_work;
  int64_t fused_passes = 0;

  template <typename F>
  void timed(const std::string_view name, F&& launch) {
    if (!profile) {
      launch();
      return;
    }
    profile->begin();
    launch();
    profile->end(std::string(name));
  }

  // out = the table's rows of the device token ids `tokens` (embed, embed_picked).
  void embed_rows(const WeightMatrix& table, const int32_t* tokens, ActView out) {
    wrote(out.data, out.size());
    switch (table.type) {
      case GgmlType::kF32:
      case GgmlType::kF16:
      case GgmlType::kBF16:
        timed("embed", [&] { cuda::embed_float_table(table, tokens, out.rows, out.data, stream); });
        break;
      default:
        STRATA_CHECK(cuda::matmul_type_supported(table.type), "embedding table type {} not supported on CUDA",
                     ggml_type_name(table.type));
        timed("embed", [&] { cuda::dequantize_rows_f32(table, tokens, out.rows, out.data, stream); });
    }
  }
  bool replaying() const { return mode == Mode::kReplay; }
  void took_view(const KvLayerView& kv) {
    if (mode == Mode::kCapture || mode == Mode::kReplay) views_digest = kv_view_digest(kv, views_digest);
  }
  void forget_x16() { x16_of = nullptr; }
  // Forgets what x16 and xq hold besides their GEMVs' own conversions (a buffer may reuse freed
  // memory, a copy or another op may overwrite the arrays they were made from).
  void forget_derived() {
    forget_x16();
    xq_tag = {};
  }
  // Forgets x16's array, and xq's (xq_tag), if [p, p + n) overlaps it.
  void wrote(const float* p, int64_t n) {
    if (x16_of != nullptr && p < x16_of + x16_n && x16_of < p + n) x16_of = nullptr;
    if (xq_tag.x != nullptr && p < xq_tag.x + xq_tag.n * xq_tag.cols && xq_tag.x < p + n) xq_tag = {};
  }
  // Where a producer of `n` floats at `p` (a result of rows > kGemvMaxRows) writes its half copy,
  // or nullptr (no copy: decode-sized, or the last product did not take half activations).
  void* half_copy_for(const float* p, int64_t rows, int64_t n) {
    forget_x16();
    if (rows <= cuda::kGemvMaxRows || !half_products || n <= 0) return nullptr;
    void* dst = scratch(x16, static_cast<uint64_t>(n) * 2);
    x16_of = p;
    x16_n = n;
    return dst;
  }

  // freq_base^(-2i / n_rot) for i < n_rot / 2, by std::pow as the CPU reference (kernels_ref.cpp).
  const double* rope_inv_freq(const RopeParams& p) {
    STRATA_CHECK(p.n_rot / 2 <= 256, "RoPE over more than 512 dimensions");
    auto& buf = rope_tables[{p.n_rot, static_cast<double>(p.freq_base)}];
    if (!buf) {
      STRATA_CHECK(mode != Mode::kCapture, "a RoPE table made while recording a graph");
      std::vector<double> f(static_cast<size_t>(std::max(p.n_rot / 2, 1)));
      for (int32_t i = 0; i < p.n_rot / 2; ++i) f[static_cast<size_t>(i)] = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
      buf = std::make_unique<CudaBuffer>(f.size() * sizeof(double));
      STRATA_CUDA(cudaMemcpyAsync(buf->data(), f.data(), f.size() * sizeof(double), cudaMemcpyHostToDevice, stream));
      STRATA_CUDA(cudaStreamSynchronize(stream));
    }
    return reinterpret_cast<const double*>(buf->data());
  }
  bool capturing() const { return mode == Mode::kCapture; }

  // The side-stream L2 prefetch (STRATA_CUDA_SIDE_PREFETCH; docs/PERFORMANCE.md, "the next weights
  // into L2 from a second stream"). A recorded decode pass forks a second stream after each QKV
  // projection; one small kernel there asks L2 for the head of the GEMV weights that follow that
  // layer's attention (past the first side_pf_skip of them: the O projection, whose blocks load
  // their own rows early), at most side_pf_budget bytes, while the chain goes on without waiting
  // for it; the pass joins the side stream at its end. The weights between attentions are noted in
  // a pass's warm (first) pass and used by its recording. Default (auto): 1 MB in bulk requests from
  // one block, for one-token passes of one sequence over quantized weights (H100, llama-1b: Q4_K,
  // Q6_K, Q8_0 -0.8 to -1.3% GPU time per step; F16 and B = 8 level; 24 MB from 64 blocks, the
  // first form, +86% for Q4_K: the requests queue ahead of the chain's own loads).
  // side_pf_mode: -1 off, 0 bulk (cp.async.bulk.prefetch.L2 of side_pf_chunk bytes), 1 line (one
  // prefetch.global.L2 per 128 bytes); side_pf_all: every pass and weight type (bulk, line).
  int side_pf_mode = 0;
  bool side_pf_all = false;
  uint64_t side_pf_budget = uint64_t{1} << 20;
  int side_pf_skip = 1, side_pf_blocks = 1;
  uint32_t side_pf_chunk = 32768;
  cudaStream_t side_stream = nullptr;
  cudaEvent_t side_fork = nullptr, side_join = nullptr;
  bool side_forked = false;
  int64_t side_forks = 0;
  struct PfRange {
    const uint8_t* p;
    uint64_t bytes;
    bool quantized;
  };
  struct PfPlan {
    std::vector<PfRange> ranges;
    std::vector<size_t> marks;  // ranges.size() at each attention
  };
  std::unordered_map<uint64_t, PfPlan> pf_plans;
  PfPlan pf_cur;
  size_t pf_attn = 0;
  bool pf_noting() const { return side_pf_mode >= 0 && (mode == Mode::kWarm || mode == Mode::kCapture); }
  void pf_note(const WeightMatrix& w) {
    if (!pf_noting()) return;
    const bool quantized = w.type != GgmlType::kF32 && w.type != GgmlType::kF16 && w.type != GgmlType::kBF16;
    pf_cur.ranges.push_back({w.data, static_cast<uint64_t>(w.rows) * w.row_bytes, quantized});
  }
  void pf_begin_pass() {
    pf_cur = {};
    pf_attn = 0;
    side_forked = false;
  }
  // At a decode attention of `n_seqs` one-token sequences (before its launch).
  void pf_at_attention(int64_t n_seqs) {
    if (!pf_noting()) return;
    const size_t i = pf_attn++;
    pf_cur.marks.push_back(pf_cur.ranges.size());
    if (mode != Mode::kCapture || (!side_pf_all && n_seqs != 1)) return;
    const auto it = pf_plans.find(key);
    if (it == pf_plans.end() || i >= it->second.marks.size()) return;
    const PfPlan& p = it->second;
    const size_t b = p.marks[i] + static_cast<size_t>(side_pf_skip);
    const size_t e = i + 1 < p.marks.size() ? p.marks[i + 1] : p.ranges.size();
    if (b >= e || (!side_pf_all && !p.ranges[b].quantized)) return;
    cuda::L2Ranges r;
    uint64_t left = side_pf_budget;
    for (size_t j = b; j < e && r.n < cuda::kL2Ranges && left > 0; ++j) {
      const uint64_t bytes = std::min(p.ranges[j].bytes, left);
      r.p[r.n] = p.ranges[j].p;
      r.bytes[r.n++] = bytes;
      left -= bytes;
    }
    STRATA_CUDA(cudaEventRecord(side_fork, stream));
    STRATA_CUDA(cudaStreamWaitEvent(side_stream, side_fork, 0));
    cuda::l2_prefetch(r, side_pf_blocks, side_pf_chunk, side_pf_mode, side_stream);
    side_forked = true;
    ++side_forks;
  }
  void pf_join() {
    if (!side_forked) return;
    side_forked = false;
    STRATA_CUDA(cudaEventRecord(side_join, side_stream));
    STRATA_CUDA(cudaStreamWaitEvent(stream, side_join, 0));
  }
  void* scratch(Scratch& s, uint64_t bytes, uint64_t limit = UINT64_MAX) {
    return s.get(bytes, &mem_epoch, capturing(), limit);
  }
  // The 8-bit x of a GEMV of n rows of cols at x over weights of `type` (cuda::GemvXq): the buffer,
  // none where the GEMV reads the f32 x. One buffer for all: each GEMV's quantization, and the
  // attention that writes one, waits for the GEMV before it. ready: the kernel that wrote x wrote
  // the buffer too (xq_tag), and nothing wrote x or the buffer since.
  int gemv_staged_for(GgmlType type) const {
    if (gemv_staged == 2) return 3;  // (cuda::GemvXq::out_staged: the lazy norm's consumers only)
    return gemv_staged == 1 || (gemv_staged < 0 && staged_by_default(type)) ? 2 : 0;
  }
  cuda::GemvXq xq_for(GgmlType type, const float* x, int64_t n, int64_t cols) {
    const int64_t bytes = cuda::gemv_xq_bytes(type, n, cols);
    const XqTag tag = std::exchange(xq_tag, XqTag{});
    xq_last = bytes > 0;
    if (bytes <= 0) {  // the f32 x; the one-row GEMVs that write floats may still take the staged form
      cuda::GemvXq r{};
      r.out_staged = gemv_staged_for(type);
      r.out_staged_max_bytes = xq_out_staged_max;
      return r;
    }
    const bool same_x = tag.x == x && tag.n == n && tag.cols == cols;
    if (same_x && xq2.buf && tag.buf == xq2.buf->data() && xq2.buf->bytes() >= static_cast<uint64_t>(bytes)) {
      cuda::GemvXq r{xq2.buf->data(), true};  // a producer wrote it there (producer_xq)
      r.out_staged = gemv_staged_for(type);
      r.out_staged_max_bytes = xq_out_staged_max;
      return r;
    }
    void* buf = scratch(xq, static_cast<uint64_t>(bytes));
    cuda::GemvXq r{buf, same_x && tag.buf == buf};
    r.out_staged = gemv_staged_for(type);  // the one-row GEMVs that write floats (cuda::gemv_multi etc.)
    r.out_staged_max_bytes = xq_out_staged_max;
    return r;
  }
  // Where a one-row producer of `rows` outputs (weights w) reading x writes its output's 8-bit
  // form (cuda::GemvXq::out): the buffer of xq and xq2 that its own 8-bit x is not in, where
  // cuda::gemv_xq_out says the launch writes one and the producer itself reads 8-bit x (the next
  // GEMV of the same model will; one that does not ignores it); else null. xq_wrote_to, after
  // the launch, records what it holds.
  // On by default (two rows per warp); STRATA_CUDA_XQ_OUT=0 turns it off, and the GEMV after the
  // producer quantizes its x by a launch of its own (read when the backend is made;
  // docs/PERFORMANCE.md has the measurements).
  // Returns xq_for(w.type, x, n, cols) with out (and its rows per warp) set so.
  cuda::GemvXq producer_xq(const WeightMatrix& w, const float* x, int64_t n, int64_t cols) {
    cuda::GemvXq in = xq_for(w.type, x, n, cols);
    if (!xq_out || in.buf == nullptr || !cuda::gemv_xq_out(w.type, n, w.rows, w.cols, w.row_bytes)) return in;
    const auto bytes = static_cast<uint64_t>(cuda::xq_bytes(n, w.rows));
    in.out = xq2.buf && in.buf == xq2.buf->data() ? scratch(xq, bytes) : scratch(xq2, bytes);
    in.out_rows_per_warp = xq_out_rows_per_warp;
    in.out_staged = xq_out_staged != 0 ? xq_out_staged : xq_out_staged_default && staged_by_default(w.type) ? 1 : 0;
    in.out_staged_max_bytes = xq_out_staged_max;
    in.out_staged_slots = xq_out_staged_slots;
    return in;
  }
  void xq_wrote_to(const float* x, int64_t n, int64_t cols, const void* buf) { xq_tag = {x, n, cols, buf}; }
  // Where a decode attention writing n rows of cols writes their 8-bit form too (for the O
  // projection after it): the buffer where the last GEMV read 8-bit x (the same model's O
  // projection will, or ignores it), else null. xq_wrote records what it holds.
  // STRATA_CUDA_ATTN_XQ=0: never (the O projection quantizes its x itself; an A/B switch).
  void* xq_out_for(int64_t n, int64_t cols) {
    static const bool enabled = [] {
      const char* e = std::getenv("STRATA_CUDA_ATTN_XQ");
      return e == nullptr || std::string(e) != "0";
    }();
    xq_tag = {};
    const int64_t bytes = cuda::xq_bytes(n, cols);
    return enabled && xq_last && n <= cuda::kGemvMaxRows && bytes > 0 ? scratch(xq, static_cast<uint64_t>(bytes)) : nullptr;
  }
  void xq_wrote(const float* x, int64_t n, int64_t cols) { xq_tag = {x, n, cols, xq.buf->data()}; }

  const void* stage(StagedMemo& m, const void* src, size_t n) {
    const uint64_t gen = mode == Mode::kEager ? stager->generation() : 0;
    if (m.dev != nullptr && m.generation == gen && m.graph_seq == graph_seq && m.bytes.size() == n &&
        (n == 0 || std::memcmp(m.bytes.data(), src, n) == 0)) {
      return m.dev;
    }
    if (mode == Mode::kEager) {
      m.dev = stager->put(src, n, stream);
    } else {
      const size_t need = (std::max<size_t>(n, 1) + 255) / 256 * 256;
      STRATA_CHECK(arena_off + need <= arena_cap, "graph argument arena overflow");
      std::memcpy(arena_host + arena_off, src, n);
      m.dev = arena_dev->data() + arena_off;
      if (mode == Mode::kWarm) {  // recorded passes: one copy before the launch (end_replay)
        STRATA_CUDA(cudaMemcpyAsync(arena_dev->data() + arena_off, arena_host + arena_off, n, cudaMemcpyHostToDevice, stream));
      }
      arena_off += need;
    }
    m.generation = gen;
    m.graph_seq = graph_seq;
    m.bytes.assign(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + n);
    return m.dev;
  }

  void drop_graphs() {
    for (auto& [k, g] : graphs) (void)cudaGraphExecDestroy(g);
    graphs.clear();
    seen.clear();
    imp_graph_slots.clear();
    graph_views.clear();
  }
  template <typename T>
  const T* stage(StagedMemo& m, std::span<const T> v) {
    return static_cast<const T*>(stage(m, v.data(), v.size_bytes()));
  }
};

namespace {
// The device staging buffer of KV block transfers: 512 blocks of 256 KiB (llama-1b F16) per chunk.
constexpr uint64_t kTransferStagingBytes = uint64_t{128} << 20;
// Partial sums of squares per token row a lazy-norm producer may write (its grid size; 1 per
// output row at most: a hidden size up to 16,384).
constexpr int64_t kNormPartsPerRow = 16384;
}  // namespace

bool CudaBackend::usable(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    if (why) *why = e != cudaSuccess ? fmt::format("no CUDA driver or device ({})", cudaGetErrorString(e)) : "no CUDA device";
    return false;
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = "cannot read the CUDA device's properties";
    return false;
  }
  if (p.major < 9) {
    if (why) *why = fmt::format("{} has compute capability {}.{}; this build has code for sm_90 and later", p.name, p.major, p.minor);
    return false;
  }
  return true;
}

int CudaBackend::device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

void CudaBackend::bind_thread() { STRATA_CUDA(cudaSetDevice(impl_->device)); }

int CudaBackend::device_ordinal() const { return impl_->device; }

CudaBackend::CudaBackend(int device) : impl_(std::make_unique<Impl>()) {
  std::string why;
  if (!usable(&why)) fail("--device cuda: {}", why);
  Impl& m = *impl_;
  m.device = device;
  STRATA_CUDA(cudaSetDevice(device));
  STRATA_CUDA(cudaGetDeviceProperties(&m.props, device));
  STRATA_CUDA(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  const cuda::CublasApi& blas = cuda::cublas_api();
  STRATA_CUBLAS(blas.create(&m.cublas));
  STRATA_CUBLAS(blas.set_stream(m.cublas, m.stream));
  // Plain fp32 products for F32 weights (no TF32 rounding), so F32 models match the CPU closely.
  STRATA_CUBLAS(blas.set_math_mode(m.cublas, CUBLAS_DEFAULT_MATH));
  m.stager = std::make_unique<ArgStager>(size_t{8} << 20);
  // An explicit workspace: cuBLAS then allocates nothing while a graph is being recorded.
  m.cublas_workspace = std::make_unique<CudaBuffer>(uint64_t{64} << 20);
  STRATA_CUBLAS(blas.set_workspace(m.cublas, m.cublas_workspace->data(), m.cublas_workspace->bytes()));
  for (int i = 0; i < 2; ++i) {
    void* h = nullptr;
    STRATA_CUDA(cudaHostAlloc(&h, m.arena_cap, cudaHostAllocDefault));
    m.arena_halves[i] = static_cast<uint8_t*>(h);
    STRATA_CUDA(cudaEventCreateWithFlags(&m.arena_read[i], cudaEventDisableTiming));
  }
  m.arena_host = m.arena_halves[0];
  m.arena_dev = std::make_unique<CudaBuffer>(m.arena_cap);
  m.picks_dev = std::make_unique<CudaBuffer>(2 * Impl::kMaxPickRows * sizeof(int32_t));
  {
    void* h = nullptr;
    STRATA_CUDA(cudaHostAlloc(&h, Backend::kPickTickets * Impl::kMaxPickRows * sizeof(int32_t), cudaHostAllocDefault));
    m.picks_host = static_cast<int32_t*>(h);
  }
  for (cudaEvent_t& e : m.pick_copied) STRATA_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  STRATA_CUDA(cudaEventCreateWithFlags(&m.imp_copied, cudaEventDisableTiming));
  // STRATA_CUDA_TRANSFER_STAGING=<bytes>: a smaller staging buffer (tests of the chunked path).
  uint64_t staging = kTransferStagingBytes;
  if (const char* e = std::getenv("STRATA_CUDA_TRANSFER_STAGING")) staging = std::max<uint64_t>(std::strtoull(e, nullptr, 10), 1);
  m.transfer = std::make_unique<cuda::KvTransfer>(m.stream, staging);
  const char* prof = std::getenv("STRATA_CUDA_PROFILE");
  if (prof != nullptr && std::string_view(prof) == "1") m.profile = std::make_unique<OpProfile>(m.stream);
  const char* graphs = std::getenv("STRATA_CUDA_GRAPHS");
  m.graphs_enabled = m.profile == nullptr && !(graphs != nullptr && std::string_view(graphs) == "0");
  // STRATA_CUDA_XQ_OUT: the one-row producers write the next GEMV's 8-bit x (producer_xq), from
  // blocks of 32 rows: unset or 2 = two rows per warp (16 warps), 1 = one (32 warps), 0 = off (the
  // next GEMV quantizes its x by a launch of its own). Measured on an H100, llama-1b Q4_K, device
  // call 2 of 2026-12-05's eighth session: GPU time per step 555.6 (=2), 573.3 (=1), 603.8 us (=0).
  // Unset: the staged form for Q4_K and Q6_K weights (with the float GEMVs staged too, below), two
  // rows per warp for the others. Measured on an H100, llama-1b, device call 3 of 2026-12-06's fifth
  // session, GPU us per step: Q4_K 546.8 (=2), 550.5 (=s), 527.5 (=s with STRATA_CUDA_GEMV_STAGED=1);
  // Q6_K 1,185.0, 883.2, 747.2.
  const char* xq_out = std::getenv("STRATA_CUDA_XQ_OUT");
  const std::string_view xo = xq_out != nullptr ? std::string_view(xq_out) : std::string_view("2");
  m.xq_out_staged_default = xq_out == nullptr;
  // =s: the staged form (weights copied into shared memory before the PDL wait; the SwiGLU at four
  // rows per warp, the producers at two), =s2 / =s4: staged at that many rows per warp, where the
  // rows fit shared memory (else the two-row form).
  if (xo != "0" && xo != "1" && xo != "2" && xo != "s" && xo != "s2" && xo != "s4") {
    throw Error(fmt::format("STRATA_CUDA_XQ_OUT={}: expected 0, 1, 2, s, s2 or s4", xo));
  }
  m.xq_out = xo != "0";
  m.xq_out_rows_per_warp = xo == "1" ? 1 : 2;
  m.xq_out_staged = xo == "s" ? 1 : xo == "s2" ? 2 : xo == "s4" ? 4 : 0;
  // STRATA_CUDA_XQ_STAGE_MAX=<bytes>: the staged form only where a block's rows take at most that
  // much shared memory (an experiment: e.g. every producer but the down projection).
  if (const char* e = std::getenv("STRATA_CUDA_XQ_STAGE_MAX")) {
    char* end = nullptr;
    m.xq_out_staged_max = std::strtoull(e, &end, 10);
    if (*e < '0' || *e > '9' || *end != 0) {
      throw Error(fmt::format("STRATA_CUDA_XQ_STAGE_MAX={}: expected a number of bytes (0: no cap)", e));
    }
  }
  // STRATA_CUDA_XQ_STAGE_SLOTS: the staged producers' shared memory as slots of 8 rows: unset or auto
  // = chosen per launch (matmul.cu, launch_xq_staged_fmt: the block's 32 rows at once where they fit
  // in one wave of blocks, else a ring of two slots; on llama-1b, Q8_0's down and gate/up take the
  // ring: H100, 977.3 -> 967.2 us per step, docs/PERFORMANCE.md), but Q4_K's producers whose 32 rows
  // do not fit shared memory at all (the down projection of a Llama-3-8B shape) the register form;
  // auto-ring = the ring for those too (auto until 2026-12-07); 4 = the 32 rows at once, where they
  // fit (else the register form); 2 = a ring of two everywhere.
  if (const char* e = std::getenv("STRATA_CUDA_XQ_STAGE_SLOTS")) {
    const std::string_view v(e);
    if (v != "2" && v != "4" && v != "auto" && v != "auto-ring") {
      throw Error(fmt::format("STRATA_CUDA_XQ_STAGE_SLOTS={}: expected 2, 4, auto or auto-ring", v));
    }
    m.xq_out_staged_slots = v == "2" ? 2 : v == "4" ? 4 : v == "auto-ring" ? cuda::kStageSlotsAutoRing : 0;
  }
  // STRATA_CUDA_SIDE_PREFETCH=auto (the default) | 0 | bulk | line, and _MB, _SKIP, _BLOCKS, _CHUNK_KB
  // (Impl::side_pf_mode).
  if (const char* e = std::getenv("STRATA_CUDA_SIDE_PREFETCH"); e != nullptr) {
    const std::string_view v(e);
    if (v != "auto" && v != "0" && v != "bulk" && v != "line") {
      throw Error(fmt::format("STRATA_CUDA_SIDE_PREFETCH={}: expected auto, 0, bulk or line", v));
    }
    m.side_pf_mode = v == "0" ? -1 : v == "line" ? 1 : 0;
    m.side_pf_all = v == "bulk" || v == "line";
  }
  auto num = [](const char* name, int64_t lo, int64_t hi, int64_t def) {
    const char* x = std::getenv(name);
    if (x == nullptr) return def;
    char* end = nullptr;
    const long long n = std::strtoll(x, &end, 10);
    if (end == x || *end != '\0' || n < lo || n > hi) throw Error(fmt::format("{}={}: expected {} to {}", name, x, lo, hi));
    return static_cast<int64_t>(n);
  };
  m.side_pf_budget = static_cast<uint64_t>(num("STRATA_CUDA_SIDE_PREFETCH_MB", 1, 4096, 1)) << 20;
  m.side_pf_skip = static_cast<int>(num("STRATA_CUDA_SIDE_PREFETCH_SKIP", 0, 8, 1));
  m.side_pf_blocks = static_cast<int>(num("STRATA_CUDA_SIDE_PREFETCH_BLOCKS", 1, 4096, 1));
  m.side_pf_chunk = static_cast<uint32_t>(num("STRATA_CUDA_SIDE_PREFETCH_CHUNK_KB", 1, 1024, 32)) << 10;
  if (m.side_pf_mode >= 0) {
    STRATA_CUDA(cudaStreamCreateWithFlags(&m.side_stream, cudaStreamNonBlocking));
    STRATA_CUDA(cudaEventCreateWithFlags(&m.side_fork, cudaEventDisableTiming));
    STRATA_CUDA(cudaEventCreateWithFlags(&m.side_join, cudaEventDisableTiming));
  }
  // STRATA_CUDA_GEMV_EARLY_TRIGGER: read by the GEMVs' launches (cuda::gemv_early_trigger_mode).
  if (const char* e = std::getenv("STRATA_CUDA_GEMV_EARLY_TRIGGER"); e != nullptr && cuda::gemv_early_trigger_mode(e) < 0) {
    throw Error(fmt::format("STRATA_CUDA_GEMV_EARLY_TRIGGER={}: expected 0, q4_k or all", e));
  }
  // STRATA_CUDA_GEMV_STAGED: the one-row GEMVs that write floats (the QKV projection, the LM head;
  // over 8-bit x, or the f32 x for F16/BF16/Q8_0) staged too (cuda::GemvXq::out_staged on gemv_multi and its normed form): unset =
  // for staged_by_default's types, 1 = every type, qkv = every type's lazy-norm consumers (the QKV
  // projection) only, 0 = none.
  if (const char* gs = std::getenv("STRATA_CUDA_GEMV_STAGED")) {
    const std::string_view g(gs);
    if (g != "0" && g != "1" && g != "qkv") throw Error(fmt::format("STRATA_CUDA_GEMV_STAGED={}: expected 0, 1 or qkv", g));
    m.gemv_staged = g == "1" ? 1 : g == "qkv" ? 2 : 0;
  }
  // STRATA_CUDA_LAZY_NORM: unset = single-sequence decode steps over 16/32-bit float, Q4_K and Q6_K
  // weights only (measured on the H200, llama-1b, device call 6 of 2026-12-03: F16 tg128 +3.7%, while
  // B = 8 lost 6% (F16) and 10% (Q4_K); Q4_K at B = 1 lost 1.3% then, and gained 3.0% in call 5 of
  // 2026-12-05 with the kernels of that day); 1 = every weight type and batches up to kGemvMaxRows
  // rows (or STRATA_CUDA_LAZY_NORM_ROWS); 0 = off.
  const char* lazy = std::getenv("STRATA_CUDA_LAZY_NORM");
  const bool lazy_off = lazy != nullptr && std::string_view(lazy) == "0";
  m.lazy_norm_every_type = lazy != nullptr && std::string_view(lazy) == "1";
  m.lazy_norm = !lazy_off;
  if (!m.lazy_norm_every_type) m.lazy_norm_max_rows = 1;
  if (const char* e = std::getenv("STRATA_CUDA_LAZY_NORM_ROWS")) {
    m.lazy_norm_max_rows = std::clamp<int64_t>(std::strtoll(e, nullptr, 10), 0, cuda::kGemvMaxRows);
  }
  // STRATA_CUDA_FUSED_DECODE=1: single-sequence decode passes as one persistent kernel
  // (decode_layers). Off by default: level with the layer loop when it was built (H200), 20% slower
  // than the loop on an H100 on 2026-12-07 (docs/PERFORMANCE.md, "The fused decode step" and "half
  // of the SwiGLU's rows staged").
  const char* fused = std::getenv("STRATA_CUDA_FUSED_DECODE");
  m.fused_decode = fused != nullptr && std::string_view(fused) == "1";
  if (m.lazy_norm) m.norm_parts = std::make_unique<CudaBuffer>(kNormPartsPerRow * cuda::kGemvMaxRows * sizeof(float));
  if (const char* e = std::getenv("STRATA_CUDA_STEP_TRACE"); e != nullptr && *e != '\0') {
#if defined(STRATA_CUDA_STEP_TRACE)
    char* end = nullptr;
    const long long at = std::strtoll(e, &end, 10);
    if (end == e || *end != '\0' || at < 0) {
      throw Error(fmt::format("STRATA_CUDA_STEP_TRACE={}: expected the number of a graph launch (0, 1, ...)", e));
    }
    m.step_trace = std::make_unique<Impl::StepTrace>();
    m.step_trace->at = at;
    if (const char* f = std::getenv("STRATA_CUDA_STEP_TRACE_FILE"); f != nullptr && *f != '\0') m.step_trace->file = f;
#else
    std::fprintf(stderr, "STRATA_CUDA_STEP_TRACE is set, but this build has no step trace (configure with -DSTRATA_CUDA_STEP_TRACE=ON)\n");
#endif
  }
  const char* rt = std::getenv("STRATA_CUDA_REPLAY_TIMING");
  if (rt != nullptr && std::string_view(rt) == "1") {
    m.replay_timing = std::make_unique<Impl::ReplayTiming>();
    for (int i = 0; i < Impl::ReplayTiming::kSlots; ++i) {
      STRATA_CUDA(cudaEventCreate(&m.replay_timing->start[i]));
      STRATA_CUDA(cudaEventCreate(&m.replay_timing->stop[i]));
    }
  }
}

CudaBackend::~CudaBackend() {
  if (!impl_) return;
  (void)cudaStreamSynchronize(impl_->stream);
  if (impl_->profile) impl_->profile->print();
  if (auto& t = impl_->replay_timing) {
    try {
      t->harvest(true);
    } catch (const std::exception&) {  // a failed device: report what was summed
    }
    if (t->timed > 0 && t->launches > 1) {
      const double gpu_us = 1e3 * t->gpu_ms / static_cast<double>(t->timed);
      const double between_us = 1e3 * t->between_ms / static_cast<double>(t->launches - 1);
      std::fprintf(stderr,
                   "STRATA_CUDA_REPLAY_TIMING: %lld graph launches, GPU time %.1f us per launch, %.1f us from launch to "
                   "launch on the host (%.1f us of it not GPU time)\n",
                   static_cast<long long>(t->launches), gpu_us, between_us, between_us - gpu_us);
    }
    for (int i = 0; i < Impl::ReplayTiming::kSlots; ++i) {
      (void)cudaEventDestroy(t->start[i]);
      (void)cudaEventDestroy(t->stop[i]);
    }
  }
  impl_->transfer.reset();
  impl_->drop_graphs();
  if (impl_->side_stream) (void)cudaStreamDestroy(impl_->side_stream);
  if (impl_->side_fork) (void)cudaEventDestroy(impl_->side_fork);
  if (impl_->side_join) (void)cudaEventDestroy(impl_->side_join);
  for (int i = 0; i < 2; ++i) {
    if (impl_->arena_read[i]) (void)cudaEventDestroy(impl_->arena_read[i]);
    if (impl_->arena_halves[i]) (void)cudaFreeHost(impl_->arena_halves[i]);
  }
  for (cudaEvent_t e : impl_->pick_copied) {
    if (e) (void)cudaEventDestroy(e);
  }
  if (impl_->picks_host) (void)cudaFreeHost(impl_->picks_host);
  if (impl_->imp_copied) (void)cudaEventDestroy(impl_->imp_copied);
  if (impl_->pinned_results) (void)cudaFreeHost(impl_->pinned_results);
  if (impl_->imp_pinned) (void)cudaFreeHost(impl_->imp_pinned);
  impl_->owned.clear();
  impl_->stager.reset();
  if (impl_->cublas) cuda::cublas_api().destroy(impl_->cublas);
  if (impl_->stream) (void)cudaStreamDestroy(impl_->stream);
}

std::string CudaBackend::description() const {
  const cudaDeviceProp& p = impl_->props;
  return fmt::format("cuda ({}, sm_{}{}, {} SMs, {:.0f} GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                     static_cast<double>(p.totalGlobalMem) / (uint64_t{1} << 30));
}

void CudaBackend::synchronize() { STRATA_CUDA(cudaStreamSynchronize(impl_->stream)); }

void CudaBackend::memory_info(uint64_t* free_bytes, uint64_t* total_bytes) const {
  size_t f = 0, t = 0;
  STRATA_CUDA(cudaMemGetInfo(&f, &t));
  *free_bytes = f;
  *total_bytes = t;
}

std::optional<uint64_t> CudaBackend::free_memory_bytes() {
  uint64_t f = 0, t = 0;
  memory_info(&f, &t);
  return f;
}

float* CudaBackend::host_result_buffer(size_t n) {
  Impl& m = *impl_;
  if (n > m.pinned_results_floats) {
    synchronize();  // a copy into the old buffer may be queued
    if (m.pinned_results) STRATA_CUDA(cudaFreeHost(m.pinned_results));
    m.pinned_results = nullptr;
    const size_t want = std::max(n, 2 * m.pinned_results_floats);
    void* p = nullptr;
    STRATA_CUDA(cudaHostAlloc(&p, want * sizeof(float), cudaHostAllocDefault));
    m.pinned_results = static_cast<float*>(p);
    m.pinned_results_floats = want;
  }
  return m.pinned_results;
}

std::unique_ptr<DeviceBuffer> CudaBackend::allocate(uint64_t bytes, MemoryUse use) {
  if (use == MemoryUse::kPinnedHost) return std::make_unique<PinnedHostBuffer>(bytes);
  impl_->forget_derived();  // the new buffer may reuse the memory of the arrays x16 / xq were made from
  auto buf = std::make_unique<CudaBuffer>(bytes);
  if (use == MemoryUse::kKvCache) {
    STRATA_CUDA(cudaMemsetAsync(buf->data(), 0, bytes, impl_->stream));
    synchronize();
  }
  return buf;
}

void CudaBackend::copy_to_device(void* dst, const void* src, uint64_t bytes) {
  if (bytes == 0) return;
  impl_->forget_derived();
  STRATA_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, impl_->stream));
  synchronize();  // the caller may reuse `src` at once
}

void CudaBackend::copy_to_host(void* dst, const void* src, uint64_t bytes) {
  if (bytes == 0) return;
  STRATA_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, impl_->stream));
  synchronize();
}

bool CudaBackend::supports_matmul(GgmlType type) const { return cuda::matmul_type_supported(type); }

WeightMatrix CudaBackend::upload_matrix(const WeightMatrix& host) {
  const uint64_t bytes = host.row_bytes * static_cast<uint64_t>(host.rows);
  auto buf = std::make_unique<CudaBuffer>(bytes);
  copy_to_device(buf->data(), host.data, bytes);
  WeightMatrix w = host;
  w.data = buf->data();
  impl_->owned.push_back(std::move(buf));
  return w;
}

const float* CudaBackend::upload_vector(const float* host, int64_t n) {
  if (host == nullptr) return nullptr;
  auto buf = std::make_unique<CudaBuffer>(static_cast<uint64_t>(n) * sizeof(float));
  copy_to_device(buf->data(), host, static_cast<uint64_t>(n) * sizeof(float));
  const float* p = reinterpret_cast<const float*>(buf->data());
  impl_->owned.push_back(std::move(buf));
  return p;
}

void CudaBackend::embed(const WeightMatrix& table, std::span<const TokenId> tokens, ActView out) {
  STRATA_CHECK(out.rows == static_cast<int64_t>(tokens.size()) && out.cols == table.cols);
  if (tokens.empty()) return;
  for (TokenId t : tokens) STRATA_CHECK(t >= 0 && t < table.rows, "token id {} out of range", t);
  const int32_t* d = impl_->stage(impl_->memo_tokens, tokens);
  if (impl_->replaying()) return;
  impl_->embed_rows(table, d, out);
}

void CudaBackend::greedy_pick(ActView logits) {
  Impl& m = *impl_;
  STRATA_CHECK(logits.rows <= Impl::kMaxPickRows, "greedy_pick of {} rows (at most {})", logits.rows, Impl::kMaxPickRows);
  m.picks_rows = logits.rows;
  if (logits.rows == 0 || m.replaying()) return;
  m.timed("greedy_pick", [&] {
    auto* picks = reinterpret_cast<int32_t*>(m.picks_dev->data());
    cuda::greedy_pick(logits.data, logits.rows, logits.cols, picks, picks + Impl::kMaxPickRows, m.stream);
  });
}

void CudaBackend::embed_picked(const WeightMatrix& table, ActView out) {
  Impl& m = *impl_;
  STRATA_CHECK(out.cols == table.cols && out.rows <= m.picks_rows, "embed_picked of {} rows after a pick of {}", out.rows,
               m.picks_rows);
  if (out.rows == 0 || m.replaying()) return;
  m.embed_rows(table, reinterpret_cast<const int32_t*>(m.picks_dev->data()) + Impl::kMaxPickRows, out);  // -1 as 0
}

uint64_t CudaBackend::collect_picks(int64_t n) {
  Impl& m = *impl_;
  STRATA_CHECK(m.mode == Mode::kEager, "collect_picks inside a recorded pass");
  STRATA_CHECK(n >= 0 && n <= m.picks_rows, "collect_picks of {} rows after a pick of {}", n, m.picks_rows);
  const uint64_t ticket = m.pick_next++;
  const int slot = static_cast<int>(ticket % kPickTickets);
  // The slot's last copy (kPickTickets tickets ago) may still be queued.
  STRATA_CUDA(cudaEventSynchronize(m.pick_copied[slot]));
  if (n > 0) {
    STRATA_CUDA(cudaMemcpyAsync(m.picks_host + slot * Impl::kMaxPickRows, m.picks_dev->data(),
                                static_cast<size_t>(n) * sizeof(int32_t), cudaMemcpyDeviceToHost, m.stream));
  }
  STRATA_CUDA(cudaEventRecord(m.pick_copied[slot], m.stream));
  m.pick_rows[slot] = n;
  return ticket;
}

std::span<const TokenId> CudaBackend::picks(uint64_t ticket) {
  Impl& m = *impl_;
  STRATA_CHECK(ticket < m.pick_next && m.pick_next - ticket <= kPickTickets, "picks of ticket {} (the next is {})", ticket,
               m.pick_next);
  const int slot = static_cast<int>(ticket % kPickTickets);
  STRATA_CUDA(cudaEventSynchronize(m.pick_copied[slot]));
  return {m.picks_host + slot * Impl::kMaxPickRows, static_cast<size_t>(m.pick_rows[slot])};
}

namespace {

// The 16-bit type activations are rounded to for a cuBLAS product with `w`: the weight's own for
// F16/BF16, half for quantized weights (dequantized to half), none (f32 product) for F32.
enum class X16 { kNone, kHalf, kBf16 };
X16 x16_for(GgmlType t) {
  if (t == GgmlType::kF32) return X16::kNone;
  return t == GgmlType::kBF16 ? X16::kBf16 : X16::kHalf;
}

}  // namespace

void CudaBackend::matmul(const WeightMatrix& w, ActView x, ActView y) {
  const MatmulOut one[] = {{&w, y}};
  matmul_multi(one, x);
}

// Products of more than kGemvMaxRows rows: cuBLAS, the activations rounded to 16 bits once for all
// outputs that share the rounding; fewer rows: one GEMV launch for all outputs of one type.
void CudaBackend::matmul_multi(std::span<const MatmulOut> outs, ActView x) {
  for (const MatmulOut& o : outs) {
    const WeightMatrix& w = *o.w;
    STRATA_CHECK(x.cols == w.cols && o.y.rows == x.rows && o.y.cols == w.rows, "matmul shapes");
    STRATA_CHECK(cuda::matmul_type_supported(w.type), "weight type {} not supported on CUDA", ggml_type_name(w.type));
  }
  const int64_t n = x.rows;
  if (n == 0 || impl_->replaying() || outs.empty()) return;
  Impl& m = *impl_;
  for (const MatmulOut& o : outs) m.wrote(o.y.data, o.y.size());
  if (n <= cuda::kGemvMaxRows) {
    for (const MatmulOut& o : outs) m.pf_note(*o.w);
    const bool fusable = outs.size() > 1 && outs.size() <= 4 && std::all_of(outs.begin(), outs.end(), [&](const MatmulOut& o) {
      return o.w->type == outs[0].w->type;
    });
    if (fusable) {
      WeightMatrix ws[4];
      float* ys[4];
      for (size_t i = 0; i < outs.size(); ++i) {
        ws[i] = *outs[i].w;
        ys[i] = outs[i].y.data;
      }
      m.timed(m.profile ? fmt::format("gemv x{} {} n={} [{}x{}]", outs.size(), ggml_type_name(ws[0].type), n, ws[0].rows,
                                      ws[0].cols)
                        : "",
              [&] {
                cuda::gemv_multi(ws, ys, static_cast<int>(outs.size()), x.data, n, m.stream, m.xq_for(ws[0].type, x.data, n, x.cols));
              });
      return;
    }
    for (const MatmulOut& o : outs) {
      const WeightMatrix& w = *o.w;
      m.timed(m.profile ? fmt::format("gemv {} n={} [{}x{}]", ggml_type_name(w.type), n, w.rows, w.cols) : "",
              [&] { cuda::gemv(w, x.data, n, o.y.data, m.stream, m.xq_for(w.type, x.data, n, x.cols)); });
    }
    return;
  }
  // cuBLAS, column-major: Y^T [rows x n] = W^T(op T of col-major [cols x rows]) . X^T [cols x n].
  const float one = 1.0f, zero = 0.0f;
  const int N = static_cast<int>(n), K = static_cast<int>(x.cols);
  X16 converted = X16::kNone;  // what x16 holds now
  void* x16 = nullptr;
  void* x16_lo = nullptr;  // bf16: the low half
  for (const MatmulOut& o : outs) {
    const WeightMatrix& w = *o.w;
    const int M = static_cast<int>(w.rows);
    const std::string prof_name =
        m.profile ? fmt::format("cublas {} [{}x{}] n>8", ggml_type_name(w.type), w.rows, w.cols) : std::string();
    const X16 want = x16_for(w.type);
    if (want == X16::kNone) {
      m.timed(prof_name, [&] {
        STRATA_CUBLAS(cuda::cublas_api().gemm_ex(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one, w.data, CUDA_R_32F, K, x.data,
                                   CUDA_R_32F, K, &zero, o.y.data, CUDA_R_32F, M, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
      });
      continue;
    }
    m.half_products = want == X16::kHalf;
    if (converted != want && want == X16::kHalf && m.x16_of == x.data && m.x16_n == n * x.cols) {
      x16 = m.scratch(m.x16, static_cast<uint64_t>(n * x.cols) * 2);  // written with x by its producer
      converted = want;
    }
    if (converted != want) {
      x16 = m.scratch(m.x16, static_cast<uint64_t>(n * x.cols) * 2);
      m.forget_x16();
      if (want == X16::kBf16) {
        // bf16 keeps 8 bits of each activation: split it into hi + lo and multiply by both, so the
        // product is as exact as an f16 one (two GEMMs; BF16 weights only).
        x16_lo = m.scratch(m.x16_lo, static_cast<uint64_t>(n * x.cols) * 2);
        m.timed("f32 -> bf16 hi+lo activations",
                [&] { cuda::f32_to_bf16_split(x.data, n * x.cols, x16, x16_lo, m.stream); });
      } else {
        m.timed("f32 -> 16-bit activations", [&] { cuda::f32_to_16bit(x.data, n * x.cols, x16, false, m.stream); });
        m.x16_of = x.data;
        m.x16_n = n * x.cols;
      }
      converted = want;
    }
    const cudaDataType t16 = want == X16::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
    const void* a = w.data;
    if (w.type != GgmlType::kF16 && w.type != GgmlType::kBF16) {
      void* w16 = m.scratch(m.w16, static_cast<uint64_t>(w.rows * w.cols) * 2);
      m.timed("dequantize weights to f16", [&] { cuda::dequantize_to_f16(w, 0, w.rows, w16, m.stream); });
      a = w16;
    }
    m.timed(prof_name, [&] {
      STRATA_CUBLAS(cuda::cublas_api().gemm_ex(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one, a, t16, K, x16, t16, K, &zero,
                                 o.y.data, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      if (want == X16::kBf16) {
        STRATA_CUBLAS(cuda::cublas_api().gemm_ex(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one, a, t16, K, x16_lo, t16, K, &one,
                                   o.y.data, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      }
    });
  }
}

void CudaBackend::rms_norm(ActView x, const float* weight, ActView y, float eps) {
  STRATA_CHECK(x.rows == y.rows && x.cols == y.cols);
  if (impl_->replaying()) return;
  void* y16 = impl_->half_copy_for(y.data, y.rows, y.size());
  impl_->timed("rms_norm", [&] { cuda::rms_norm(x.data, weight, y.data, x.rows, x.cols, eps, impl_->stream, y16); });
}

void CudaBackend::rope(ActView x, std::span<const int32_t> pos, int32_t n_heads, int32_t head_dim, const RopeParams& p) {
  STRATA_CHECK(x.rows == static_cast<int64_t>(pos.size()) && x.cols == int64_t{n_heads} * head_dim);
  STRATA_CHECK(p.n_rot % 2 == 0 && p.n_rot <= head_dim);
  if (pos.empty()) return;
  const int32_t* d = impl_->stage(impl_->memo_pos, pos);
  if (impl_->replaying()) return;
  impl_->wrote(x.data, x.size());
  const double* inv_freq = impl_->rope_inv_freq(p);
  impl_->timed("rope", [&] { cuda::rope(x.data, d, x.rows, n_heads, head_dim, p, inv_freq, impl_->stream); });
}

void CudaBackend::silu_mul(ActView gate, ActView up) {
  STRATA_CHECK(gate.rows == up.rows && gate.cols == up.cols);
  if (impl_->replaying()) return;
  void* out16 = impl_->half_copy_for(gate.data, gate.rows, gate.size());
  impl_->timed("silu_mul", [&] { cuda::silu_mul(gate.data, up.data, gate.size(), impl_->stream, out16); });
}

// Decode-sized batches (<= kGemvMaxRows rows): one GEMV launch for gate and up with the SiLU in
// its epilogue; larger ones: the matmuls and silu_mul one by one (the same results either way).
void CudaBackend::matmul_silu_mul(const WeightMatrix& w_gate, const WeightMatrix& w_up, ActView x, ActView gate,
                                  ActView up) {
  const bool fused = x.rows <= cuda::kGemvMaxRows && w_gate.type == w_up.type && w_gate.rows == w_up.rows &&
                     w_gate.cols == w_up.cols && w_gate.row_bytes == w_up.row_bytes &&
                     cuda::matmul_type_supported(w_gate.type);
  if (!fused) {
    Backend::matmul_silu_mul(w_gate, w_up, x, gate, up);
    return;
  }
  STRATA_CHECK(x.cols == w_gate.cols && gate.rows == x.rows && gate.cols == w_gate.rows, "matmul shapes");
  if (x.rows == 0 || impl_->replaying()) return;
  Impl& m = *impl_;
  m.wrote(gate.data, gate.size());
  m.pf_note(w_gate);
  m.pf_note(w_up);
  m.timed(m.profile ? fmt::format("gemv+silu {} n={} [2x{}x{}]", ggml_type_name(w_gate.type), x.rows, w_gate.rows,
                                  w_gate.cols)
                    : "",
          [&] {
            const cuda::GemvXq xq = m.producer_xq(w_gate, x.data, x.rows, x.cols);
            cuda::gemv_silu_mul(w_gate, w_up, x.data, x.rows, gate.data, m.stream, xq);
            if (xq.out != nullptr) m.xq_wrote_to(gate.data, gate.rows, gate.cols, xq.out);
          });
}

void CudaBackend::add(ActView y, ActView x) {
  STRATA_CHECK(y.rows == x.rows && y.cols == x.cols);
  if (impl_->replaying()) return;
  impl_->wrote(y.data, y.size());
  impl_->timed("add", [&] { cuda::add(y.data, x.data, y.size(), impl_->stream); });
}

void CudaBackend::add_bias(ActView y, const float* bias) {
  if (impl_->replaying()) return;
  impl_->wrote(y.data, y.size());
  impl_->timed("add_bias", [&] { cuda::add_bias(y.data, bias, y.rows, y.cols, impl_->stream); });
}

void CudaBackend::gather_rows(ActView src, std::span<const int32_t> rows, ActView dst) {
  STRATA_CHECK(dst.rows == static_cast<int64_t>(rows.size()) && dst.cols == src.cols);
  if (rows.empty()) return;
  for (int32_t r : rows) STRATA_CHECK(r >= 0 && r < src.rows);
  const int32_t* d = impl_->stage(impl_->memo_rows, rows);
  if (impl_->replaying()) return;
  impl_->wrote(dst.data, dst.size());
  impl_->timed("gather_rows", [&] { cuda::gather_rows(src.data, src.cols, d, dst.rows, dst.data, impl_->stream); });
}

bool CudaBackend::supports_lazy_norm(int64_t rows) const {
  return impl_->lazy_norm && rows >= 1 && rows <= impl_->lazy_norm_max_rows;
}

// Decode-sized batches with the lazy norm on: one GEMV launch for the projection, the residual add
// and x * weight (h), leaving r to the GEMVs that read h; otherwise the ops one by one.
PendingNorm CudaBackend::matmul_add_rms_norm(const WeightMatrix& w, ActView in, ActView d, ActView x,
                                             const float* weight, ActView h, float eps, bool lazy) {
  STRATA_CHECK(in.cols == w.cols && in.rows == x.rows && x.cols == w.rows && d.rows == x.rows && d.cols == x.cols &&
                   h.rows == x.rows && h.cols == x.cols,
               "matmul_add_rms_norm shapes");
  // The types that take it by default (measured on the H200, llama-1b, B = 1: F16 tg128 +3.7% in
  // 2026-12-03's call 6; Q4_K +3.0% in call 5 of 2026-12-05, 733.5 -> 710-713 us of GPU per step;
  // on an H100, Q6_K on 8-bit x 1,234.1 -> 1,174.2 us in 2026-12-06's call 1).
  const bool default_type = w.type == GgmlType::kF16 || w.type == GgmlType::kBF16 || w.type == GgmlType::kF32 ||
                            w.type == GgmlType::kQ4_K || w.type == GgmlType::kQ6_K;
  const int64_t n_parts = lazy && supports_lazy_norm(x.rows) && cuda::matmul_type_supported(w.type) &&
                                  (impl_->lazy_norm_every_type || default_type)
                              ? cuda::gemv_add_norm_parts(w, x.rows)
                              : 0;
  if (n_parts <= 0 || n_parts > kNormPartsPerRow) return Backend::matmul_add_rms_norm(w, in, d, x, weight, h, eps, false);
  Impl& m = *impl_;
  const PendingNorm pending{static_cast<const float*>(static_cast<void*>(m.norm_parts->data())),
                            static_cast<int32_t>(n_parts), eps};
  if (m.replaying()) return pending;
  m.pf_note(w);
  m.wrote(x.data, x.size());
  m.wrote(h.data, h.size());
  m.timed(m.profile ? fmt::format("gemv+add+x*g {} n={} [{}x{}]", ggml_type_name(w.type), x.rows, w.rows, w.cols) : "",
          [&] {
            const cuda::GemvXq xq = m.producer_xq(w, in.data, x.rows, in.cols);
            const int64_t p = cuda::gemv_add_norm(w, in.data, x.rows, x.data, weight, h.data,
                                                  static_cast<float*>(static_cast<void*>(m.norm_parts->data())), m.stream, xq);
            STRATA_CHECK(p == n_parts, "gemv_add_norm wrote {} parts per row, planned {}", p, n_parts);
            if (xq.out != nullptr) m.xq_wrote_to(h.data, h.rows, h.cols, xq.out);
          });
  return pending;
}

void CudaBackend::resolve_norm(ActView h, PendingNorm& norm) {
  if (!norm.pending()) return;
  const PendingNorm p = norm;
  norm = {};
  if (h.rows == 0 || impl_->replaying()) return;
  impl_->wrote(h.data, h.size());
  impl_->timed("norm_resolve", [&] { cuda::norm_resolve(h.data, h.rows, h.cols, p.parts, p.n_parts, p.eps, impl_->stream); });
}

void CudaBackend::matmul_multi_normed(std::span<const MatmulOut> outs, ActView h, PendingNorm& norm) {
  const bool fused = norm.pending() && h.rows <= cuda::kGemvMaxRows && !outs.empty() && outs.size() <= 4 &&
                     std::all_of(outs.begin(), outs.end(), [&](const MatmulOut& o) {
                       return o.w->type == outs[0].w->type && o.w->cols == h.cols &&
                              cuda::matmul_type_supported(o.w->type);
                     });
  if (!fused) {
    Backend::matmul_multi_normed(outs, h, norm);
    return;
  }
  for (const MatmulOut& o : outs) STRATA_CHECK(o.y.rows == h.rows && o.y.cols == o.w->rows, "matmul shapes");
  if (h.rows == 0 || impl_->replaying()) return;
  Impl& m = *impl_;
  WeightMatrix ws[4];
  float* ys[4];
  const size_t count = std::min<size_t>(outs.size(), 4);  // <= 4 (fused); the bound spelled out for GCC's -Wstringop-overflow
  for (size_t i = 0; i < count; ++i) {
    ws[i] = *outs[i].w;
    ys[i] = outs[i].y.data;
    m.wrote(ys[i], outs[i].y.size());
    m.pf_note(ws[i]);
  }
  m.timed(m.profile ? fmt::format("gemv*r x{} {} n={} [{}x{}]", outs.size(), ggml_type_name(ws[0].type), h.rows, ws[0].rows,
                                  ws[0].cols)
                    : "",
          [&] {
            cuda::gemv_multi_normed(ws, ys, static_cast<int>(outs.size()), h.data, h.rows, norm.parts, norm.n_parts, norm.eps,
                                    m.stream, m.xq_for(ws[0].type, h.data, h.rows, h.cols));
          });
}

void CudaBackend::matmul_silu_mul_normed(const WeightMatrix& w_gate, const WeightMatrix& w_up, ActView h,
                                         PendingNorm& norm, ActView gate, ActView up) {
  const bool fused = norm.pending() && h.rows <= cuda::kGemvMaxRows && w_gate.type == w_up.type &&
                     w_gate.rows == w_up.rows && w_gate.cols == w_up.cols && w_gate.row_bytes == w_up.row_bytes &&
                     cuda::matmul_type_supported(w_gate.type);
  if (!fused) {
    Backend::matmul_silu_mul_normed(w_gate, w_up, h, norm, gate, up);
    return;
  }
  STRATA_CHECK(h.cols == w_gate.cols && gate.rows == h.rows && gate.cols == w_gate.rows, "matmul shapes");
  if (h.rows == 0 || impl_->replaying()) return;
  Impl& m = *impl_;
  m.wrote(gate.data, gate.size());
  m.pf_note(w_gate);
  m.pf_note(w_up);
  m.timed(m.profile ? fmt::format("gemv*r+silu {} n={} [2x{}x{}]", ggml_type_name(w_gate.type), h.rows, w_gate.rows,
                                  w_gate.cols)
                    : "",
          [&] {
            const cuda::GemvXq xq = m.producer_xq(w_gate, h.data, h.rows, h.cols);
            cuda::gemv_silu_mul_normed(w_gate, w_up, h.data, h.rows, gate.data, norm.parts, norm.n_parts, norm.eps,
                                       m.stream, xq);
            if (xq.out != nullptr) m.xq_wrote_to(gate.data, gate.rows, gate.cols, xq.out);
          });
}

void CudaBackend::add_rms_norm(ActView x, ActView d, const float* weight, ActView h, float eps) {
  STRATA_CHECK(x.rows == d.rows && x.cols == d.cols && h.rows == x.rows && h.cols == x.cols);
  if (impl_->replaying()) return;
  impl_->wrote(x.data, x.size());
  void* h16 = impl_->half_copy_for(h.data, h.rows, h.size());
  impl_->timed("add_rms_norm",
               [&] { cuda::add_rms_norm(x.data, d.data, weight, h.data, x.rows, x.cols, eps, impl_->stream, h16); });
}

void CudaBackend::rope_kv_store(ActView q, ActView k, ActView v, std::span<const int32_t> pos, int32_t n_head,
                                int32_t n_kv_head, int32_t head_dim, const RopeParams& p, const KvLayerView& kv,
                                std::span<const int32_t> slots) {
  STRATA_CHECK(q.rows == static_cast<int64_t>(pos.size()) && k.rows == q.rows && v.rows == q.rows &&
               static_cast<int64_t>(slots.size()) == q.rows);
  STRATA_CHECK(q.cols == int64_t{n_head} * head_dim && k.cols == int64_t{n_kv_head} * head_dim && v.cols == k.cols);
  STRATA_CHECK(kv.n_kv_heads == n_kv_head && kv.head_dim == head_dim && p.n_rot % 2 == 0 && p.n_rot <= head_dim);
  if (pos.empty()) return;
  Impl& m = *impl_;
  m.took_view(kv);
  const int32_t* dpos = m.stage(m.memo_pos, pos);
  const int32_t* dslots = m.stage(m.memo_slots, slots);
  if (m.replaying()) return;
  m.wrote(q.data, q.size());
  m.wrote(k.data, k.size());
  const double* inv_freq = m.rope_inv_freq(p);
  m.timed("rope_kv_store", [&] {
    cuda::rope_kv_store(q.data, k.data, v.data, dpos, q.rows, n_head, n_kv_head, head_dim, p, inv_freq, kv, dslots,
                        m.stream);
  });
}

void CudaBackend::kv_store(const KvLayerView& kv, ActView k, ActView v, std::span<const int32_t> slots) {
  STRATA_CHECK(k.rows == static_cast<int64_t>(slots.size()) && v.rows == k.rows);
  STRATA_CHECK(k.cols == int64_t{kv.n_kv_heads} * kv.head_dim && v.cols == k.cols);
  if (slots.empty()) return;
  impl_->took_view(kv);
  const int32_t* d = impl_->stage(impl_->memo_slots, slots);
  if (impl_->replaying()) return;
  impl_->forget_derived();
  impl_->timed("kv_store", [&] { cuda::kv_store(kv, k.data, v.data, d, k.rows, impl_->stream); });
}

// The batch's descriptors and block tables staged in device memory (in a recorded pass every
// table padded to the shape's length, so that the arrays and the grid, sized by max_ctx, are the
// same at every replay), and scratch for split contexts (not while replaying).
cuda::AttnBatch CudaBackend::stage_attention(const KvLayerView& kv, std::span<const AttentionSeq> seqs, int64_t q_rows,
                                             int32_t n_head) {
  Impl& m = *impl_;
  m.took_view(kv);
  // [n_seqs][5] descriptors, then the block tables.
  constexpr int kFields = sizeof(cuda::AttnSeqDev) / sizeof(int32_t);
  static_assert(kFields == 5);
  std::vector<int32_t>& h = m.attn_host;
  h.assign(seqs.size() * kFields, 0);
  cuda::AttnBatch b;
  b.n_seqs = static_cast<int32_t>(seqs.size());
  int32_t table_off = 0;
  const bool padded = m.mode != Mode::kEager;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttentionSeq& s = seqs[i];
    STRATA_CHECK(s.q_begin >= 0 && s.n_q >= 0 && s.q_begin + s.n_q <= q_rows);
    STRATA_CHECK(int64_t{s.n_blocks} * kv.block_size >= s.start_pos + s.n_q, "block table too short");
    int32_t* d = h.data() + i * kFields;
    d[0] = s.q_begin;
    d[1] = s.n_q;
    d[2] = s.start_pos;
    d[3] = s.n_blocks;
    d[4] = table_off;
    if (padded) STRATA_CHECK(s.n_blocks <= m.pad_blocks, "block table longer than the recorded shape");
    table_off += padded ? m.pad_blocks : s.n_blocks;
    b.n_tokens += s.n_q;
    b.max_n_q = std::max(b.max_n_q, s.n_q);
    b.max_ctx = std::max(b.max_ctx, s.start_pos + s.n_q);
  }
  for (const AttentionSeq& s : seqs) {
    h.insert(h.end(), s.blocks, s.blocks + s.n_blocks);
    if (padded) h.insert(h.end(), static_cast<size_t>(m.pad_blocks - s.n_blocks), 0);
  }
  if (padded) {
    b.max_ctx = m.pad_blocks * kv.block_size;
    b.plan_ctx = std::min(m.plan_ctx, b.max_ctx);
  }
  const auto* staged = static_cast<const int32_t*>(m.stage(m.memo_attn, h.data(), h.size() * sizeof(int32_t)));
  b.seqs = reinterpret_cast<const cuda::AttnSeqDev*>(staged);
  b.tables = staged + seqs.size() * kFields;
  if (m.replaying()) return b;
  const int64_t scratch = cuda::attention_scratch_floats(b.n_tokens, n_head, kv.head_dim, b.max_ctx);
  b.scratch = scratch > 0 ? static_cast<float*>(m.scratch(m.attn_scratch, static_cast<uint64_t>(scratch) * sizeof(float)))
                          : nullptr;
  return b;
}

// One layer's importance launch (importance_begin / importance_end).
struct CudaBackend::ImpLayer {
  const cuda::ImpSeqDev* dimp = nullptr;
  bool first = false;
  bool decode = false;
  int32_t nsplit = 0;  // the attention kernel's splits (imp_ml's second dimension)
  // Decode: after this layer's attention, sum the `gathered` layers of the slices at scores0 /
  // ml0 (flush), adding to the partial sums (accumulate) or not.
  bool flush = false;
  bool accumulate = false;
  int32_t gathered = 0;
  float* scores0 = nullptr;
  float* ml0 = nullptr;
};

void CudaBackend::paged_attention(ActView q, const KvLayerView& kv, std::span<const AttentionSeq> seqs, int32_t n_head,
                                  float scale, ActView out) {
  STRATA_CHECK(n_head % kv.n_kv_heads == 0 && q.cols == int64_t{n_head} * kv.head_dim && out.cols == q.cols &&
               out.rows == q.rows);
  if (seqs.empty()) return;
  Impl& m = *impl_;
  if (!m.replaying()) m.wrote(out.data, out.size());
  cuda::AttnBatch b = stage_attention(kv, seqs, q.rows, n_head);
  ImpLayer il;
  const bool imp = importance_begin(kv, seqs, b, n_head, il);
  if (m.replaying()) return;
  void* xq = b.max_n_q == 1 ? m.xq_out_for(out.rows, out.cols) : nullptr;
  m.timed(b.max_n_q == 1 ? "attention (decode)" : "attention (prefill)", [&] {
    if (cuda::paged_attention(q.data, kv, b, n_head, scale, out.data, m.stream, xq)) m.xq_wrote(out.data, out.rows, out.cols);
  });
  if (imp) importance_end(q.data, kv, b, n_head, scale, il);
}

// The importance of the sequences that asked (AttentionSeq::importance). Sequence i's keys sit at
// a packed offset of the partial sums (imp_part); the pass's first launch writes them, the next
// ones add; collect_importance sums the partials if there are several (imp_mass), else copies the
// one as it is, into a page-locked buffer, and finish_importance adds it into the host buffers.
// Every attention kernel writes its splits' (max, sum) per row (AttnBatch::imp_ml). Decode
// batches (every n_q <= 1): the decode kernel also writes its scores (imp_scores), each layer into
// a slice of its own, and one light kernel turns the gathered layers into mass (one partial) when
// the slices are full and at collect (Impl::ImpDecode); other batches: attention_importance's mass
// kernel per layer (a second pass over K with the lse known), a partial per chunk of rows and kv
// head. The arrays are staged in every mode (a replayed pass finds them where the recording put
// them); kernels launch unless replaying.

namespace {
// STRATA_CUDA_IMP_GATHER_MIB (default 256): the most device memory the gathered decode scores
// (and splits' max, sum) of a pass take, in MiB; 0: one layer at a time (a mass launch per layer).
uint64_t imp_gather_cap_bytes() {
  static const uint64_t cap = [] {
    const char* e = std::getenv("STRATA_CUDA_IMP_GATHER_MIB");
    return (e != nullptr ? std::strtoull(e, nullptr, 10) : uint64_t{256}) << 20;
  }();
  return cap;
}
}  // namespace

bool CudaBackend::importance_begin(const KvLayerView& kv, std::span<const AttentionSeq> seqs, cuda::AttnBatch& b,
                                   int32_t n_head, ImpLayer& il) {
  Impl& m = *impl_;
  bool any = false;
  for (const AttentionSeq& s : seqs) any = any || s.importance != nullptr;
  if (!any) return false;
  STRATA_CHECK(kv.head_dim <= cuda::kImportanceMaxHeadDim, "attention importance: head_dim {} > {}", kv.head_dim,
               cuda::kImportanceMaxHeadDim);
  il.first = !m.imp_open;
  // A collected pass nobody finished (the model finishes every pass it collects: one that threw
  // between the two): its sums are dropped, its buffers may be gone.
  if (il.first) m.imp_unfinished = false;
  std::vector<int32_t>& h = m.imp_host;
  h.assign(2 * seqs.size(), 0);
  std::vector<Impl::ImpTarget> targets;
  int32_t off = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttentionSeq& s = seqs[i];
    h[2 * i] = std::max(0, s.importance_from);
    h[2 * i + 1] = s.importance != nullptr ? off : -1;
    if (s.importance != nullptr) {
      targets.push_back({s.importance, s.start_pos + s.n_q, off});
      off += s.start_pos + s.n_q;
    }
  }
  il.decode = b.max_n_q == 1;
  // A recorded pass has the same layout at every replay: sized by the padded shape.
  const int64_t floats = std::max<int64_t>(off, int64_t{b.n_seqs} * b.max_ctx);
  const cuda::ImportanceScratch sz =
      il.decode ? cuda::ImportanceScratch{1, floats} : cuda::importance_scratch(kv.n_kv_heads, b.max_n_q, floats);
  if (il.first) {
    m.imp_targets = std::move(targets);
    m.imp_floats = off;
    m.imp_open = true;
    m.imp_parts = sz.parts;
    m.imp_stride = floats;
    m.imp_layers = 0;
    m.imp_dec = {};
  }
  STRATA_CHECK(sz.parts == m.imp_parts && floats == m.imp_stride, "attention importance: batch shape changed within a pass");
  ++m.imp_layers;
  static_assert(sizeof(cuda::ImpSeqDev) == 2 * sizeof(int32_t));
  il.dimp = reinterpret_cast<const cuda::ImpSeqDev*>(m.stage(m.memo_imp, std::span<const int32_t>(h)));
  // Every attention kernel writes its splits' (max, sum) per row; decode also its scores.
  il.nsplit = cuda::attention_splits(kv, b, n_head);
  const int64_t rows = int64_t{b.n_tokens} * n_head;
  if (!il.decode) {
    if (m.replaying()) return true;
    b.imp_ml = static_cast<float*>(m.scratch(m.imp_ml, static_cast<uint64_t>(rows * il.nsplit * 2) * sizeof(float)));
    return true;
  }
  // Decode: this layer's slice, and whether the slices are full after it.
  Impl::ImpDecode& d = m.imp_dec;
  const int64_t score_floats = rows * b.max_ctx, ml_floats = rows * il.nsplit * 2;
  if (il.first) {
    d.n_head = n_head;
    d.nsplit = il.nsplit;
    d.n_seqs = b.n_seqs;
    d.max_ctx = b.max_ctx;
    d.score_floats = score_floats;
    d.ml_floats = ml_floats;
    constexpr size_t kFields = sizeof(cuda::AttnSeqDev) / sizeof(int32_t);
    m.imp_seq_host.assign(m.attn_host.begin(), m.attn_host.begin() + static_cast<int64_t>(seqs.size() * kFields));
    // Slices: as many as the last pass had layers, within the cap and the kernel's limit; a
    // recording takes what the buffers hold (they cannot grow while it records), a replay what
    // its recording took.
    if (m.mode == Mode::kReplay) {
      const auto it = m.imp_graph_slots.find(m.key);
      STRATA_CHECK(it != m.imp_graph_slots.end(), "attention importance: a replayed pass without its recording's slices");
      d.slots = it->second;
    } else {
      const uint64_t slice_bytes = std::max<uint64_t>(static_cast<uint64_t>(score_floats + ml_floats) * sizeof(float), 1);
      int64_t n = std::min<int64_t>({std::max(m.imp_layers_last, 1), static_cast<int64_t>(imp_gather_cap_bytes() / slice_bytes),
                                     cuda::importance_decode_layers_max(n_head)});
      if (m.capturing()) {
        const auto held = [](const Scratch& sc, int64_t slice) {
          return sc.buf ? static_cast<int64_t>(sc.buf->bytes() / (static_cast<uint64_t>(slice) * sizeof(float))) : 0;
        };
        n = std::min({n, held(m.imp_scores, score_floats), held(m.imp_ml, ml_floats)});
      }
      d.slots = static_cast<int32_t>(std::max<int64_t>(n, 1));
      if (m.capturing()) m.imp_graph_slots[m.key] = d.slots;
    }
  }
  STRATA_CHECK(d.nsplit == il.nsplit && d.n_head == n_head && d.score_floats == score_floats && d.ml_floats == ml_floats,
               "attention importance: decode shape changed within a pass");
  const int32_t slot = d.pending;
  il.gathered = slot + 1;
  il.flush = il.gathered == d.slots;
  il.accumulate = d.written;
  d.pending = il.flush ? 0 : il.gathered;
  d.written = d.written || il.flush;
  if (m.replaying()) return true;
  const uint64_t cap = std::max<uint64_t>(imp_gather_cap_bytes(), static_cast<uint64_t>(score_floats + ml_floats) * sizeof(float));
  il.scores0 = static_cast<float*>(m.scratch(m.imp_scores, static_cast<uint64_t>(d.slots * score_floats) * sizeof(float), cap));
  il.ml0 = static_cast<float*>(m.scratch(m.imp_ml, static_cast<uint64_t>(d.slots * ml_floats) * sizeof(float), cap));
  b.imp_stride = b.max_ctx;
  b.imp_scores = il.scores0 + slot * score_floats;
  b.imp_ml = il.ml0 + slot * ml_floats;
  return true;
}

void CudaBackend::importance_end(const float* q, const KvLayerView& kv, const cuda::AttnBatch& b, int32_t n_head,
                                 float scale, const ImpLayer& il) {
  Impl& m = *impl_;
  auto* part = static_cast<float*>(m.scratch(m.imp_part, static_cast<uint64_t>(m.imp_parts * m.imp_stride) * sizeof(float)));
  if (il.decode) {
    if (!il.flush) return;  // gathered: summed when the slices are full, or at collect
    cuda::AttnBatch fb = b;
    fb.imp_scores = il.scores0;
    fb.imp_ml = il.ml0;
    const cuda::ImpDecodeLayers layers{il.gathered, m.imp_dec.score_floats, m.imp_dec.ml_floats};
    m.timed(il.gathered == 1 ? "attention importance (decode)" : "attention importance (decode, gathered layers)", [&] {
      cuda::importance_decode_mass(fb, il.dimp, n_head, il.nsplit, layers, part, il.accumulate, true, m.stream);
    });
    return;
  }
  // The log-sum-exp partials come from the attention kernel (b.imp_ml): one pass over K here.
  m.timed("attention importance", [&] {
    cuda::attention_importance(q, kv, b, il.dimp, n_head, scale, b.imp_ml, il.nsplit, part, m.imp_stride, !il.first,
                               m.stream);
  });
}

// Enqueues only: the decode layers still gathered, the partials' sum (several) and the copy into
// the page-locked buffer; finish_importance waits for the copy (after the logits' copy: no wait).
void CudaBackend::collect_importance() {
  Impl& m = *impl_;
  if (!m.imp_open) return;
  m.imp_open = false;
  STRATA_CHECK(m.mode == Mode::kEager, "collect_importance inside a recorded pass");
  m.imp_layers_last = m.imp_layers;
  if (m.imp_floats == 0) return;
  const uint64_t part_bytes = static_cast<uint64_t>(m.imp_parts * m.imp_stride) * sizeof(float);
  STRATA_CHECK(m.imp_part.buf && m.imp_part.buf->bytes() >= part_bytes, "attention importance: no partial sums");
  auto* part = reinterpret_cast<float*>(m.imp_part.buf->data());
  Impl::ImpDecode& d = m.imp_dec;
  if (d.pending > 0) {  // decode layers gathered since the last launch (a plain launch: a graph may precede it)
    cuda::AttnBatch fb;
    fb.seqs = reinterpret_cast<const cuda::AttnSeqDev*>(m.stage(m.memo_imp_seqs, std::span<const int32_t>(m.imp_seq_host)));
    fb.n_seqs = d.n_seqs;
    fb.n_tokens = d.n_seqs;
    fb.max_n_q = 1;
    fb.max_ctx = d.max_ctx;
    fb.imp_stride = d.max_ctx;
    fb.imp_scores = reinterpret_cast<float*>(m.imp_scores.buf->data());
    fb.imp_ml = reinterpret_cast<float*>(m.imp_ml.buf->data());
    const auto* dimp = reinterpret_cast<const cuda::ImpSeqDev*>(m.stage(m.memo_imp, std::span<const int32_t>(m.imp_host)));
    const cuda::ImpDecodeLayers layers{d.pending, d.score_floats, d.ml_floats};
    m.timed(d.pending == 1 ? "attention importance (decode)" : "attention importance (decode, gathered layers)", [&] {
      cuda::importance_decode_mass(fb, dimp, d.n_head, d.nsplit, layers, part, d.written, false, m.stream);
    });
    d.pending = 0;
    d.written = true;
  }
  // Grown geometrically: the sums grow by a key per sequence every decode step, and a page-locked
  // reallocation (cudaFreeHost synchronises the device) each step cost up to 1.7 ms per step.
  if (m.imp_pinned_floats < static_cast<size_t>(m.imp_floats)) {
    if (m.imp_pinned) STRATA_CUDA(cudaFreeHost(m.imp_pinned));
    m.imp_pinned = nullptr;
    const size_t want = std::max<size_t>({static_cast<size_t>(m.imp_floats), 2 * m.imp_pinned_floats, 4096});
    m.imp_pinned_floats = 0;
    void* p = nullptr;
    STRATA_CUDA(cudaHostAlloc(&p, want * sizeof(float), cudaHostAllocDefault));
    m.imp_pinned = static_cast<float*>(p);
    m.imp_pinned_floats = want;
  }
  // One partial (every decode pass): it is the mass, copied as it is.
  const float* mass = part;
  if (m.imp_parts > 1) {
    // Not read by recorded passes: its growth need not invalidate them (no mem_epoch bump).
    uint64_t unrecorded_epoch = 0;
    auto* sum = static_cast<float*>(m.imp_mass.get(static_cast<uint64_t>(m.imp_floats) * sizeof(float), &unrecorded_epoch, false));
    cuda::importance_reduce(part, m.imp_parts, m.imp_stride, m.imp_floats, sum, m.stream);
    mass = sum;
  }
  STRATA_CUDA(cudaMemcpyAsync(m.imp_pinned, mass, static_cast<size_t>(m.imp_floats) * sizeof(float), cudaMemcpyDeviceToHost,
                              m.stream));
  STRATA_CUDA(cudaEventRecord(m.imp_copied, m.stream));
  m.imp_unfinished = true;
}

void CudaBackend::finish_importance() {
  Impl& m = *impl_;
  if (!m.imp_unfinished) return;
  m.imp_unfinished = false;
  STRATA_CUDA(cudaEventSynchronize(m.imp_copied));
  for (const Impl::ImpTarget& t : m.imp_targets) {
    const float* src = m.imp_pinned + t.off;
    for (int32_t k = 0; k < t.keys; ++k) t.host[k] += src[k];
  }
}

void CudaBackend::kv_move_rows(const KvLayerView& kv, std::span<const int32_t> src, std::span<const int32_t> dst) {
  STRATA_CHECK(impl_->mode == Mode::kEager, "KV row moves are not part of a recorded pass");
  STRATA_CHECK(src.size() == dst.size());
  if (src.empty()) return;
  Impl& m = *impl_;
  m.forget_derived();
  std::vector<int32_t> both(src.begin(), src.end());
  both.insert(both.end(), dst.begin(), dst.end());
  const int32_t* d = m.stage(m.memo_moves, std::span<const int32_t>(both));
  cuda::kv_move_rows(kv, d, d + src.size(), static_cast<int64_t>(src.size()), m.stream);
}

void CudaBackend::kv_read_rows(std::span<const KvLayerView> views, std::span<const int32_t> slots, uint8_t* out) {
  STRATA_CHECK(impl_->mode == Mode::kEager, "KV row reads are not part of a recorded pass");
  if (slots.empty() || views.empty()) return;
  Impl& m = *impl_;
  for (const KvLayerView& kv : views) {
    for (int32_t slot : slots) {
      STRATA_CHECK(slot >= 0 && slot / kv.block_size < kv.n_hot_blocks, "kv_read_rows: slot {} is not hot", slot);
    }
  }
  const int32_t* d = m.stage(m.memo_moves, slots);
  int64_t total = 0;
  for (const KvLayerView& kv : views) total += 2 * static_cast<int64_t>(slots.size()) * kv.token_stride_bytes();
  // Not read by recorded passes: its growth need not invalidate them.
  uint64_t unrecorded_epoch = 0;
  auto* dev = static_cast<uint8_t*>(m.rows_out.get(static_cast<uint64_t>(total), &unrecorded_epoch, false));
  int64_t at = 0;
  for (const KvLayerView& kv : views) {
    cuda::kv_read_rows(kv, d, static_cast<int64_t>(slots.size()), dev + at, m.stream);
    at += 2 * static_cast<int64_t>(slots.size()) * kv.token_stride_bytes();
  }
  STRATA_CUDA(cudaMemcpyAsync(out, dev, static_cast<size_t>(total), cudaMemcpyDeviceToHost, m.stream));
  STRATA_CUDA(cudaStreamSynchronize(m.stream));
}

// Decode batches: RoPE, the KV store and attention in one kernel (cuda::rope_kv_store_attention);
// anything else, or with STRATA_CUDA_FUSED_ATTN=0: the two ops. Which one runs depends on the
// batch's shape only (n_q of every sequence), never on the values.
void CudaBackend::rope_kv_store_attention(ActView q, ActView k, ActView v, std::span<const int32_t> pos, int32_t n_head,
                                          int32_t n_kv_head, int32_t head_dim, const RopeParams& p,
                                          const KvLayerView& kv, std::span<const int32_t> slots,
                                          std::span<const AttentionSeq> seqs, float scale, ActView out) {
  static const bool enabled = [] {
    const char* e = std::getenv("STRATA_CUDA_FUSED_ATTN");
    return e == nullptr || std::string(e) != "0";
  }();
  bool decode = enabled && !seqs.empty() && static_cast<int64_t>(seqs.size()) == q.rows;
  // (Importance, when asked, comes from the scores the decode kernel writes: importance_begin.)
  for (const AttentionSeq& s : seqs) decode = decode && s.n_q == 1;
  if (!decode || p.n_rot > head_dim || p.n_rot % 2 != 0 || head_dim > 256) {
    Backend::rope_kv_store_attention(q, k, v, pos, n_head, n_kv_head, head_dim, p, kv, slots, seqs, scale, out);
    return;
  }
  STRATA_CHECK(q.rows == static_cast<int64_t>(pos.size()) && k.rows == q.rows && v.rows == q.rows &&
               static_cast<int64_t>(slots.size()) == q.rows);
  STRATA_CHECK(q.cols == int64_t{n_head} * head_dim && k.cols == int64_t{n_kv_head} * head_dim && v.cols == k.cols);
  STRATA_CHECK(kv.n_kv_heads == n_kv_head && kv.head_dim == head_dim && n_head % n_kv_head == 0 &&
               out.cols == q.cols && out.rows == q.rows);
  Impl& m = *impl_;
  const int32_t* dpos = m.stage(m.memo_pos, pos);
  const int32_t* dslots = m.stage(m.memo_slots, slots);
  if (!m.replaying()) m.wrote(out.data, out.size());
  cuda::AttnBatch b = stage_attention(kv, seqs, q.rows, n_head);
  ImpLayer il;
  const bool imp = importance_begin(kv, seqs, b, n_head, il);
  if (m.replaying()) return;
  STRATA_CHECK(cuda::rope_attention_fusable(kv, b, p.n_rot));
  STRATA_CHECK(!imp || il.decode);
  const double* inv_freq = m.rope_inv_freq(p);
  void* xq = m.xq_out_for(out.rows, out.cols);
  m.pf_at_attention(q.rows);
  m.timed("rope + KV store + attention (decode)", [&] {
    if (cuda::rope_kv_store_attention(q.data, k.data, v.data, dpos, dslots, p, inv_freq, kv, b, n_head, scale, out.data,
                                      m.stream, xq)) {
      m.xq_wrote(out.data, out.rows, out.cols);
    }
  });
  if (imp) importance_end(q.data, kv, b, n_head, scale, il);
}

// One-sequence, one-token decode passes over 16-bit weights and hot KV: every layer in one
// persistent kernel (cuda::fused_decode). The choice depends on the pass's shape and the views
// (part of the replay key), never on values; contexts longer than kFusedMaxCtx take the layer loop
// (their attention wants more blocks per head than the fused step gives it).
bool CudaBackend::decode_layers(const DecodeLayersArgs& a) {
  Impl& m = *impl_;
  if (!m.fused_decode || a.layers.empty() || a.seqs.size() != 1 || a.x.rows != 1 || a.pos.size() != 1 ||
      a.slots.size() != 1 || a.kv.size() != a.layers.size()) {
    return false;
  }
  const AttentionSeq& seq = a.seqs[0];
  if (seq.n_q != 1 || seq.importance != nullptr || seq.start_pos + 1 > cuda::kFusedMaxCtx) return false;
  const WeightMatrix& w0 = *a.layers[0].wq;
  if (w0.type != GgmlType::kF16 && w0.type != GgmlType::kBF16) return false;
  const auto n_embd = static_cast<int32_t>(a.x.cols);
  if (!cuda::fused_decode_fits(n_embd, a.n_head, a.n_kv_head, a.head_dim, a.n_ff, a.rope.n_rot)) return false;
  const int32_t kvd = a.n_kv_head * a.head_dim;
  auto plain = [&](const WeightMatrix* w, int64_t rows, int64_t cols) {
    return w != nullptr && w->type == w0.type && w->row_group == 0 && w->rows == rows && w->cols == cols &&
           w->row_bytes == static_cast<uint64_t>(cols) * 2 && reinterpret_cast<uintptr_t>(w->data) % 16 == 0;
  };
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const DecodeLayer& L = a.layers[l];
    const KvLayerView& kv = a.kv[l];
    if (!plain(L.wq, n_embd, n_embd) || !plain(L.wk, kvd, n_embd) || !plain(L.wv, kvd, n_embd) ||
        !plain(L.wo, n_embd, n_embd) || !plain(L.w_gate, a.n_ff, n_embd) || !plain(L.w_up, a.n_ff, n_embd) ||
        !plain(L.w_down, n_embd, a.n_ff)) {
      return false;
    }
    if (kv.warm_format != WarmFormat::kNone || kv.host_base != INT32_MAX || kv.n_kv_heads != a.n_kv_head ||
        kv.head_dim != a.head_dim) {
      return false;
    }
  }
  // Staged as in the layer loop: the position, the slot, the attention descriptor and table.
  const int32_t* dpos = m.stage(m.memo_pos, a.pos);
  const int32_t* dslots = m.stage(m.memo_slots, a.slots);
  const cuda::AttnBatch b = stage_attention(a.kv[0], a.seqs, 1, a.n_head);
  for (size_t l = 1; l < a.kv.size(); ++l) m.took_view(a.kv[l]);
  std::vector<cuda::FusedLayerDev> layers(a.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const DecodeLayer& L = a.layers[l];
    layers[l] = {L.wq->data, L.wk->data, L.wv->data, L.wo->data, L.w_gate->data, L.w_up->data, L.w_down->data,
                 L.attn_norm, L.ffn_norm, L.bq, L.bk, L.bv, a.kv[l]};
  }
  const auto* dlayers = static_cast<const cuda::FusedLayerDev*>(
      m.stage(m.memo_fused, layers.data(), layers.size() * sizeof(cuda::FusedLayerDev)));
  const int64_t work = cuda::fused_decode_work_floats(n_embd, a.n_head, a.n_kv_head, a.head_dim, a.n_ff);
  auto* wbuf = static_cast<float*>(m.scratch(m.fused_work, static_cast<uint64_t>(work + 64) * sizeof(float)));
  if (m.replaying()) {
    ++m.fused_passes;
    return true;
  }
  m.forget_derived();
  cuda::FusedDecodeParams p;
  p.layers = dlayers;
  p.n_layer = static_cast<int32_t>(a.layers.size());
  p.n_embd = n_embd;
  p.n_head = a.n_head;
  p.n_kv = a.n_kv_head;
  p.head_dim = a.head_dim;
  p.n_ff = a.n_ff;
  p.bf16 = w0.type == GgmlType::kBF16;
  p.eps = a.eps;
  p.scale = a.scale;
  p.rope = cuda::RopeArgs{m.rope_inv_freq(a.rope), a.rope.freq_factors, static_cast<double>(a.rope.freq_scale),
                          a.rope.n_rot, a.rope.neox};
  p.pos = dpos;
  p.slot = dslots;
  p.seq = b.seqs;
  p.table = b.tables;
  p.x = a.x.data;
  p.barrier = reinterpret_cast<unsigned*>(wbuf);
  p.work = wbuf + 64;
  // STRATA_CUDA_FUSED_TRACE=N (with STRATA_CUDA_GRAPHS=0): the N-th fused pass is traced, its
  // phases' times printed to stderr (diagnostics; the pass waits for the device).
  static const int64_t trace_pass = [] {
    const char* e = std::getenv("STRATA_CUDA_FUSED_TRACE");
    return e != nullptr ? std::strtoll(e, nullptr, 10) : int64_t{-1};
  }();
  static const int32_t exp = [] {
    const char* e = std::getenv("STRATA_CUDA_FUSED_EXP");
    return e != nullptr ? static_cast<int32_t>(std::strtol(e, nullptr, 10)) : 0;
  }();
  p.exp = exp;

  std::unique_ptr<CudaBuffer> trace;
  if (m.fused_passes == trace_pass && m.mode == Mode::kEager) {
    const int64_t words = cuda::fused_decode_trace_words(p.n_layer);
    trace = std::make_unique<CudaBuffer>(static_cast<uint64_t>(words) * 8);
    STRATA_CUDA(cudaMemsetAsync(trace->data(), 0, static_cast<size_t>(words) * 8, m.stream));
    p.trace = reinterpret_cast<unsigned long long*>(trace->data());
  }
  m.timed("decode layers (fused)", [&] { cuda::fused_decode(p, m.stream); });
  if (trace) {
    std::vector<unsigned long long> h(static_cast<size_t>(cuda::fused_decode_trace_words(p.n_layer)));
    STRATA_CUDA(cudaMemcpyAsync(h.data(), trace->data(), h.size() * 8, cudaMemcpyDeviceToHost, m.stream));
    STRATA_CUDA(cudaStreamSynchronize(m.stream));
    std::fputs(cuda::fused_decode_trace_report(h.data(), p.n_layer).c_str(), stderr);
  }
  ++m.fused_passes;
  return true;
}

int64_t CudaBackend::fused_decode_passes() const { return impl_->fused_passes; }
int64_t CudaBackend::side_prefetch_forks() const { return impl_->side_forks; }

void CudaBackend::kv_copy_block(const KvLayerView& kv, BlockId src, BlockId dst) {
  STRATA_CHECK(impl_->mode == Mode::kEager, "KV block copies are not part of a recorded pass");
  const int64_t bs = kv.block_stride_bytes();
  impl_->forget_derived();
  STRATA_CUDA(cudaMemcpyAsync(kv.k + dst * bs, kv.k + src * bs, bs, cudaMemcpyDeviceToDevice, impl_->stream));
  STRATA_CUDA(cudaMemcpyAsync(kv.v + dst * bs, kv.v + src * bs, bs, cudaMemcpyDeviceToDevice, impl_->stream));
}

void CudaBackend::kv_warm_encode(WarmFormat f, const KvLayerView& hot, std::span<const BlockId> blocks, uint8_t* k_slot,
                                 uint8_t* v_slot) {
  STRATA_CHECK(static_cast<int32_t>(blocks.size()) == warm_span(f, hot.block_size));
  impl_->forget_derived();
  cuda::warm_encode(f, hot, impl_->stage(impl_->memo_blocks, blocks), static_cast<int32_t>(blocks.size()), k_slot,
                    v_slot, impl_->stream);
}

void CudaBackend::kv_warm_encode_many(WarmFormat f, const KvLayerView& hot, std::span<const BlockId> blocks,
                                      std::span<const int32_t> dst_slots) {
  const int32_t span = warm_span(f, hot.block_size);
  STRATA_CHECK(blocks.size() == dst_slots.size() * static_cast<size_t>(span));
  if (dst_slots.empty()) return;
  Impl& m = *impl_;
  m.forget_derived();
  // One staged array: the blocks, then the destination slots (the layers of one step stage the
  // same bytes, which the memo then reuses).
  std::vector<int32_t> both(blocks.begin(), blocks.end());
  both.insert(both.end(), dst_slots.begin(), dst_slots.end());
  const int32_t* d = m.stage(m.memo_blocks, std::span<const int32_t>(both));
  cuda::warm_encode_many(f, hot, d, span, d + blocks.size(), static_cast<int64_t>(dst_slots.size()), m.stream);
}

void CudaBackend::kv_warm_decode(const KvLayerView& kv, BlockId id, ActView k, ActView v) {
  STRATA_CHECK(id >= kv.n_hot_blocks && kv.warm_format != WarmFormat::kNone);
  STRATA_CHECK(k.rows == kv.block_size && k.cols == int64_t{kv.n_kv_heads} * kv.head_dim && v.rows == k.rows &&
               v.cols == k.cols);
  impl_->forget_derived();
  cuda::warm_decode(kv, id, k.data, v.data, impl_->stream);
}

bool CudaBackend::begin_replay(const ReplayShape& shape) {
  Impl& m = *impl_;
  m.forget_derived();
  if (!m.graphs_enabled) return false;
  if (m.mode != Mode::kEager) {  // a pass that threw half-way: drop its recording
    if (m.capturing()) {
      cudaGraph_t g = nullptr;
      if (m.side_forked) {  // the side stream joins before the capture ends
        (void)cudaEventRecord(m.side_join, m.side_stream);
        (void)cudaStreamWaitEvent(m.stream, m.side_join, 0);
        m.side_forked = false;
      }
      (void)cudaStreamEndCapture(m.stream, &g);
      if (g) (void)cudaGraphDestroy(g);
      (void)cudaGetLastError();
    }
    m.mode = Mode::kEager;
  }
  if (m.graphs_epoch != m.mem_epoch) {  // a scratch buffer moved: recordings point at freed memory
    m.drop_graphs();
    m.graphs_epoch = m.mem_epoch;
  }
  // Host arrays: the fixed fields of each array plus alignment, all well under the arena.
  const uint64_t arena_need = 9 * 256 + 4 * (4 * uint64_t(shape.n_tokens) + uint64_t(shape.n_seqs) * (7 + shape.max_blocks));
  if (arena_need > m.arena_cap) return false;
  // One recording per power-of-two range of the longest context (the decode attention's launch
  // plan, AttnBatch::plan_ctx): in the key.
  const int32_t plan_ctx = shape.max_ctx > 0 ? cuda::decode_plan_ctx(shape.max_ctx) : INT32_MAX;
  const uint64_t key = shape.key ^ (static_cast<uint64_t>(plan_ctx) * 0x9E3779B97F4A7C15ull);
  const auto it = m.graphs.find(key);
  const bool first = it == m.graphs.end() && m.seen.insert(key).second;
  // The other half of the arena's host side: the last pass's copy may still be queued, and the
  // one before it (which read this half) has been enqueued before that pass.
  m.arena_half ^= 1;
  if (m.arena_read_pending[m.arena_half]) {
    STRATA_CUDA(cudaEventSynchronize(m.arena_read[m.arena_half]));
    m.arena_read_pending[m.arena_half] = false;
  }
  m.arena_host = m.arena_halves[m.arena_half];
  m.key = key;
  m.pad_blocks = shape.max_blocks;
  m.plan_ctx = plan_ctx;
  m.arena_off = 0;
  m.views_digest = 0;
  ++m.graph_seq;
  m.pf_begin_pass();
  if (first) {
    m.mode = Mode::kWarm;
  } else if (it != m.graphs.end()) {
    m.mode = Mode::kReplay;
  } else {
    STRATA_CUDA(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeRelaxed));
    m.mode = Mode::kCapture;
  }
  return true;
}

void CudaBackend::end_replay() {
  Impl& m = *impl_;
  m.forget_derived();
  STRATA_CHECK(m.mode != Mode::kEager, "end_replay without begin_replay");
  if (m.pf_noting()) m.pf_plans[m.key] = std::move(m.pf_cur);
  if (m.mode == Mode::kWarm) {
    m.mode = Mode::kEager;
    ++m.graph_seq;
    STRATA_CUDA(cudaEventRecord(m.arena_read[m.arena_half], m.stream));  // its copies read the arena's host side
    m.arena_read_pending[m.arena_half] = true;
    return;
  }
  if (m.capturing()) {
    cudaGraph_t g = nullptr;
    m.pf_join();
    m.mode = Mode::kEager;
    STRATA_CUDA(cudaStreamEndCapture(m.stream, &g));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    (void)cudaGraphDestroy(g);
    STRATA_CUDA(e);
    m.graphs[m.key] = exec;
    m.graph_views[m.key] = m.views_digest;
  } else {
    const auto it = m.graph_views.find(m.key);
    STRATA_CHECK(it != m.graph_views.end() && it->second == m.views_digest,
                 "a replayed pass took other KV views than its recording (the replay key misses a field of them)");
  }
  m.mode = Mode::kEager;
  ++m.graph_seq;
  Impl::ReplayTiming* t = m.replay_timing.get();
  int slot = 0;
  if (t != nullptr) {
    t->harvest(false);
    const auto now = std::chrono::steady_clock::now();
    if (t->launches > 0) t->between_ms += std::chrono::duration<double, std::milli>(now - t->last).count();
    t->last = now;
    slot = static_cast<int>(t->launches % Impl::ReplayTiming::kSlots);
    STRATA_CUDA(cudaEventRecord(t->start[slot], m.stream));
  }
  // The pass's arrays, staged into this half of the arena, go up in one copy ahead of the graph.
  if (m.arena_off > 0) {
    STRATA_CUDA(cudaMemcpyAsync(m.arena_dev->data(), m.arena_host, m.arena_off, cudaMemcpyHostToDevice, m.stream));
  }
  STRATA_CUDA(cudaEventRecord(m.arena_read[m.arena_half], m.stream));
  m.arena_read_pending[m.arena_half] = true;
  const bool traced = m.step_trace != nullptr && m.step_trace->arm(m.stream);
  STRATA_CUDA(cudaGraphLaunch(m.graphs.at(m.key), m.stream));
  if (traced) m.step_trace->finish(m.stream);
  if (t != nullptr) {
    STRATA_CUDA(cudaEventRecord(t->stop[slot], m.stream));
    ++t->launches;
  }
}

double CudaBackend::measure_read_bandwidth_gbs(uint64_t bytes, int reps) {
  bytes = std::max<uint64_t>(bytes / 16 * 16, 1 << 20);
  CudaBuffer buf(bytes), sink(256);
  Impl& m = *impl_;
  STRATA_CUDA(cudaMemsetAsync(buf.data(), 0x3f, bytes, m.stream));
  const auto* data = reinterpret_cast<const float4*>(buf.data());
  const int64_t n4 = static_cast<int64_t>(bytes / 16);
  cudaEvent_t start, stop;
  STRATA_CUDA(cudaEventCreate(&start));
  STRATA_CUDA(cudaEventCreate(&stop));
  cuda::read_probe(data, n4, reinterpret_cast<float*>(sink.data()), m.stream);  // warm-up
  double best = 0;
  for (int r = 0; r < std::max(reps, 1); ++r) {
    STRATA_CUDA(cudaEventRecord(start, m.stream));
    cuda::read_probe(data, n4, reinterpret_cast<float*>(sink.data()), m.stream);
    STRATA_CUDA(cudaEventRecord(stop, m.stream));
    STRATA_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    STRATA_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (ms > 0) best = std::max(best, static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return best;
}

// KV block transfers are issued between passes: a recording must not capture the events that
// order them against the op stream.
uint64_t CudaBackend::kv_blocks_to_host(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) {
  STRATA_CHECK(impl_->mode == Mode::kEager, "KV transfers are not part of a recorded pass");
  return impl_->transfer->to_host(layers, blocks);
}

uint64_t CudaBackend::kv_blocks_to_device(std::span<const KvLayerView> layers, std::span<const KvBlockTransfer> blocks) {
  STRATA_CHECK(impl_->mode == Mode::kEager, "KV transfers are not part of a recorded pass");
  return impl_->transfer->to_device(layers, blocks);
}

uint64_t CudaBackend::copy_to_device_async(std::span<const TransferPiece> pieces) {
  STRATA_CHECK(impl_->mode == Mode::kEager, "KV transfers are not part of a recorded pass");
  return impl_->transfer->copy_to_device(pieces);
}

void CudaBackend::transfer_fence(uint64_t ticket) {
  STRATA_CHECK(impl_->mode == Mode::kEager, "KV transfers are not part of a recorded pass");
  impl_->transfer->fence(ticket);
}

void CudaBackend::transfer_wait(uint64_t ticket) { impl_->transfer->wait(ticket); }

TransferStats CudaBackend::transfer_stats() { return impl_->transfer->stats(); }

double CudaBackend::measure_transfer_bandwidth_gbs(bool to_device, uint64_t bytes, int reps) {
  return impl_->transfer->measure_bandwidth_gbs(to_device, bytes, reps);
}

}  // namespace strata
