// The emulator's scheduler: runs a grid's blocks over a worker pool, each block's threads as
// fibers on one worker, and resolves barriers and warp collectives (kernels/emu/emu.h).
//
// Inside a block the scheduler always resumes the first runnable fiber in the block's thread
// order; a fiber runs until it exits or reaches a collective (__syncthreads, a shuffle, a vote,
// __syncwarp), where it parks. A warp collective resolves as soon as the last lane its mask
// names arrives (shfl.sync semantics), and its lanes become runnable at once, so a warp early in
// the order runs ahead of the others up to the next barrier, as warps may on hardware: a race
// between warps (a shared buffer rewritten before the other warps read it) shows as a wrong
// result. __syncthreads resolves once every live thread waits at it. When nothing is runnable
// and nothing resolves, the block is divergent or deadlocked, and the error names the threads
// involved and the file:line where each waits.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "kernels/emu/emu.h"
#include "kernels/enum_name.h"
#include "kernels/emu/fiber.h"

#if defined(__SANITIZE_ADDRESS__)
#define TARN_EMU_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace tarn::emu {

TARN_EMU_TLS uint3 threadIdx = {0, 0, 0};
TARN_EMU_TLS uint3 blockIdx = {0, 0, 0};
TARN_EMU_TLS dim3 blockDim = dim3(1, 1, 1);
TARN_EMU_TLS dim3 gridDim = dim3(1, 1, 1);

namespace {

constexpr int kWarp = 32;
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr size_t kDefaultSharedLimit = 48 * 1024;   // without cudaFuncSetAttribute
constexpr size_t kMaxSharedOptin = 227 * 1024;      // sm_90's opt-in limit per block
constexpr size_t kSharedSlack = 256;                // NaN bytes either side of dynamic smem
constexpr unsigned char kNaNByte = 0xFF;            // 0xFFFFFFFF is a float NaN
#if defined(TARN_EMU_ASAN)
constexpr size_t kDefaultStackBytes = 512 * 1024;   // ASan frames carry redzones
#else
constexpr size_t kDefaultStackBytes = 64 * 1024;
#endif
constexpr uint64_t kDefaultSeed = 0x7a726e5eedULL;  // of the random thread order

// ---------------------------------------------------------------------------------------------
// Settings.

struct Settings {
  std::atomic<int> order{-1};  // -1: read TARN_EMU_ORDER on first use
  std::atomic<uint64_t> seed{kDefaultSeed};
  std::atomic<bool> seed_set{false};  // false: read TARN_EMU_SEED on first use
  std::atomic<int> workers{0};  // 0: read TARN_EMU_WORKERS on first use
  std::atomic<size_t> stack_bytes{0};
  std::atomic<uint64_t> launches{0}, blocks{0}, threads{0}, switches{0};
};
Settings& settings() {
  static Settings s;
  return s;
}

ThreadOrder order_from_env() {
  const char* e = std::getenv("TARN_EMU_ORDER");
  if (!e || !*e || std::strcmp(e, "forward") == 0) return ThreadOrder::forward;
  if (std::strcmp(e, "reverse") == 0) return ThreadOrder::reverse;
  if (std::strcmp(e, "random") == 0) return ThreadOrder::random;
  throw Error(str_cat("TARN_EMU_ORDER=", e, ": expected forward, reverse or random"));
}

int workers_from_env() {
  if (const char* e = std::getenv("TARN_EMU_WORKERS")) {
    const int n = std::atoi(e);
    TARN_CHECK(n >= 1 && n <= 256, "TARN_EMU_WORKERS=", e, ": expected a count in [1, 256]");
    return n;
  }
  // The CPUs this process may run on (a container or taskset may allow fewer than the machine
  // has, which is what hardware_concurrency counts): more workers than those only queue.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const unsigned cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0
                            ? static_cast<unsigned>(CPU_COUNT(&allowed))
                            : std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cpus == 0 ? 1u : cpus, 1u, 8u));
}

