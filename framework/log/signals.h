#pragma once
// SIGINT / SIGTERM ask a long job to stop at the next safe point (the training loop finishes
// its step, writes a checkpoint and exits cleanly). A second signal exits at once.
namespace tarn {

void install_stop_handlers();
bool stop_requested();
int stop_signal();  // the signal that asked, 0 if none

}  // namespace tarn
