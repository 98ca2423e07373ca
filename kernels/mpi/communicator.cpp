// The MPI communicator (kernels/mpi/mpi.h): collectives between processes, each with a sequence
// number and a deadline.
//
// Every call is two steps. (1) A header exchange: an all-gather of (sequence, collective, n,
// root) from every rank. It completes only once every rank has entered a call (so it is also
// the barrier), and a rank that disagrees with rank 0 makes every rank throw the same
// CollectiveError, before any data moves. (2) The data, in steps of at most set_chunk_values()
// values so that MPI's int counts never overflow.
//
// Reductions are exact in rank order for any number of ranks, the bits of the thread group
// (kernels/cpu/rank_order.h) on every rank: MPI_Allreduce's order is MPI's choice (Open MPI's
// differs between algorithms and message sizes), so instead each rank receives its slice from
// every rank (an all-to-all), adds the slices in rank order itself, and the slices are
// all-gathered. That moves 2(n-1)/n of the buffer per rank, what a ring all-reduce moves.
//
// Everything is non-blocking MPI polled against the deadline: a tight MPI_Test loop for a
// while, then a sleep of kPollSleep between tests, so that a rank waiting for a slow one does
// not take a core from it. How long "a while" is depends on what is awaited. The header
// exchange waits for the other ranks to arrive, which may take a whole step of computation:
// kBusyPoll. Once it is done every rank is inside the collective and the data is moving, which
// needs each rank to test often (Open MPI progresses shared-memory transfers inside MPI_Test):
// kBusyPoll plus the time the step's bytes take at kBusyBytesPerSecond, a rate any healthy
// machine exceeds, so that only a stalled transfer is left to the sleeping polls.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "kernels/cpu/rank_order.h"
#include "kernels/mpi/mpi.h"
#include "kernels/mpi/mpi_call.h"

namespace tarn::kernels::mpi {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kBusyPoll = std::chrono::milliseconds(1);
constexpr double kBusyBytesPerSecond = 1e9;
constexpr auto kPollSleep = std::chrono::microseconds(50);

// 2^22 values (16 MiB of floats) per step: far below INT_MAX, large enough that a step's fixed
// cost is noise next to its copy time, and the bound on a reduction's scratch.
constexpr int64_t kDefaultChunkValues = int64_t{1} << 22;
std::atomic<int64_t> g_chunk_values{kDefaultChunkValues};

// What the header names; the numbers travel between ranks, so they never change meaning.
enum Collective : int64_t {
  kBarrier = 1,
  kAllReduceSum,
  kReduceScatterSum,
  kAllGather,
  kBroadcast,
  kAllReduceHostSum,
  kAllReduceHostMax,
  kAllReduceHostMin,
  kBroadcastHostBytes,
};

const char* collective_name(int64_t c) {
  switch (c) {
    case kBarrier: return "barrier";
    case kAllReduceSum: return "all_reduce_sum";
    case kReduceScatterSum: return "reduce_scatter_sum";
    case kAllGather: return "all_gather";
    case kBroadcast: return "broadcast";
    case kAllReduceHostSum: return "all_reduce_host(sum)";
    case kAllReduceHostMax: return "all_reduce_host(max)";
    case kAllReduceHostMin: return "all_reduce_host(min)";
    case kBroadcastHostBytes: return "broadcast_host_bytes";
  }
  return "an unknown collective";
}

bool has_root(int64_t c) { return c == kBroadcast || c == kBroadcastHostBytes; }
const char* unit(int64_t c) { return c == kBroadcastHostBytes ? "bytes" : "values"; }

Collective host_collective(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return kAllReduceHostSum;
    case ReduceOp::max: return kAllReduceHostMax;
    case ReduceOp::min: return kAllReduceHostMin;
  }
  return kAllReduceHostSum;
}

// (sequence, collective, n, root): what every rank says it is calling.
constexpr int kHeader = 4;
using Header = std::array<int64_t, kHeader>;

std::string describe(const int64_t* h) {
  std::string s = str_cat(collective_name(h[1]), " #", h[0], " (n = ", h[2]);
  if (has_root(h[1])) s += str_cat(", root ", h[3]);
  return s + ")";
}

