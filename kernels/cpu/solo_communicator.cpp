// A group of one rank (kernels/collectives.h): every collective is already complete when
// called, so a plain, unlaunched run pays nothing for the data-parallel code path. The checks
// are the thread group's, so a call that would be wrong with more ranks is wrong here too.
#include <cstring>

#include "kernels/check.h"
#include "kernels/collectives.h"

namespace tarn::kernels {
namespace {

class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  const char* backend() const override { return "solo"; }

  void all_reduce_sum(float*, int64_t n) override { check_length("all_reduce_sum", n); }

  void reduce_scatter_sum(const float* send, float* recv, int64_t n) override {
    check_length("reduce_scatter_sum", n);
    copy(send, recv, n * static_cast<int64_t>(sizeof(float)));
  }

  void all_gather(const float* send, float* recv, int64_t n) override {
    check_length("all_gather", n);
    copy(send, recv, n * static_cast<int64_t>(sizeof(float)));
  }

  void broadcast(float*, int64_t n, int root) override {
    check_length("broadcast", n);
    check_root("broadcast", root);
  }

  void all_reduce_host(double*, int64_t n, ReduceOp) override { check_length("all_reduce_host", n); }

  void broadcast_host_bytes(void*, int64_t bytes, int root) override {
    check_length("broadcast_host_bytes", bytes);
    check_root("broadcast_host_bytes", root);
  }

  void barrier() override {}

 private:
  static void check_length(const char* op, int64_t n) { TARN_ASSERT(n >= 0, op, ": negative length ", n); }
  static void check_root(const char* op, int root) {
    TARN_ASSERT(root == 0, op, ": root ", root, " is not a rank of a group of 1");
  }
  // Out of place: recv <- send. In place (send == recv + 0 * n) there is nothing to do.
  static void copy(const float* send, float* recv, int64_t bytes) {
    if (bytes > 0 && send != recv) std::memmove(recv, send, static_cast<size_t>(bytes));
  }
};

}  // namespace

std::unique_ptr<Communicator> solo_communicator() { return std::make_unique<SoloCommunicator>(); }

}  // namespace tarn::kernels