size_t stack_bytes() {
  size_t s = settings().stack_bytes.load();
  if (s == 0) {
    s = kDefaultStackBytes;
    if (const char* e = std::getenv("TARN_EMU_STACK_KB")) {
      const long kb = std::atol(e);
      TARN_CHECK(kb >= 16, "TARN_EMU_STACK_KB=", e, ": expected at least 16");
      s = static_cast<size_t>(kb) * 1024;
    }
    settings().stack_bytes.store(s);
  }
  return s;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Paths in messages relative to the source tree when they lie in it.
const char* short_path(const char* file) {
  if (!file) return "?";
#ifdef TARN_EMU_SOURCE_ROOT
  const size_t n = std::strlen(TARN_EMU_SOURCE_ROOT);
  if (std::strncmp(file, TARN_EMU_SOURCE_ROOT, n) == 0) return file + n;
#endif
  return file;
}

std::string where(const char* file, int line) { return str_cat(short_path(file), ":", line); }
std::string triple(uint3 v) { return str_cat("(", v.x, ",", v.y, ",", v.z, ")"); }
std::string triple(dim3 v) { return str_cat("(", v.x, ",", v.y, ",", v.z, ")"); }
std::string hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

const char* collective_name(Collective op) {
  switch (op) {
    case Collective::shfl_idx: return "__shfl_sync";
    case Collective::shfl_up: return "__shfl_up_sync";
    case Collective::shfl_down: return "__shfl_down_sync";
    case Collective::shfl_xor: return "__shfl_xor_sync";
    case Collective::ballot: return "__ballot_sync";
    case Collective::any: return "__any_sync";
    case Collective::all: return "__all_sync";
    case Collective::syncwarp: return "__syncwarp";
    case Collective::barrier: return "__syncthreads";
    case Collective::barrier_count: return "__syncthreads_count";
    case Collective::barrier_and: return "__syncthreads_and";
    case Collective::barrier_or: return "__syncthreads_or";
  }
  return "?";
}

bool is_shuffle(Collective op) { return op <= Collective::shfl_xor; }

bool same_file(const char* a, const char* b) { return a == b || (a && b && std::strcmp(a, b) == 0); }

// ---------------------------------------------------------------------------------------------
// Per-thread and per-block state.

enum class State : uint8_t { runnable, at_barrier, at_warp, exited };

// One cp.async of a thread: performed when a wait_group completes its group.
struct AsyncCopy {
  static constexpr uint64_t kUncommitted = ~uint64_t{0};
  void* dst;
  const void* src;
  int bytes, src_bytes;
  uint64_t group;  // its commit group, or kUncommitted while the thread's group is open
  const char* file;
  int line;
};

struct Fiber {
  void* sp = nullptr;
  State state = State::runnable;
  uint3 idx{0, 0, 0};
  unsigned linear = 0;
  // Where and how the fiber waits.
  Collective op = Collective::barrier;
  const char* file = nullptr;
  int line = 0;
  unsigned mask = 0;
  int arg = 0;
  int width = kWarp;
  int value_size = 0;
  uint64_t value = 0;
  uint64_t result = 0;
  FiberStack* stack = nullptr;
  std::vector<AsyncCopy> copies;  // cp.async issued and not yet completed by a wait
  uint64_t groups = 0;            // cp.async groups committed so far
#if defined(TARN_EMU_ASAN)
  void* fake_stack = nullptr;
#endif
};

struct Grid;

// A failure found by the scheduler (on the worker's own stack, never inside a fiber).
struct BlockFailure {
  std::string message;
};

// What a worker OS thread keeps between blocks: fiber stacks are mapped once and reused.
struct Worker {
  std::vector<std::unique_ptr<FiberStack>> stacks;
  size_t stack_bytes = 0;
  std::vector<Fiber> fibers;
  std::vector<unsigned> order;  // thread indices, in scheduling priority
  std::vector<unsigned> pos;    // pos[thread] = its index in `order`
  void* scheduler_sp = nullptr;
  Fiber* current = nullptr;
  const Grid* grid = nullptr;
  unsigned char* dyn_smem = nullptr;
  std::string fiber_error;  // an exception escaping a kernel body, caught in its fiber
  uint64_t switches = 0;
#if defined(TARN_EMU_ASAN)
  void* scheduler_fake_stack = nullptr;
  const void* scheduler_stack_bottom = nullptr;
  size_t scheduler_stack_size = 0;
#endif
};
thread_local Worker tl_worker;

struct Grid {
  KernelCall call;
  dim3 grid, block;
  size_t smem = 0;
  const char* file = nullptr;
  int line = 0;
  ThreadOrder order = ThreadOrder::forward;
  uint64_t seed = 0;
  uint64_t total_blocks = 0;
  std::atomic<uint64_t> next_block{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::string error;

  void fail(std::string message) {
    std::lock_guard<std::mutex> lock(error_mu);
    if (error.empty()) error = std::move(message);
    failed.store(true);
  }
};

bool same_site(const Fiber& a, const Fiber& b) { return a.line == b.line && same_file(a.file, b.file); }

Fiber& current_fiber(const char* what, const char* file, int line) {
  Fiber* f = tl_worker.current;
  if (!f) throw Error(str_cat(what, " called outside a kernel (", where(file, line), ")"));
  return *f;
}

// ---------------------------------------------------------------------------------------------
// Switching.

void resume(Worker& w, Fiber& f) {
  threadIdx = f.idx;
  w.current = &f;
  ++w.switches;
#if defined(TARN_EMU_ASAN)
  __sanitizer_start_switch_fiber(&w.scheduler_fake_stack, f.stack->bottom(), f.stack->size());
#endif
  tarn_emu_switch(&w.scheduler_sp, f.sp);
#if defined(TARN_EMU_ASAN)
  __sanitizer_finish_switch_fiber(w.scheduler_fake_stack, nullptr, nullptr);
#endif
  w.current = nullptr;
}

void yield_to_scheduler(Worker& w, Fiber& f) {
#if defined(TARN_EMU_ASAN)
  __sanitizer_start_switch_fiber(&f.fake_stack, w.scheduler_stack_bottom, w.scheduler_stack_size);
#endif
  tarn_emu_switch(&f.sp, w.scheduler_sp);
#if defined(TARN_EMU_ASAN)
  __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#endif
}

void fiber_main(void* arg) {
  Fiber& f = *static_cast<Fiber*>(arg);
  Worker& w = tl_worker;
#if defined(TARN_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &w.scheduler_stack_bottom, &w.scheduler_stack_size);
#endif
  try {
    w.grid->call.invoke(w.grid->call.data);
    if (!f.copies.empty())
      throw Error(str_cat("exited with ", f.copies.size(), " cp.async cop", f.copies.size() == 1 ? "y" : "ies",
                          " not waited for (the first at ", where(f.copies.front().file, f.copies.front().line),
                          "): wait for every copy before a thread ends"));
  } catch (const std::exception& e) {
    if (w.fiber_error.empty()) w.fiber_error = str_cat("thread ", triple(f.idx), " threw: ", e.what());
  } catch (...) {
    if (w.fiber_error.empty()) w.fiber_error = str_cat("thread ", triple(f.idx), " threw an unknown exception");
  }
  f.state = State::exited;
#if defined(TARN_EMU_ASAN)
  __sanitizer_start_switch_fiber(nullptr, w.scheduler_stack_bottom, w.scheduler_stack_size);
#endif
  tarn_emu_switch(&f.sp, w.scheduler_sp);
  __builtin_unreachable();
}

// ---------------------------------------------------------------------------------------------
// Resolving collectives.

class BlockRun {
 public:
  BlockRun(Worker& w, const Grid& g, uint64_t block_linear) : w_(w), g_(g), block_linear_(block_linear) {}

  void run();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw BlockFailure{str_cat("block ", triple(blockIdx), ": ", what)};
  }
  std::string thread_name(const Fiber& f) const {
    if (n_ <= static_cast<unsigned>(kWarp)) return str_cat("thread ", triple(f.idx));
    return str_cat("thread ", triple(f.idx), " (warp ", f.linear / kWarp, " lane ", f.linear % kWarp, ")");
  }
  std::string waits(const Fiber& f) const {
    switch (f.state) {
      case State::exited: return "has exited";
      case State::runnable: return "is running";
      default: return str_cat("waits at ", collective_name(f.op), " (", where(f.file, f.line), ")");
    }
  }
  void make_order(uint64_t phase);
  bool try_resolve(unsigned base, unsigned lane, unsigned* earliest);
  bool resolve_warps();
  void resolve_warp_group(unsigned base, unsigned mask);
  bool resolve_barrier();
  [[noreturn]] void report_stuck();

  Worker& w_;
  const Grid& g_;
  uint64_t block_linear_;
  unsigned n_ = 0;
  std::vector<Fiber>& fibers() { return w_.fibers; }
};

void BlockRun::make_order(uint64_t phase) {
  auto& order = w_.order;
  order.resize(n_);
  for (unsigned i = 0; i < n_; ++i) order[i] = i;
  if (g_.order == ThreadOrder::reverse) {
    std::reverse(order.begin(), order.end());
  } else if (g_.order == ThreadOrder::random) {
    // A fresh permutation after each barrier, a pure function of (seed, block, phase).
    uint64_t state = g_.seed ^ (block_linear_ * 0xD1B54A32D192ED03ULL) ^ (phase * 0x8CB92BA72F3D8DD7ULL);
    for (unsigned i = n_; i > 1; --i) {
      const unsigned j = static_cast<unsigned>(splitmix64(state) % i);
      std::swap(order[i - 1], order[j]);
    }
  }
  w_.pos.resize(n_);
  for (unsigned k = 0; k < n_; ++k) w_.pos[order[k]] = k;
}

void BlockRun::run() {
  const dim3 b = g_.block;
  n_ = b.x * b.y * b.z;
  Worker& w = w_;
  // Where the previous block's fibers last left their stacks (finished or abandoned by a
  // failed block): what fiber_prepare must clear of ASan poison before reuse.
  for (const Fiber& f : w.fibers)
    if (f.stack) f.stack->note_switched_away_at(f.sp);
  const size_t want = stack_bytes();
  if (w.stack_bytes != want) {
    w.stacks.clear();
    w.stack_bytes = want;
  }
  while (w.stacks.size() < n_) w.stacks.push_back(std::make_unique<FiberStack>(want));
  auto& fs = fibers();
  fs.assign(n_, Fiber{});
  for (unsigned i = 0; i < n_; ++i) {
    Fiber& f = fs[i];
    f.linear = i;
    f.idx = uint3{i % b.x, (i / b.x) % b.y, i / (b.x * b.y)};
    f.stack = w.stacks[i].get();
    f.sp = fiber_prepare(*f.stack, &fiber_main, &f);
  }

  uint64_t phase = 0;
  make_order(phase);
  unsigned cursor = 0;  // every fiber before it in `order` is parked or exited
  for (;;) {
    while (cursor < n_) {
      Fiber& f = fs[w.order[cursor]];
      if (f.state != State::runnable) {
        ++cursor;
        continue;
      }
      resume(w, f);
      if (!w.fiber_error.empty()) fail(w.fiber_error);
      unsigned earliest = cursor;
      if (f.state == State::at_warp && try_resolve(f.linear / kWarp * kWarp, f.linear % kWarp, &earliest))
        cursor = std::min(cursor, earliest);
    }
    bool all_exited = true;
    for (const Fiber& f : fs) all_exited = all_exited && f.state == State::exited;
    if (all_exited) return;
    if (resolve_warps()) {
      cursor = 0;
      continue;
    }
    if (resolve_barrier()) {
      if (g_.order == ThreadOrder::random) make_order(++phase);
      cursor = 0;
      continue;
    }
    report_stuck();
  }
}

// Validates the collective lane `lane` of the warp at `base` waits at, and resolves it when every
// lane of its mask has arrived; *earliest gets the lowest order position among them.
bool BlockRun::try_resolve(unsigned base, unsigned lane, unsigned* earliest) {
  auto& fs = fibers();
  const unsigned lanes = std::min<unsigned>(kWarp, n_ - base);
  const Fiber& f = fs[base + lane];
  const unsigned mask = f.mask;
  const char* name = collective_name(f.op);
  if (!((mask >> lane) & 1u))
    fail(str_cat(thread_name(f), " calls ", name, " at ", where(f.file, f.line), " with mask ", hex(mask),
                 ", which leaves out its own lane ", lane));
  if (lanes < static_cast<unsigned>(kWarp) && (mask >> lanes) != 0)
    fail(str_cat(thread_name(f), " calls ", name, " at ", where(f.file, f.line), " with mask ", hex(mask),
                 ", which names lanes past the block's last thread (blockDim ", triple(g_.block), ")"));
  if (is_shuffle(f.op) && (f.width <= 0 || f.width > kWarp || (f.width & (f.width - 1)) != 0))
    fail(str_cat(thread_name(f), " calls ", name, " at ", where(f.file, f.line), " with width ", f.width,
                 ": expected a power of two in [1, 32]"));
  for (unsigned k = 0; k < lanes; ++k) {
    if (!((mask >> k) & 1u)) continue;
    const Fiber& o = fs[base + k];
    if (o.state == State::exited)
      fail(str_cat(thread_name(f), " waits at ", name, " (", where(f.file, f.line), ") with mask ", hex(mask),
                   " for lane ", k, ", but ", thread_name(o), " has exited"));
    if (o.state != State::at_warp) return false;  // still running, or at __syncthreads (report_stuck)
    if (o.mask != mask)
      fail(str_cat("lanes of one warp disagree on a collective's mask: ", thread_name(f), " calls ", name, " at ",
                   where(f.file, f.line), " with ", hex(mask), ", ", thread_name(o), " calls ",
                   collective_name(o.op), " at ", where(o.file, o.line), " with ", hex(o.mask)));
    if (o.op != f.op || o.width != f.width || o.value_size != f.value_size)
      fail(str_cat("lanes of one warp meet at different collectives: ", thread_name(f), " calls ", name, " at ",
                   where(f.file, f.line), ", ", thread_name(o), " calls ", collective_name(o.op), " at ",
                   where(o.file, o.line)));
  }
  resolve_warp_group(base, mask);
  for (unsigned k = 0; k < lanes; ++k)
    if ((mask >> k) & 1u) *earliest = std::min(*earliest, w_.pos[base + k]);
  return true;
}

// The full check once nothing is runnable: errors (a lane that exited under a mask) and any
// group not yet resolved.
bool BlockRun::resolve_warps() {
  auto& fs = fibers();
  bool progress = false;
  unsigned earliest = n_;
  for (unsigned base = 0; base < n_; base += kWarp) {
    const unsigned lanes = std::min<unsigned>(kWarp, n_ - base);
    for (unsigned l = 0; l < lanes; ++l)
      if (fs[base + l].state == State::at_warp && try_resolve(base, l, &earliest)) progress = true;
  }
  return progress;
}

void BlockRun::resolve_warp_group(unsigned base, unsigned mask) {
  auto& fs = fibers();
  Fiber& first = fs[base + static_cast<unsigned>(__builtin_ctz(mask))];
  const Collective op = first.op;
  if (!is_shuffle(op)) {
    unsigned ballot = 0;
    for (unsigned k = 0; k < static_cast<unsigned>(kWarp); ++k)
      if (((mask >> k) & 1u) && fs[base + k].value != 0) ballot |= 1u << k;
    uint64_t result = 0;
    if (op == Collective::ballot) result = ballot;
    if (op == Collective::any) result = ballot != 0;
    if (op == Collective::all) result = ballot == mask;
    for (unsigned k = 0; k < static_cast<unsigned>(kWarp); ++k) {
      if (!((mask >> k) & 1u)) continue;
      fs[base + k].result = result;
      fs[base + k].state = State::runnable;
    }
    return;
  }
  const int width = first.width;
  for (unsigned k = 0; k < static_cast<unsigned>(kWarp); ++k) {
    if (!((mask >> k) & 1u)) continue;
    Fiber& f = fs[base + k];
    const int lane = static_cast<int>(k);
    const int seg = lane & ~(width - 1);  // first lane of this lane's width-sized segment
    int src = lane;
    switch (op) {
      case Collective::shfl_idx: src = seg + (f.arg & (width - 1)); break;
      case Collective::shfl_up: src = lane - f.arg < seg ? lane : lane - f.arg; break;
      case Collective::shfl_down: src = lane + f.arg >= seg + width ? lane : lane + f.arg; break;
      case Collective::shfl_xor: src = (lane ^ f.arg) >= seg + width ? lane : (lane ^ f.arg); break;
      default: break;
    }
    if (src < 0 || src >= kWarp || !((mask >> src) & 1u))
      fail(str_cat(thread_name(f), " calls ", collective_name(op), " at ", where(f.file, f.line), " reading lane ",
                   src, ", which is not in the mask ", hex(mask), " (undefined on hardware)"));
    f.result = fs[base + static_cast<unsigned>(src)].value;
  }
  for (unsigned k = 0; k < static_cast<unsigned>(kWarp); ++k)
    if ((mask >> k) & 1u) fs[base + k].state = State::runnable;
}

bool BlockRun::resolve_barrier() {
  auto& fs = fibers();
  const Fiber* waiting = nullptr;
  const Fiber* exited = nullptr;
  for (const Fiber& f : fs) {
    if (f.state == State::at_warp) return false;
    if (f.state == State::exited && !exited) exited = &f;
    if (f.state == State::at_barrier && !waiting) waiting = &f;
  }
  if (!waiting) return false;
  if (exited)
    fail(str_cat("divergent ", collective_name(waiting->op), ": ", thread_name(*waiting), " waits at ",
                 where(waiting->file, waiting->line), " but ", thread_name(*exited),
                 " has exited without reaching it (every thread of a block must reach the same barrier)"));
  int count = 0;
  for (const Fiber& f : fs) {
    if (!same_site(f, *waiting) || f.op != waiting->op)
      fail(str_cat("divergent barriers: ", thread_name(*waiting), " waits at ", collective_name(waiting->op), " (",
                   where(waiting->file, waiting->line), ") while ", thread_name(f), " waits at ",
                   collective_name(f.op), " (", where(f.file, f.line), ")"));
    count += f.value != 0;
  }
  uint64_t result = 0;
  switch (waiting->op) {
    case Collective::barrier_count: result = static_cast<uint64_t>(count); break;
    case Collective::barrier_and: result = count == static_cast<int>(n_); break;
    case Collective::barrier_or: result = count != 0; break;
    default: break;
  }
  for (Fiber& f : fs) {
    f.result = result;
    f.state = State::runnable;
  }
  return true;
}

void BlockRun::report_stuck() {
  // Some threads wait at warp collectives that cannot resolve because a lane they name waits
  // at __syncthreads (or the reverse): on hardware this hangs.
  auto& fs = fibers();
  for (const Fiber& f : fs) {
    if (f.state != State::at_warp) continue;
    const unsigned base = f.linear / kWarp * kWarp;
    for (unsigned k = 0; k < static_cast<unsigned>(kWarp) && base + k < n_; ++k) {
      const Fiber& o = fs[base + k];
      if (((f.mask >> k) & 1u) && o.state == State::at_barrier)
        fail(str_cat("deadlock: ", thread_name(f), " waits at ", collective_name(f.op), " (", where(f.file, f.line),
                     ") for lane ", k, ", but ", thread_name(o), " ", waits(o)));
    }
  }
  std::string who;
  for (const Fiber& f : fs)
    if (f.state != State::exited && who.size() < 400) who += str_cat("; ", thread_name(f), " ", waits(f));
  fail(str_cat("deadlock: no thread can proceed", who));
}

// ---------------------------------------------------------------------------------------------
// Running a grid.

void run_blocks(Grid& g) {
  Worker& w = tl_worker;
  const uint64_t gx = g.grid.x, gy = g.grid.y;
  w.grid = &g;
  blockDim = g.block;
  gridDim = g.grid;
  std::vector<unsigned char> smem;
  for (;;) {
    if (g.failed.load()) break;
    const uint64_t b = g.next_block.fetch_add(1);
    if (b >= g.total_blocks) break;
    blockIdx = uint3{static_cast<unsigned>(b % gx), static_cast<unsigned>((b / gx) % gy),
                     static_cast<unsigned>(b / (gx * gy))};
    // Dynamic shared memory: NaN bytes, so a read before any write shows. Under ASan the
    // buffer has exactly the launch's size (its redzones catch out-of-bounds accesses);
    // otherwise NaN slack either side makes a near out-of-bounds read come back NaN.
#if defined(TARN_EMU_ASAN)
    std::unique_ptr<unsigned char[]> exact(new unsigned char[g.smem]);
    std::memset(exact.get(), kNaNByte, g.smem);
    w.dyn_smem = exact.get();
#else
    smem.assign(g.smem + 2 * kSharedSlack, kNaNByte);
    w.dyn_smem = smem.data() + kSharedSlack;
#endif
    try {
      BlockRun(w, g, b).run();
    } catch (const BlockFailure& f) {
      g.fail(f.message);
    } catch (const std::exception& e) {
      g.fail(str_cat("block ", triple(blockIdx), ": ", e.what()));
    }
    w.fiber_error.clear();
    w.dyn_smem = nullptr;
  }
  w.grid = nullptr;
  settings().switches.fetch_add(w.switches);
  w.switches = 0;
}

// Persistent worker threads; the launching thread works too.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(Grid& g, int workers) {
    const int helpers = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(workers - 1), g.total_blocks - 1));
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (static_cast<int>(threads_.size()) < helpers) threads_.emplace_back([this] { loop(); });
      job_ = &g;
      wanted_ = helpers;
      busy_ = 0;
      ++generation_;
    }
    if (helpers > 0) start_cv_.notify_all();
    run_blocks(g);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return wanted_ == 0 && busy_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      start_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && wanted_ > 0); });
      if (stop_) return;
      seen = generation_;
      --wanted_;
      ++busy_;
      Grid* g = job_;
      lock.unlock();
      run_blocks(*g);
      lock.lock();
      --busy_;
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::vector<std::thread> threads_;
  Grid* job_ = nullptr;
  uint64_t generation_ = 0;
  int wanted_ = 0;
  int busy_ = 0;
  bool stop_ = false;
};

