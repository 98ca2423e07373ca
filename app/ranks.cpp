#include "app/ranks.h"

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <vector>

#include "framework/config/config_error.h"
#include "framework/log/log.h"
#include "kernels/backend.h"
#include "kernels/mpi/mpi.h"
#include "kernels/parallel.h"

namespace tarn::app {

Ranks::Ranks(kernels::Communicator* given, double collective_timeout_s) : given_(given != nullptr) {
  if (given) {
    comm_ = grad_comm_ = given;
    return;
  }
  const kernels::mpi::LaunchInfo launch = kernels::mpi::launch_info();
  if (launch.launched) {
    // Quiet before MPI starts: only rank 0 speaks from the first line on.
    log::set_rank(launch.rank, launch.world);
    owned_comm_ = kernels::mpi::world_communicator(collective_timeout_s);
    launcher_ = launch.launcher;
  } else {
    owned_comm_ = kernels::solo_communicator();
  }
  comm_ = grad_comm_ = owned_comm_.get();
}

void Ranks::place(Recipe& recipe) const {
  if (!solo() && recipe.training.device == "cuda" && !given_)
    recipe.training.device = "cuda:" + std::to_string(kernels::mpi::local_rank());  // my machine's GPU
  const kernels::mpi::LaunchInfo launch = kernels::mpi::launch_info();
  if (launch.launched && recipe.training.threads == 0 && std::getenv("OMP_NUM_THREADS") == nullptr)
    recipe.training.threads = std::max(1, kernels::num_threads() / std::max(1, launch.local_world));
}

void Ranks::open_gradients([[maybe_unused]] const Recipe& recipe, Device device) {
  grad_comm_ = comm_;
  if (solo() || device.is_cpu() || std::string(kernels::cuda_backend().name) != "cuda") return;
#if defined(TARN_WITH_CUDA)
  if (!kernels::cuda::nccl_available())
    throw ConfigError(recipe.where("training.device"), "training.device",
                      "data-parallel training on CUDA devices needs NCCL, and this tarn was built without it "
                      "(cmake/TarnCuda.cmake: set NCCL_ROOT and reconfigure)");
  kernels::NcclUniqueId id{};
  if (lead()) id = kernels::cuda::nccl_unique_id();
  comm_->broadcast_host_bytes(id.data(), static_cast<int64_t>(id.size()), 0);
  owned_grad_comm_ = kernels::cuda::nccl_communicator(id, comm_->rank(), comm_->world(), device.index);
  grad_comm_ = owned_grad_comm_.get();
#endif
}

void Ranks::log(const Recipe& recipe, Device device) const {
  if (solo()) return;
  const int world = comm_->world();
  // Per rank: threads, device kind and index, gradient backend (0 mpi/threads, 1 nccl).
  std::vector<double> info(3 * static_cast<size_t>(world), 0.0);
  const size_t me = 3 * static_cast<size_t>(comm_->rank());
  info[me] = kernels::num_threads();
  info[me + 1] = device.is_cpu() ? -1.0 : device.index;
  info[me + 2] = std::string(grad_comm_->backend()) == "nccl" ? 1.0 : 0.0;
  comm_->all_reduce_host(info.data(), static_cast<int64_t>(info.size()), kernels::ReduceOp::sum);
  log::info("dist", world, " ranks (", comm_->backend(), launcher_.empty() ? "" : ", launched by " + launcher_,
            "); only rank 0 logs and writes checkpoints");
  for (int r = 0; r < world; ++r) {
    const double* i = &info[3 * static_cast<size_t>(r)];
    log::info("dist", "rank ", r, ": ", i[1] < 0 ? std::string("cpu") : "cuda:" + std::to_string(static_cast<int>(i[1])),
              ", ", static_cast<int>(i[0]), " threads, gradients by ", i[2] > 0 ? "nccl" : comm_->backend());
  }
  const kernels::mpi::LaunchInfo launch = kernels::mpi::launch_info();
  const unsigned cores = std::thread::hardware_concurrency();
  if (launch.launched && cores > 0 && kernels::num_threads() * launch.local_world > static_cast<int>(cores))
    log::warn("dist", str_cat(launch.local_world, " ranks x ", kernels::num_threads(), " threads on ", cores,
                              " cores oversubscribe this machine and slow every rank: set training.threads to ",
                              std::max(1u, cores / static_cast<unsigned>(launch.local_world)), " (or 0)"));
  const int64_t global = recipe.training.tokens_per_batch, accum = recipe.training.grad_accumulation;
  log::info("dist", "batch: ", log::thousands(global), " padded tokens per global batch, ~",
            log::thousands(global / world), " per rank x ", world, " ranks x ", accum,
            " accumulation = ", log::thousands(global * accum), " per optimizer step");
}

void Ranks::log_gradient_exchange(TrainStep& step, bool overlap_communication, int64_t steps, double wall_s) const {
  if (solo()) return;
  steps = std::max<int64_t>(1, steps);
  const double comm_s = step.comm_seconds();
  std::string overlap;  // how much of the all-reduce started during the backward
  if (!step.sharded())
    overlap = !overlap_communication
                  ? " (training.overlap_communication off)"
                  : str_cat(" in ", step.buckets(), " buckets, ",
                            log::number("%.1f", static_cast<double>(step.buckets_started_early()) /
                                                    static_cast<double>(steps)),
                            " of them started during the backward per step");
  log::info("dist", "gradient ", step.sharded() ? "reduce-scatter + all-gather" : "all-reduce", ": ",
            log::number("%.2f", 1e3 * comm_s / static_cast<double>(steps)),
            " ms per step on rank 0 (waiting for the other ranks included), ",
            log::number("%.1f", 100.0 * comm_s / std::max(wall_s, 1e-9)), "% of the run; ",
            log::thousands(step.reduced_elements()), " floats per step", overlap);
}

}  // namespace tarn::app