// An MPI datatype of `count` contiguous `base` values whose extent is `stride` values: block r
// of a strided layout (rank r's slice at base + r * stride) is element r of this type.
class StridedBlock {
 public:
  StridedBlock(int count, MPI_Datatype base, int64_t stride, int64_t base_bytes) {
    MPI_Datatype block = MPI_DATATYPE_NULL;
    TARN_MPI_CALL(MPI_Type_contiguous(count, base, &block));
    const int rc = MPI_Type_create_resized(block, 0, static_cast<MPI_Aint>(stride * base_bytes), &type_);
    MPI_Type_free(&block);
    TARN_CHECK(rc == MPI_SUCCESS, "MPI_Type_create_resized failed: ", detail::error_string(rc));
    TARN_MPI_CALL(MPI_Type_commit(&type_));
  }
  ~StridedBlock() {
    if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
  }
  StridedBlock(const StridedBlock&) = delete;
  StridedBlock& operator=(const StridedBlock&) = delete;
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

// Rank r's m floats of a layout whose ranks lie n floats apart, as (count, type) for MPI: plain
// floats when the step covers the whole slice (m == n, the ranks' blocks are adjacent), else
// one StridedBlock each.
struct Blocks {
  Blocks(int64_t m, int64_t n) : count(static_cast<int>(m)) {
    if (m == n) return;
    strided.emplace(static_cast<int>(m), MPI_FLOAT, n, sizeof(float));
    count = 1;
    type = strided->get();
  }
  std::optional<StridedBlock> strided;
  int count;
  MPI_Datatype type = MPI_FLOAT;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, double timeout_s) : comm_(comm), timeout_s_(timeout_s) {
    TARN_MPI_CALL(MPI_Comm_rank(comm_, &rank_));
    TARN_MPI_CALL(MPI_Comm_size(comm_, &world_));
    headers_.resize(static_cast<size_t>(kHeader) * (world_ + 1));
  }
  ~MpiCommunicator() override {
    int finalised = 1;
    MPI_Finalized(&finalised);
    if (broken_) {
      // A collective that timed out may still write into these once its peers turn up; the job
      // is being aborted, so leave them (and the communicator) to the end of the process.
      new std::vector<int64_t>(std::move(headers_));
      new std::vector<float>(std::move(float_scratch_));
      new std::deque<std::shared_ptr<Reduction>>(std::move(queue_));
      return;
    }
    if (!finalised) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  const char* backend() const override { return "mpi"; }

  void all_reduce_sum(float* data, int64_t n) override {
    wait_for(*enqueue(kAllReduceSum, data, n, ReduceOp::sum, false));
  }

  std::unique_ptr<PendingCollective> start_all_reduce_sum(float* data, int64_t n) override {
    return std::make_unique<Pending>(*this, enqueue(kAllReduceSum, data, n, ReduceOp::sum, false));
  }

  void reduce_scatter_sum(const float* send, float* recv, int64_t n) override {
    begin(kReduceScatterSum, n, 0);
    const int64_t step = slice_step();
    for (int64_t c0 = 0; c0 < n; c0 += step) {
      const int64_t m = std::min(step, n - c0);
      float_scratch_.resize(static_cast<size_t>(m) * world_);
      // Slice c0..c0+m of every rank's block r goes to rank r: an all-to-all whose send blocks
      // lie n apart. In place, recv + c0 is inside this step's send, read by the time we write.
      const Blocks blocks(m, n);
      MPI_Request request = MPI_REQUEST_NULL;
      call(MPI_Ialltoall(send + c0, blocks.count, blocks.type, float_scratch_.data(), static_cast<int>(m), MPI_FLOAT,
                         comm_, &request),
           "MPI_Ialltoall");
      wait(request, m * world_ * static_cast<int64_t>(sizeof(float)));
      cpu::reduce_in_rank_order(
          recv + c0, m, world_, [&](int r) { return float_scratch_.data() + static_cast<int64_t>(r) * m; },
          ReduceOp::sum);
    }
  }

  void all_gather(const float* send, float* recv, int64_t n) override {
    begin(kAllGather, n, 0);
    const bool in_place = send == recv + static_cast<int64_t>(rank_) * n;
    const int64_t step = slice_step();
    for (int64_t c0 = 0; c0 < n; c0 += step) {
      const int64_t m = std::min(step, n - c0);
      const void* mine = in_place ? MPI_IN_PLACE : static_cast<const void*>(send + c0);
      const Blocks blocks(m, n);
      MPI_Request request = MPI_REQUEST_NULL;
      call(MPI_Iallgather(mine, static_cast<int>(m), MPI_FLOAT, recv + c0, blocks.count, blocks.type, comm_, &request),
           "MPI_Iallgather");
      wait(request, m * world_ * static_cast<int64_t>(sizeof(float)));
    }
  }

  void broadcast(float* data, int64_t n, int root) override {
    begin(kBroadcast, n, root);
    bcast(data, n, MPI_FLOAT, sizeof(float), root);
  }

  void all_reduce_host(double* data, int64_t n, ReduceOp op) override {
    wait_for(*enqueue(host_collective(op), data, n, op, true));
  }

  void broadcast_host_bytes(void* data, int64_t bytes, int root) override {
    begin(kBroadcastHostBytes, bytes, root);
    bcast(data, bytes, MPI_BYTE, 1, root);
  }

  // The header exchange completes only once every rank has entered: that is the barrier.
  void barrier() override { begin(kBarrier, 0, 0); }

 private:
  // Step (1) of a blocking collective other than an all-reduce: the queued all-reduces complete,
  // then the next sequence number, the header exchange, and the agreement check.
  void begin(Collective c, int64_t n, int root) {
    check_usable(c, n);
    if (!queue_.empty()) wait_for(*queue_.back());
    current_ = {static_cast<int64_t>(++seq_), c, n, root};
    MPI_Request request = MPI_REQUEST_NULL;
    post_header(request);
    wait(request);
    check_headers();
  }

  void check_usable(Collective c, int64_t n) const {
    TARN_CHECK(!broken_, "rank ", rank_, ": ", collective_name(c), ": this communicator failed in collective #",
               seq_, " and cannot be used again (end the job with tarn::kernels::mpi::abort)");
    TARN_CHECK(n >= 0, collective_name(c), ": negative length ", n, " on rank ", rank_);
  }

  // Every rank's current_ into headers_.
  void post_header(MPI_Request& request) {
    // The send copy lives after the world's headers, in the buffer a broken communicator leaks.
    int64_t* mine = headers_.data() + kHeader * world_;
    std::copy(current_.begin(), current_.end(), mine);
    call(MPI_Iallgather(mine, kHeader, MPI_INT64_T, headers_.data(), kHeader, MPI_INT64_T, comm_, &request),
         "MPI_Iallgather (header)");
  }

  // Throws the same CollectiveError on every rank when the exchanged headers differ.
  void check_headers() {
    const int64_t c = current_[1], root = current_[3];
    std::vector<int> disagree;
    for (int r = 1; r < world_; ++r)
      if (!std::equal(headers_.begin(), headers_.begin() + kHeader, headers_.begin() + kHeader * r))
        disagree.push_back(r);
    if (!disagree.empty()) {
      // Every rank has the same headers, so every rank throws the same list.
      std::string list = str_cat("rank 0 called ", describe(headers_.data()));
      for (int r : disagree) list += str_cat(", rank ", r, " called ", describe(headers_.data() + kHeader * r));
      broken_ = true;
      throw CollectiveError(str_cat("rank ", rank_, ": the ranks called different collectives: ", list));
    }
    if (has_root(c) && (root < 0 || root >= world_))
      throw Error(str_cat(collective_name(c), ": root ", root, " is not a rank of a group of ", world_));
  }

  // One all-reduce, queued or in flight: the header exchange, then per step of at most
  // g_chunk_values values an all-to-all that gives rank q slice q of every rank's step, the
  // reduction of those world copies in rank order, and an all-gather of the reduced slices in place.
  struct Reduction {
    enum class Phase { queued, header, scatter, gather, done };
    Header header{};
    void* data = nullptr;
    int64_t n = 0;
    ReduceOp op = ReduceOp::sum;
    bool f64 = false;  // doubles (all_reduce_host), else floats
    Phase phase = Phase::queued;
    int64_t off = 0, chunk = 0;  // the step in flight: values [off, off + chunk)
    MPI_Request request = MPI_REQUEST_NULL;
    Clock::time_point deadline, busy_until;  // of the MPI call in flight
    std::vector<int> counts, displs, recv_counts, recv_displs;
    std::vector<double> scratch;  // world copies of this rank's slice (floats or doubles)
    int64_t value_bytes() const { return f64 ? 8 : 4; }
    MPI_Datatype type() const { return f64 ? MPI_DOUBLE : MPI_FLOAT; }
  };

  class Pending final : public PendingCollective {
   public:
    Pending(MpiCommunicator& comm, std::shared_ptr<Reduction> r) : comm_(comm), r_(std::move(r)) {}
    bool test() override {
      if (r_->phase != Reduction::Phase::done) comm_.progress();
      return r_->phase == Reduction::Phase::done;
    }
    void wait() override { comm_.wait_for(*r_); }

   private:
    MpiCommunicator& comm_;
    std::shared_ptr<Reduction> r_;
  };

  std::shared_ptr<Reduction> enqueue(Collective c, void* data, int64_t n, ReduceOp op, bool f64) {
    check_usable(c, n);
    auto r = std::make_shared<Reduction>();
    r->header = {static_cast<int64_t>(++seq_), c, n, 0};
    r->data = data;
    r->n = n;
    r->op = op;
    r->f64 = f64;
    queue_.push_back(r);
    progress();  // posts the header at once when nothing is ahead of it
    return r;
  }

  // Moves the queue on as far as it goes without waiting; true when it is empty.
  bool progress() {
    while (!queue_.empty()) {
      Reduction& head = *queue_.front();
      current_ = head.header;  // what errors name
      if (!advance(head)) return false;
      head.phase = Reduction::Phase::done;
      queue_.pop_front();
    }
    return true;
  }

  // Polls until `r` is complete: tightly while the head's MPI call is young (see wait()), else
  // with sleeps in between; a call past its deadline throws from advance().
  void wait_for(const Reduction& r) {
    while (r.phase != Reduction::Phase::done) {
      if (progress()) break;
      if (Clock::now() > queue_.front()->busy_until) std::this_thread::sleep_for(kPollSleep);
    }
  }

  void arm(Reduction& r, int64_t bytes) {
    const auto now = Clock::now();
    r.deadline = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    r.busy_until = now + kBusyPoll +
                   std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double>(static_cast<double>(bytes) / kBusyBytesPerSecond));
  }