std::mutex& launch_mutex() {
  static std::mutex m;
  return m;
}
Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

size_t kernel_shared_limit(const void* kernel);  // runtime.cpp

// ---------------------------------------------------------------------------------------------
// Public entry points.

namespace detail {

uint64_t warp_collective(Collective op, unsigned mask, uint64_t value, int value_size, int arg, int width,
                         const char* file, int line) {
  Fiber& f = current_fiber(collective_name(op), file, line);
  f.state = State::at_warp;
  f.op = op;
  f.mask = mask;
  f.value = value;
  f.value_size = value_size;
  f.arg = arg;
  f.width = width;
  f.file = file;
  f.line = line;
  yield_to_scheduler(tl_worker, f);
  return f.result;
}

int block_barrier(Collective op, int predicate, const char* file, int line) {
  Fiber& f = current_fiber(collective_name(op), file, line);
  f.state = State::at_barrier;
  f.op = op;
  f.value = predicate != 0;
  f.file = file;
  f.line = line;
  yield_to_scheduler(tl_worker, f);
  return static_cast<int>(f.result);
}

void* dynamic_shared() {
  if (!tl_worker.current) throw Error("dynamic shared memory used outside a kernel");
  return tl_worker.dyn_smem;
}

void async_copy(void* dst, const void* src, int bytes, int src_bytes, const char* file, int line) {
  Fiber& f = current_fiber("cp.async", file, line);
  const auto misaligned = [bytes](const void* p) { return reinterpret_cast<uintptr_t>(p) % bytes != 0; };
  if ((bytes != 4 && bytes != 8 && bytes != 16) || src_bytes < 0 || src_bytes > bytes || !dst || !src ||
      misaligned(dst) || misaligned(src))
    throw Error(str_cat("cp.async at ", where(file, line), ": ", bytes, " bytes (", src_bytes, " read) from ", src,
                        " to ", dst, ": the size must be 4, 8 or 16, the bytes read at most that, and both "
                        "addresses aligned to the size"));
  std::memset(dst, kNaNByte, static_cast<size_t>(bytes));  // not visible before its wait
  f.copies.push_back(AsyncCopy{dst, src, bytes, src_bytes, AsyncCopy::kUncommitted, file, line});
}

void async_commit(const char* file, int line) {
  Fiber& f = current_fiber("cp.async.commit_group", file, line);
  for (AsyncCopy& c : f.copies)
    if (c.group == AsyncCopy::kUncommitted) c.group = f.groups;
  ++f.groups;
}

void async_wait(int pending_groups, const char* file, int line) {
  Fiber& f = current_fiber("cp.async.wait_group", file, line);
  if (pending_groups < 0) throw Error(str_cat("cp.async.wait_group at ", where(file, line), ": negative count"));
  // Groups 0 .. groups - pending - 1 complete; younger groups and uncommitted copies stay.
  const uint64_t done_below = f.groups > static_cast<uint64_t>(pending_groups) ? f.groups - pending_groups : 0;
  std::vector<AsyncCopy> left;
  for (const AsyncCopy& c : f.copies) {
    if (c.group != AsyncCopy::kUncommitted && c.group < done_below) {
      std::memcpy(c.dst, c.src, static_cast<size_t>(c.src_bytes));
      std::memset(static_cast<unsigned char*>(c.dst) + c.src_bytes, 0, static_cast<size_t>(c.bytes - c.src_bytes));
    } else {
      left.push_back(c);
    }
  }
  f.copies.swap(left);
}

unsigned active_mask() {
  Worker& w = tl_worker;
  if (!w.current) return 0;
  const unsigned base = w.current->linear / kWarp * kWarp;
  unsigned m = 0;
  for (unsigned k = 0; k < static_cast<unsigned>(kWarp) && base + k < w.fibers.size(); ++k)
    if (w.fibers[base + k].state != State::exited) m |= 1u << k;
  return m;
}

}  // namespace detail

