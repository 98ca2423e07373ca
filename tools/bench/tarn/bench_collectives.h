#pragma once
// `tarn bench collectives`: all-reduce, reduce-scatter and all-gather timed as nccl-tests times
// NCCL (algbw, busbw), every result checked; MPI ranks under mpirun, else threads of this
// process. argv[0] is the subcommand's name; `--help` lists the flags.

namespace tarn::app {

int bench_collectives(int argc, char** argv);

}  // namespace tarn::app
