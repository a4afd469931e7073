#include "server/shutdown_signal.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "core/error.h"

namespace strata::server {
namespace {

std::atomic<int> g_signal_fd{-1};  // write end of the self-pipe, read by the signal handler
struct sigaction g_old_int, g_old_term;

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  const int fd = g_signal_fd.load();
  if (fd >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(fd, &byte, 1);
  }
  errno = saved;
}

}  // namespace

ShutdownSignal::ShutdownSignal() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("cannot create a pipe: {}", std::strerror(errno));
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  int expected = -1;
  STRATA_CHECK(g_signal_fd.compare_exchange_strong(expected, write_fd_), "only one ShutdownSignal may exist");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // No SA_RESTART: the read in wait() must return (EINTR) after the handler ran. ThreadSanitizer
  // defers a handler until the interrupted call returns, and a restarted read never does.
  sa.sa_flags = SA_RESETHAND;
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
  // Threads started from now on inherit a mask that blocks both signals, so the kernel delivers
  // them to the thread in wait(), the only one that unblocks them. Under ThreadSanitizer this
  // matters: a handler that lands on a thread asleep in a futex runs only when that thread wakes.
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &both, &old_mask_);
}

ShutdownSignal::~ShutdownSignal() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  g_signal_fd.store(-1);
  ::close(read_fd_);
  ::close(write_fd_);
}

void ShutdownSignal::notify() {
  const unsigned char byte = 0;
  [[maybe_unused]] ssize_t n = ::write(write_fd_, &byte, 1);
}

int ShutdownSignal::wait() {
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  ::pthread_sigmask(SIG_UNBLOCK, &both, nullptr);  // pending ones are delivered here, now
  unsigned char byte = 0;
  for (;;) {
    const ssize_t n = ::read(read_fd_, &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    fail("reading the signal pipe failed: {}", std::strerror(errno));
  }
}

}  // namespace strata::server