  // The state machine of one reduction; true once it is complete.
  bool advance(Reduction& r) {
    for (;;) {
      if (r.phase == Reduction::Phase::queued) {
        post_header(r.request);
        r.phase = Reduction::Phase::header;
        arm(r, 0);
        continue;
      }
      int done = 0;
      call(MPI_Test(&r.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) {
        if (Clock::now() >= r.deadline) timed_out();
        return false;
      }
      switch (r.phase) {
        case Reduction::Phase::header:
          check_headers();
          if (r.n == 0) return true;
          post_scatter(r);
          break;
        case Reduction::Phase::scatter:
          if (r.f64)
            reduce_slice<double>(r);
          else
            reduce_slice<float>(r);
          call(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, static_cast<char*>(r.data) + r.off * r.value_bytes(),
                               r.counts.data(), r.displs.data(), r.type(), comm_, &r.request),
               "MPI_Iallgatherv");
          r.phase = Reduction::Phase::gather;
          arm(r, r.chunk * r.value_bytes());
          break;
        case Reduction::Phase::gather:
          r.off += r.chunk;
          if (r.off >= r.n) return true;
          post_scatter(r);
          break;
        default:
          return true;
      }
    }
  }

  // The all-to-all of the step at r.off: rank q gets [c*q/world, c*(q+1)/world) of every rank.
  void post_scatter(Reduction& r) {
    const int64_t c = std::min<int64_t>(g_chunk_values, r.n - r.off);
    r.chunk = c;
    r.counts.resize(world_);
    r.displs.resize(world_);
    r.recv_counts.resize(world_);
    r.recv_displs.resize(world_);
    for (int q = 0; q < world_; ++q) {
      r.displs[q] = static_cast<int>(c * q / world_);
      r.counts[q] = static_cast<int>(c * (q + 1) / world_) - r.displs[q];
    }
    const int mine = r.counts[rank_];
    for (int q = 0; q < world_; ++q) {
      r.recv_counts[q] = mine;
      r.recv_displs[q] = q * mine;
    }
    r.scratch.resize((static_cast<size_t>(mine) * world_ * r.value_bytes() + 7) / 8);
    call(MPI_Ialltoallv(static_cast<char*>(r.data) + r.off * r.value_bytes(), r.counts.data(), r.displs.data(), r.type(),
                        r.scratch.data(), r.recv_counts.data(), r.recv_displs.data(), r.type(), comm_, &r.request),
         "MPI_Ialltoallv");
    r.phase = Reduction::Phase::scatter;
    arm(r, c * r.value_bytes());
  }

