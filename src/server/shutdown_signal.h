// SIGINT/SIGTERM turned into something a thread can wait for. The handler only writes one byte to
// a self-pipe (async-signal-safe) and is installed with SA_RESETHAND, so a second Ctrl-C during a
// slow drain kills the process the default way.
// Thread-safety: one instance per process (the handler reaches it through a process-wide file
// descriptor, the one global a signal handler needs); notify() from any thread, wait() from one.
#pragma once

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
  int wait();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
};

}  // namespace strata::server
