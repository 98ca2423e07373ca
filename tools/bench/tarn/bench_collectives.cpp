// Collectives (kernels/collectives.h) timed the way nccl-tests times NCCL, so that the figures
// compare: all_reduce_sum, reduce_scatter_sum and all_gather of f32 buffers, out of place and
// in place, every result checked. `tarn bench collectives --help` gives the flags and definitions.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "kernels/collectives.h"
#include "kernels/mpi/mpi.h"
#include "tools/bench/tarn/bench_commands.h"

#include "tools/bench/tarn/bench_common.h"

namespace {

using tarn::kernels::Communicator;
using tarn::kernels::ReduceOp;

constexpr const char* kDescription = R"(All-reduce, reduce-scatter and all-gather timed as nccl-tests does (algbw, busbw),
results checked; run it under mpirun for MPI ranks, else the ranks are threads.

  mpirun -np N tarn bench collectives [options]   the N ranks are MPI processes (kernels/mpi/mpi.h)
  tarn bench collectives [--threads N] [options]  the N ranks are threads of this process (the
                                                  CPU thread group, kernels/cpu/collectives.cpp)

For each buffer size S, from --min-bytes in steps of x --factor up to --max-bytes (which is
always the last size), and each collective, it times --iters iterations after --warmup
untimed ones. Every iteration starts after a barrier; its time is the slowest rank's, and the
table shows the median over iterations. Then it refills the inputs, runs the collective once
more and counts the wrong values on all ranks (#wrong; the inputs are small integers, so every
sum is exact in any order).

  size    S, the whole buffer in bytes as nccl-tests counts it: the all-reduce's buffer, the
          reduce-scatter's send buffer (N x what each rank receives), the all-gather's receive
          buffer (N x what each rank sends); so reduce-scatter and all-gather round S down to a
          multiple of 4N bytes
  algbw   S / time, in GB/s (1e9 bytes/s)
  busbw   algbw x 2(N-1)/N for all_reduce, algbw x (N-1)/N for reduce_scatter and all_gather
          (nccl-tests' doc/PERFORMANCE.md): the rate each rank's link would need
all_reduce_sum is in place only (the interface has no out-of-place all-reduce). Rank 0
prints. The stated peak is the memcpy bandwidth of one rank (bytes read + written per second)
while all ranks copy at once, measured before the run: on one machine a collective is memory
copies, so that is each rank's "link". The bench runs one thread per rank (no OpenMP).)";

struct Options {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t factor = 4;
  int iters = 20;
  int warmup = 3;
  int threads = 2;
  double timeout_s = 300;
};

// A size in bytes, "4096" or "1.5K", "256M", "1G" (powers of 1024), rewritten as the integer.
CLI::Validator bytes() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        double scale = 1;
        const std::string suffix = end ? end : "";
        if (suffix == "K" || suffix == "k")
          scale = 1024.0;
        else if (suffix == "M" || suffix == "m")
          scale = 1024.0 * 1024;
        else if (suffix == "G" || suffix == "g")
          scale = 1024.0 * 1024 * 1024;
        else if (!suffix.empty())
          return "\"" + text + "\" is not a size in bytes";
        if (!(value * scale >= 1 && value * scale < 0x1p62)) return "\"" + text + "\" must be from 1 byte to 4 EiB";
        text = std::to_string(static_cast<int64_t>(value * scale));
        return "";
      },
      "");
}

enum class Kind { all_reduce, reduce_scatter, all_gather };

struct Collective {
  Kind kind;
  const char* name;
  double bus_factor;  // busbw / algbw for N ranks
};

// The value rank r holds at index i of its input: small integers, so every sum is exact.
float input_value(int rank, int64_t i) { return static_cast<float>((rank + 1) * (i % 13 + 1)); }