void set_thread_order(ThreadOrder order) { settings().order.store(static_cast<int>(order)); }

ThreadOrder thread_order() {
  int o = settings().order.load();
  if (o < 0) {
    o = static_cast<int>(order_from_env());
    settings().order.store(o);
  }
  return static_cast<ThreadOrder>(o);
}

const char* thread_order_name(ThreadOrder order) { return enum_name(order, {"forward", "reverse", "random"}); }

void set_seed(uint64_t seed) {
  settings().seed.store(seed);
  settings().seed_set.store(true);
}

uint64_t seed() {
  Settings& s = settings();
  if (!s.seed_set.load()) {
    if (const char* e = std::getenv("TARN_EMU_SEED")) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(e, &end, 0);
      TARN_CHECK(*e && end && *end == '\0', "TARN_EMU_SEED=", e, ": expected an unsigned integer");
      s.seed.store(v);
    }
    s.seed_set.store(true);
  }
  return s.seed.load();
}

void set_workers(int n) {
  TARN_CHECK(n >= 1 && n <= 256, "tarn::emu::set_workers(", n, "): expected a count in [1, 256]");
  settings().workers.store(n);
}

int workers() {
  int n = settings().workers.load();
  if (n == 0) {
    n = workers_from_env();
    settings().workers.store(n);
  }
  return n;
}

