#pragma once
// `tarn bench decode RECIPE|CHECKPOINT`: per-token greedy generation latency and decoding-state
// memory against position, linear attention's recurrent state (constant per token) against
// softmax attention's key/value cache (growing with the position). argv[0] is the subcommand's name.

namespace tarn::app {

int bench_decode(int argc, char** argv);

}  // namespace tarn::app