// One timed configuration, on every rank. Returns (median of the slowest rank's times,
// wrong values summed over ranks); both the same on every rank.
std::pair<double, int64_t> measure(Communicator& c, const Options& o, Kind kind, bool in_place, int64_t count) {
  const int world = c.world(), me = c.rank();
  const double w_sum = world * (world + 1) / 2.0;
  // count: all-reduce values, or each rank's share for reduce-scatter and all-gather.
  std::vector<float> send, recv;
  std::function<void()> fill, run;
  switch (kind) {
    case Kind::all_reduce:
      send.resize(count);
      fill = [&] {
        for (int64_t i = 0; i < count; ++i) send[i] = input_value(me, i);
      };
      run = [&] { c.all_reduce_sum(send.data(), count); };
      break;
    case Kind::reduce_scatter:
      send.resize(count * world);
      if (!in_place) recv.resize(count);
      fill = [&] {
        for (int64_t i = 0; i < count * world; ++i) send[i] = input_value(me, i);
      };
      run = [&] { c.reduce_scatter_sum(send.data(), in_place ? send.data() + me * count : recv.data(), count); };
      break;
    case Kind::all_gather:
      recv.resize(count * world);
      if (!in_place) send.resize(count);
      fill = [&] {
        float* mine = in_place ? recv.data() + me * count : send.data();
        for (int64_t i = 0; i < count; ++i) mine[i] = input_value(me, i);
      };
      run = [&] { c.all_gather(in_place ? recv.data() + me * count : send.data(), recv.data(), count); };
      break;
  }
  fill();
  for (int i = 0; i < o.warmup; ++i) run();
  std::vector<double> times(o.iters);
  for (int i = 0; i < o.iters; ++i) {
    c.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    times[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  c.all_reduce_host(times.data(), o.iters, ReduceOp::max);
  std::nth_element(times.begin(), times.begin() + o.iters / 2, times.end());
  const double median = times[o.iters / 2];

  fill();
  run();
  double wrong = 0;
  switch (kind) {
    case Kind::all_reduce:
      for (int64_t i = 0; i < count; ++i) wrong += send[i] != static_cast<float>(w_sum * (i % 13 + 1));
      break;
    case Kind::reduce_scatter: {
      const float* out = in_place ? send.data() + me * count : recv.data();
      for (int64_t i = 0; i < count; ++i) wrong += out[i] != static_cast<float>(w_sum * ((me * count + i) % 13 + 1));
      break;
    }
    case Kind::all_gather:
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < count; ++i) wrong += recv[r * count + i] != input_value(r, i);
      break;
  }
  c.all_reduce_host(&wrong, 1, ReduceOp::sum);
  return {median, static_cast<int64_t>(wrong)};
}

// The stated peak: what one rank's memcpy moves (bytes read + written per second) while every
// rank copies at once, the slowest rank's; one thread per rank, as the collectives run. On one
// machine a collective is memory copies, so this is the bandwidth of each rank's "link".
double copy_gbps_per_rank(Communicator& c) {
  constexpr size_t kBytes = size_t{64} << 20;  // far past the caches
  constexpr int kRepeats = 5;
  std::vector<char> a(kBytes, 1), b(kBytes, 0);
  std::vector<double> times(kRepeats);
  for (int i = 0; i < kRepeats; ++i) {
    c.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), kBytes);
    times[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::sort(times.begin(), times.end());
  double gbps = 2.0 * kBytes / times[kRepeats / 2] / 1e9;
  c.all_reduce_host(&gbps, 1, ReduceOp::min);
  return gbps;
}

void run_bench(Communicator& c, const Options& o, const std::string& what) {
  const int world = c.world();
  const bool lead = c.rank() == 0;
  const double copy_gbps = copy_gbps_per_rank(c);
  if (lead) {
    // Above the ranks' count, something else wants the cores too.
    const double load = tarn::app::load_average();
    std::printf("# tarn bench collectives: %s, %d ranks, on %s (%u hardware threads, load average %s at start)\n",
                what.c_str(), world, tarn::app::cpu_model_name().c_str(), std::thread::hardware_concurrency(),
                load < 0 ? "unknown" : tarn::app::csv_number(load, 2).c_str());
    std::printf("# time: median of %d iterations (after %d warm-up) of the slowest rank; algbw = size/time; "
                "busbw = algbw x 2(N-1)/N (all_reduce), x (N-1)/N (reduce_scatter, all_gather); GB/s = 1e9 B/s\n",
                o.iters, o.warmup);
    std::printf("# stated peak: memcpy bandwidth per rank with all ranks copying at once, %.1f GB/s (read + write, "
                "the slowest rank's, measured now)\n", copy_gbps);
  }
  std::vector<int64_t> sizes;
  for (int64_t s = o.min_bytes; s < o.max_bytes; s *= o.factor) sizes.push_back(s);
  sizes.push_back(o.max_bytes);
  const double n = world;
  const Collective collectives[] = {{Kind::all_reduce, "all_reduce_sum", 2 * (n - 1) / n},
                                    {Kind::reduce_scatter, "reduce_scatter_sum", (n - 1) / n},
                                    {Kind::all_gather, "all_gather", (n - 1) / n}};
  for (const Collective& coll : collectives) {
    if (lead) {
      // Each group of four columns is 36 characters wide, after 27 of size and count.
      std::printf("#\n# %-24s %24s %12s %23s\n", coll.name, "out-of-place", "", "in-place");
      std::printf("# %12s %12s %10s %8s %8s %6s %10s %8s %8s %6s\n", "size", "count", "time", "algbw", "busbw", "#wrong",
                  "time", "algbw", "busbw", "#wrong");
      std::printf("# %12s %12s %10s %8s %8s %6s %10s %8s %8s %6s\n", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "",
                  "(us)", "(GB/s)", "(GB/s)", "");
    }
    double last_busbw = 0;
    for (int64_t bytes : sizes) {
      // count: what the collective's count argument is (per rank for reduce-scatter and all-gather).
      const int64_t per_value = coll.kind == Kind::all_reduce ? 4 : 4 * static_cast<int64_t>(world);
      const int64_t count = bytes / per_value;
      if (count == 0) continue;
      const int64_t size = count * per_value;
      std::string row;
      char cell[128];
      std::snprintf(cell, sizeof cell, "  %12" PRId64 " %12" PRId64, size, count);
      row += cell;
      for (bool in_place : {false, true}) {
        if (coll.kind == Kind::all_reduce && !in_place) {
          std::snprintf(cell, sizeof cell, " %10s %8s %8s %6s", "-", "-", "-", "-");
        } else {
          const auto [time_s, wrong] = measure(c, o, coll.kind, in_place, count);
          const double algbw = size / time_s / 1e9, busbw = algbw * coll.bus_factor;
          last_busbw = busbw;
          std::snprintf(cell, sizeof cell, " %10.1f %8.2f %8.2f %6" PRId64, time_s * 1e6, algbw, busbw, wrong);
        }
        row += cell;
      }
      if (lead) std::printf("%s\n", row.c_str());
      std::fflush(stdout);
    }
    if (lead)
      std::printf("# %s at the largest size: in-place busbw %.2f GB/s = %.0f%% of the per-rank copy bandwidth\n", coll.name,
                  last_busbw, 100 * last_busbw / copy_gbps);
  }
}

}  // namespace

