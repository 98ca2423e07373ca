#include "framework/log/signals.h"

#include <csignal>
#include <unistd.h>

namespace tarn {
namespace {
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) _exit(128 + sig);  // asked twice: the user means it
  g_signal = sig;
  const char msg[] = "\n[tarn] stop requested: finishing the step and writing a checkpoint (again to abort)\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }

}  // namespace tarn
