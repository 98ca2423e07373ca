#pragma once
// The ranks of a training run (recipes/README.md, "Several ranks"): the control communicator
// every agreement goes through (stop reasons, step results, validation, files), the gradient
// communicator (NCCL between GPUs, else the control one), where each rank runs, and the first
// log lines that say so. One rank communicates nothing: every call here is then free.
#include <memory>
#include <string>

#include "app/recipe/recipe.h"
#include "framework/device.h"
#include "framework/train/step.h"
#include "kernels/collectives.h"

namespace tarn::app {

class Ranks {
 public:
  // The control communicator: `given` when not null (tests hand in thread-group or solo
  // communicators), else the MPI world when an MPI launcher started this process as one of
  // several ranks (its collectives time out after collective_timeout_s), else one rank alone.
  Ranks(kernels::Communicator* given, double collective_timeout_s);

  // Where this rank runs, before the device is opened: a plain `cuda` device of launched ranks
  // becomes this machine's GPU of the local rank, and training.threads 0 (every core) becomes
  // this rank's share of the cores, as ranks sharing a machine share them (unless
  // OMP_NUM_THREADS says otherwise).
  void place(Recipe& recipe) const;
  // The gradient communicator (collective): gradients of CUDA parameters go through NCCL (its
  // unique id sent over the control communicator); host memory (the CPU, and the emulated CUDA
  // device of the tests) through the control communicator itself. A ConfigError at
  // training.device when several CUDA ranks meet a build without NCCL.
  void open_gradients(const Recipe& recipe, Device device);
  // The first lines of a data-parallel run (collective; nothing on one rank): who runs where,
  // a warning when the ranks oversubscribe the machine's cores, and what a batch is.
  void log(const Recipe& recipe, Device device) const;
  // The last line of a data-parallel run (nothing on one rank): what the gradient exchange of
  // `step` cost per step over this run's `steps` steps and `wall_s` seconds, and with
  // overlap_communication how much of it started during the backward.
  void log_gradient_exchange(TrainStep& step, bool overlap_communication, int64_t steps, double wall_s) const;

  kernels::Communicator& control() const { return *comm_; }
  kernels::Communicator& gradients() const { return *grad_comm_; }
  int rank() const { return comm_->rank(); }
  int world() const { return comm_->world(); }
  bool lead() const { return rank() == 0; }  // rank 0: logs, writes metrics and checkpoints
  bool solo() const { return world() == 1; }

 private:
  std::unique_ptr<kernels::Communicator> owned_comm_, owned_grad_comm_;
  kernels::Communicator* comm_ = nullptr;
  kernels::Communicator* grad_comm_ = nullptr;
  bool given_ = false;    // the caller's communicator, not this process's launch
  std::string launcher_;  // "Open MPI", ... when one started this process
};

}  // namespace tarn::app