namespace tarn::app {
namespace {

int run(const Options& o) {
  namespace mpi = tarn::kernels::mpi;
  try {
    const mpi::LaunchInfo launch = mpi::launch_info();
    if (launch.launched) {
      const auto comm = mpi::world_communicator(o.timeout_s);
      run_bench(*comm, o, "mpi (" + launch.launcher + ", one process per rank)");
    } else {
      const auto ranks = tarn::kernels::cpu::thread_communicators(o.threads);
      std::vector<std::thread> threads;
      std::vector<std::string> errors(o.threads);
      for (int r = 0; r < o.threads; ++r)
        threads.emplace_back([&, r] {
          try {
            run_bench(*ranks[r], o, "cpu-threads (ranks are threads of one process)");
          } catch (const std::exception& e) {
            errors[r] = e.what();
          }
        });
      for (auto& t : threads) t.join();
      for (const auto& e : errors)
        if (!e.empty()) throw tarn::Error(e);
    }
  } catch (const mpi::CollectiveError& e) {
    std::fprintf(stderr, "tarn bench collectives: %s\n", e.what());
    mpi::abort(4);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tarn bench collectives: %s\n", e.what());
    if (mpi::initialized()) mpi::abort(1);
    return 1;
  }
  mpi::finalize();
  return 0;
}

}  // namespace

cli::Command add_bench_collectives(CLI::App& bench) {
  auto o = std::make_shared<Options>();
  CLI::App* app = bench.add_subcommand("collectives", kDescription);
  app->add_option("--min-bytes", o->min_bytes, "smallest S; K, M, G suffixes are powers of 1024")
      ->type_name("B")
      ->transform(bytes());
  app->add_option("--max-bytes", o->max_bytes, "largest S; K, M, G suffixes are powers of 1024")
      ->type_name("B")
      ->transform(bytes())
      ->default_str("256M");
  cli::add_integer(*app, "--factor", o->factor, 2, 1 << 30, "size step", "F");
  cli::add_integer(*app, "--iters", o->iters, 1, 1 << 30, "timed iterations per size");
  cli::add_integer(*app, "--warmup", o->warmup, 0, 1 << 30, "untimed iterations before them");
  cli::add_integer(*app, "--threads", o->threads, 1, 4096, "ranks when not launched by mpirun; ignored under mpirun");
  cli::add_real(*app, "--timeout", o->timeout_s, 0.001, 1e6, "MPI collective deadline in seconds", "S");
  app->callback([o] {  // run inside parsing: reported as the other usage errors are
    if (o->min_bytes > o->max_bytes) throw CLI::ValidationError("--min-bytes is above --max-bytes");
  });
  return {app, [o] { return run(*o); }};
}

}  // namespace tarn::app
