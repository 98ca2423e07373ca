#pragma once
// `tarn bench attention`: forward and forward+backward time and peak memory of softmax
// attention (tarn's blocked kernel, and the dense N x N product PyTorch eager computes) against
// bidirectional, causal and cross linear attention, per feature map, over sequence lengths;
// the crossover N where linear attention wins. argv[0] is the subcommand's name.

namespace tarn::app {

int bench_attention(int argc, char** argv);

}  // namespace tarn::app
