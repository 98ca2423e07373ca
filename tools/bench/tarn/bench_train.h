#pragma once
// `tarn bench train RECIPE`: training tokens/s and peak memory (the allocator's live peak and
// the process's resident peak) against sequence length at a fixed token budget per batch,
// softmax against linear attention, on random token ids. argv[0] is the subcommand's name.

namespace tarn::app {

int bench_train(int argc, char** argv);

}  // namespace tarn::app
