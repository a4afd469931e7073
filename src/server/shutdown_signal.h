// SIGINT/SIGTERM turned into something a thread can wait for. The handler only writes one byte to
// a self-pipe (async-signal-safe) and is installed with SA_RESETHAND, so a second Ctrl-C during a
// slow drain kills the process the default way. The constructor blocks both signals in the calling
// thread, so every thread started after it has them blocked and only the thread in wait() takes them.
// Thread-safety: one instance per process (the handler reaches it through a process-wide file
// descriptor, the one global a signal handler needs); notify() from any thread, wait() from one.
#pragma once

#include <signal.h>

namespace strata::server {

class ShutdownSignal {
 public:
  // Installs the handlers; throws strata::Error if the pipe cannot be made.
  ShutdownSignal();
  ~ShutdownSignal();  // restores the previous handlers
  ShutdownSignal(const ShutdownSignal&) = delete;
  ShutdownSignal& operator=(const ShutdownSignal&) = delete;

  // Wakes wait() without a signal (for example when loading the model failed).
  void notify();
  // Blocks until a signal arrives or notify() is called; returns the signal number, 0 for notify().
  // Call it from the thread that constructed this object.
  int wait();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  sigset_t old_mask_{};
};

}  // namespace strata::server