void set_stack_bytes(size_t bytes) {
  TARN_CHECK(bytes >= 16 * 1024, "tarn::emu::set_stack_bytes(", bytes, "): expected at least 16 KiB");
  settings().stack_bytes.store(bytes);
}

Stats stats() {
  Settings& s = settings();
  return Stats{s.launches.load(), s.blocks.load(), s.threads.load(), s.switches.load()};
}

void reset_stats() {
  Settings& s = settings();
  s.launches = 0;
  s.blocks = 0;
  s.threads = 0;
  s.switches = 0;
}

void run_grid(const KernelCall& call, const LaunchGrid& grid, dim3 block, size_t smem_bytes) {
  const std::string site = where(grid.file, grid.line);
  const dim3 gd = grid.dims;
  auto config_error = [&](const std::string& what) {
    return Error(str_cat("tarn emulator: kernel launch at ", site, " (grid ", triple(gd), ", block ", triple(block),
                         ", ", smem_bytes, " bytes dynamic shared): invalid configuration: ", what));
  };
  if (tl_worker.current) throw config_error("launched from inside a kernel (dynamic parallelism is not emulated)");
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  if (gd.x == 0 || gd.y == 0 || gd.z == 0) throw config_error("a grid extent is 0");
  if (gd.x > 0x7fffffffu || gd.y > 65535u || gd.z > 65535u) throw config_error("grid exceeds (2^31-1, 65535, 65535)");
  if (block.x == 0 || block.y == 0 || block.z == 0) throw config_error("a block extent is 0");
  if (block.x > 1024 || block.y > 1024 || block.z > 64) throw config_error("block exceeds (1024, 1024, 64)");
  if (threads > kMaxThreadsPerBlock) throw config_error("more than 1024 threads per block");
  const size_t limit = std::max(kDefaultSharedLimit, kernel_shared_limit(call.kernel));
  if (smem_bytes > std::min(limit, kMaxSharedOptin))
    throw config_error(str_cat("dynamic shared memory above the kernel's limit of ", std::min(limit, kMaxSharedOptin),
                               " bytes (raise it with cudaFuncSetAttribute, at most ", kMaxSharedOptin, ")"));

  std::lock_guard<std::mutex> lock(launch_mutex());
  Grid g;
  g.call = call;
  g.grid = gd;
  g.block = block;
  g.smem = smem_bytes;
  g.file = grid.file;
  g.line = grid.line;
  g.order = thread_order();
  g.seed = seed();
  g.total_blocks = static_cast<uint64_t>(gd.x) * gd.y * gd.z;
  pool().run(g, workers());
  Settings& s = settings();
  s.launches.fetch_add(1);
  s.blocks.fetch_add(g.total_blocks);
  s.threads.fetch_add(g.total_blocks * threads);
  if (g.failed.load()) {
    std::string order = thread_order_name(g.order);
    if (g.order == ThreadOrder::random) order += str_cat(", seed ", g.seed);
    throw Error(str_cat("tarn emulator: kernel launched at ", site, " (grid ", triple(gd), ", block ", triple(block),
                        ", ", order, " order): ", g.error));
  }
}

}  // namespace tarn::emu
