// Cold-tier throughput: the file-backed spill store (FileColdStore, background I/O thread) writing
// and reading KV blocks of a llama-134m-sized model, next to raw sequential pwrite/pread of the
// same bytes in the same directory, measured in the same run. Both files are preallocated with
// posix_fallocate, as the store's is. Page-cache effects are limited by fdatasync after writes
// (inside the write timing) and POSIX_FADV_DONTNEED before reads. Disks behind a VM's or
// network's own cache read at very different speeds from one pass to the next, so raw and store
// passes alternate over several rounds (each goes first in every other round) and the medians are
// compared.
//
//   build/bin/spill_bench [DIR [TOTAL_MIB [ROUNDS]]]     (defaults: /tmp, 512, 5)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kv/file_cold_store.h"
#include "kv/kv_arena.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Pass {
  double write_seconds = 0;  // n blocks written and made durable
  double read_seconds = 0;   // n blocks read back after the page cache was dropped
};

// A fresh preallocated file in `dir`: n sequential pwrites + fdatasync, then the cache dropped and
// n sequential preads. Empty (after printing why) on an I/O error.
std::optional<Pass> raw_pass(const std::string& dir, int64_t n, std::vector<uint8_t>& data) {
  const uint64_t block = data.size();
  std::string path = dir + "/strata-spill-bench-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) {
    std::perror("mkstemp");
    return std::nullopt;
  }
  ::unlink(path.c_str());
  if (const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(n * block)); rc != 0) {
    std::fprintf(stderr, "posix_fallocate: %s\n", std::strerror(rc));
    ::close(fd);
    return std::nullopt;
  }
  Pass p;
  auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    if (::pwrite(fd, data.data(), block, static_cast<off_t>(i * block)) != static_cast<ssize_t>(block)) {
      std::perror("pwrite");
      ::close(fd);
      return std::nullopt;
    }
  }
  ::fdatasync(fd);
  p.write_seconds = seconds_since(t0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    if (::pread(fd, data.data(), block, static_cast<off_t>(i * block)) != static_cast<ssize_t>(block)) {
      std::perror("pread");
      ::close(fd);
      return std::nullopt;
    }
  }
  p.read_seconds = seconds_since(t0);
  ::close(fd);
  return p;
}

// The spill store: n block writes queued, drained and made durable; then n reads, all issued
// before the first wait (prefetch), checked against what was written.
std::optional<Pass> store_pass(const std::string& dir, int64_t n, const std::vector<uint8_t>& data) {
  const uint64_t block = data.size();
  strata::FileColdStore store(dir, n * block, block);
  Pass p;
  auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) store.write(i, data);
  store.drop_page_cache();  // drain + fdatasync (durable, as the raw writes were) + drop the cache
  p.write_seconds = seconds_since(t0);
  t0 = Clock::now();
  std::vector<uint64_t> tickets;
  for (int64_t i = 0; i < n; ++i) tickets.push_back(store.read(i, block));
  uint64_t check = 0;
  for (uint64_t t : tickets) check += store.wait(t)[block / 2];
  p.read_seconds = seconds_since(t0);
  if (check != static_cast<uint64_t>(n) * data[block / 2]) {
    std::fprintf(stderr, "spill_bench: the store read back different bytes than were written\n");
    return std::nullopt;
  }
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const uint64_t total = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 512) << 20;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  // llama-134m: 12 layers, 12 KV heads x 64, block of 16 tokens, f16 -> 576 KiB per block.
  const strata::KvGeometry geo{12, 12, 64, 16, strata::KvDtype::kF16};
  const uint64_t block = geo.bytes_per_block();
  const int64_t n = static_cast<int64_t>(total / block);
  if (n == 0 || rounds < 1) {
    std::fprintf(stderr,
                 "usage: spill_bench [DIR [TOTAL_MIB [ROUNDS]]]  (TOTAL_MIB of at least one %llu-byte block, "
                 "ROUNDS >= 1)\n",
                 static_cast<unsigned long long>(block));
    return 2;
  }
  std::vector<uint8_t> data(block);
  auto fill = [&] {  // pread overwrites the buffer with the same bytes; refilled anyway before each pass
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  };

  const double mib = static_cast<double>(n * block) / (1 << 20);
  std::vector<double> raw_w, raw_r, store_w, store_r;  // MiB/s per round
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      fill();
      const bool raw = (k == 0) == (r % 2 == 0);
      const std::optional<Pass> p = raw ? raw_pass(dir, n, data) : store_pass(dir, n, data);
      if (!p) return 1;
      (raw ? raw_w : store_w).push_back(mib / p->write_seconds);
      (raw ? raw_r : store_r).push_back(mib / p->read_seconds);
    }
  }

  auto list = [](const std::vector<double>& v) {
    std::string s;
    for (double x : v) {
      if (!s.empty()) s += ' ';
      s += std::to_string(static_cast<long long>(x + 0.5));
    }
    return s;
  };
  std::printf("blocks: %lld of %.0f KiB (%.0f MiB) in %s; %d rounds, raw first in rounds 1, 3, ...\n",
              static_cast<long long>(n), block / 1024.0, mib, dir.c_str(), rounds);
  std::printf("| path | write MiB/s (median) | read MiB/s (median) | write MiB/s per round | read MiB/s per round |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  std::printf("| raw sequential pwrite/pread (+fdatasync, cache dropped before reads) | %.0f | %.0f | %s | %s |\n",
              median(raw_w), median(raw_r), list(raw_w).c_str(), list(raw_r).c_str());
  std::printf("| FileColdStore (background thread, reads prefetched) | %.0f | %.0f | %s | %s |\n", median(store_w),
              median(store_r), list(store_w).c_str(), list(store_r).c_str());
  std::printf("ratio store/raw of the medians: write %.2f, read %.2f\n", median(store_w) / median(raw_w),
              median(store_r) / median(raw_r));
  return 0;
}