  template <typename T>
  void reduce_slice(Reduction& r) {
    const int mine = r.counts[rank_];
    const T* copies = reinterpret_cast<const T*>(r.scratch.data());
    cpu::reduce_in_rank_order(
        static_cast<T*>(r.data) + r.off + r.displs[rank_], mine, world_,
        [&](int q) { return copies + static_cast<int64_t>(q) * mine; }, r.op);
  }

  // Values per rank per step of reduce_scatter and all_gather, whose steps move world_ slices.
  int64_t slice_step() const { return std::max<int64_t>(1, g_chunk_values / world_); }

  void bcast(void* data, int64_t n, MPI_Datatype type, int64_t value_bytes, int root) {
    const int64_t step = g_chunk_values;
    for (int64_t off = 0; off < n; off += step) {
      const int64_t c = std::min(step, n - off);
      MPI_Request request = MPI_REQUEST_NULL;
      call(MPI_Ibcast(static_cast<char*>(data) + off * value_bytes, static_cast<int>(c), type, root, comm_, &request),
           "MPI_Ibcast");
      wait(request, c * value_bytes);
    }
  }

  // An MPI error inside a collective: the communicator is unusable from here on.
  void call(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    broken_ = true;
    throw CollectiveError(str_cat("rank ", rank_, ": ", collective_name(current_[1]), " #", current_[0], " (",
                                  current_[2], " ", unit(current_[1]), "): ", what, " failed: ", detail::error_string(rc)));
  }

