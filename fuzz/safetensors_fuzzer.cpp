// Fuzzes the safetensors reader (framework/io/safetensors.cpp): the input is a whole .safetensors
// file, read by check_safetensors (the format plus the writer conventions) and load_safetensors
// (header, then every tensor's data into a Tensor), each through a path as the CLI does.
//
// Expected outcomes: the tensors, or tarn::Error naming the file and the problem. Anything else
// (a crash, a sanitizer report, another exception, an allocation beyond the file's size) is a
// finding.
#include <cstdint>

#include "framework/io/safetensors.h"
#include "fuzz/fuzz_files.h"
#include "kernels/check.h"

// With TARN_FUZZ_WRITE_SEEDS set: the seeds, written by save_safetensors (every dtype tarn
// holds, a scalar, an empty tensor, metadata).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string out = tarn::fuzz::seeds_out_dir();
  if (out.empty()) return 0;
  using tarn::Shape;
  using tarn::Tensor;
  const tarn::Device cpu = tarn::Device::cpu();
  Tensor bias = Tensor::empty(Shape{3}, cpu, tarn::DType::bf16);
  for (int i = 0; i < 3; ++i) bias.data<uint16_t>()[i] = 0x3F80;  // bf16 1.0
  Tensor scale = Tensor::empty(Shape{}, cpu, tarn::DType::f16);
  scale.data<uint16_t>()[0] = 0x4000;  // f16 2.0
  tarn::save_safetensors(out + "/small.safetensors",
                         {{"encoder.weight", Tensor::full(Shape{2, 3}, 0.5f, cpu)},
                          {"encoder.bias", bias},
                          {"scale", scale},
                          {"empty", Tensor::zeros(Shape{0, 3}, cpu)}},
                         {{"format", "pt"}});
  tarn::save_safetensors(out + "/no_metadata.safetensors", {{"w", Tensor::full(Shape{4}, 1.0f, cpu)}});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tarn::fuzz::write_scratch("model.safetensors", data, size);
  try {
    tarn::check_safetensors(path);
  } catch (const tarn::Error&) {
    // Not as a writer would lay it out; the lenient reader below may still take it.
  }
  try {
    tarn::SafetensorsLoadOptions skip;
    skip.skip_unsupported_dtypes = true;
    tarn::load_safetensors(path, skip);
    tarn::load_safetensors(path);
  } catch (const tarn::Error&) {
  }
  return 0;
}