  // Polls `request` until it completes or the deadline passes (timeout_s_ from now); tightly for
  // kBusyPoll plus `bytes` at kBusyBytesPerSecond, then with sleeps in between.
  void wait(MPI_Request& request, int64_t bytes = 0) {
    const auto start = Clock::now();
    const auto busy = kBusyPoll + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(static_cast<double>(bytes) / kBusyBytesPerSecond));
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    for (;;) {
      int done = 0;
      call(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      const auto now = Clock::now();
      if (now >= deadline) timed_out();
      if (now - start > busy) std::this_thread::sleep_for(kPollSleep);
    }
  }

  [[noreturn]] void timed_out() {
    broken_ = true;
    throw CollectiveError(str_cat("rank ", rank_, ": ", collective_name(current_[1]), " #", current_[0], " (",
                                  current_[2], " ", unit(current_[1]), ") did not complete within ", timeout_s_,
                                  " s: another rank exited, is stuck, or called a different collective "
                                  "(training.collective_timeout_s)"));
  }

  MPI_Comm comm_;
  int rank_ = 0, world_ = 1;
  double timeout_s_;
  uint64_t seq_ = 0;
  bool broken_ = false;
  Header current_{};
  std::vector<int64_t> headers_;  // kHeader values per rank, then this rank's outgoing header
  std::vector<float> float_scratch_;
  std::deque<std::shared_ptr<Reduction>> queue_;  // the head alone is in flight
};

}  // namespace

void set_chunk_values(int64_t values) {
  g_chunk_values = values <= 0 ? kDefaultChunkValues : std::min<int64_t>(values, INT_MAX);
}

std::unique_ptr<Communicator> world_communicator(double timeout_s) {
  TARN_CHECK(timeout_s > 0 && std::isfinite(timeout_s), "world_communicator: timeout must be a positive number of "
                                                        "seconds, got ", timeout_s, " (training.collective_timeout_s)");
  detail::init_once();
  // A private copy of the world, so that tarn's collectives never meet anyone else's; made
  // non-blocking so that a rank that never arrives is reported instead of waited for.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  TARN_MPI_CALL(MPI_Comm_idup(MPI_COMM_WORLD, &comm, &request));
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  for (int done = 0; !done;) {
    TARN_MPI_CALL(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) break;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (Clock::now() >= deadline)
      throw CollectiveError(str_cat("rank ", rank, ": world_communicator (MPI_Comm_idup of MPI_COMM_WORLD) did not "
                                    "complete within ", timeout_s, " s: another rank exited or is stuck "
                                    "(training.collective_timeout_s)"));
    std::this_thread::sleep_for(kPollSleep);
  }
  TARN_MPI_CALL(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  if (detail::env_local_rank() < 0) {
    // The launcher did not say which rank of this machine we are: ask MPI (ranks sharing memory).
    MPI_Comm local = MPI_COMM_NULL;
    int rank = 0, local_rank = 0;
    TARN_MPI_CALL(MPI_Comm_rank(comm, &rank));
    TARN_MPI_CALL(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    TARN_MPI_CALL(MPI_Comm_rank(local, &local_rank));
    MPI_Comm_free(&local);
    detail::set_split_local_rank(local_rank);
  }
  return std::make_unique<MpiCommunicator>(comm, timeout_s);
}

}  // namespace tarn::kernels::mpi
