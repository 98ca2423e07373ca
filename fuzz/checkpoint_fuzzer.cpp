// Fuzzes what reads a checkpoint folder's bookkeeping (framework/io/checkpoint_dir.cpp,
// framework/io/json.cpp, app/progress.cpp). Each input is used three ways:
//   1. as MANIFEST.json of a folder whose COMPLETE records its true size and CRC-32 (so the
//      manifest's parser is reached, not just the checksum), then open_checkpoint;
//   2. as COMPLETE of a folder with a valid manifest, then open_checkpoint;
//   3. as progress.json, parse_progress; a Progress that parses must survive
//      parse_progress(progress_json(p)) unchanged, as every resume relies on.
// The folders are written once by CheckpointWriter (progress.json and notes.txt); their files
// are the ones a fuzzed manifest can name.
//
// Expected outcomes: a Checkpoint / Progress, or tarn::Error naming the file and the problem.
// Anything else (a crash, a sanitizer report, another exception, a hang) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "framework/io/checkpoint_dir.h"
#include "framework/io/crc32.h"
#include "fuzz/fuzz_files.h"
#include "kernels/check.h"
#include "tests/app/progress_sample.h"
#include "app/progress.h"

namespace {

namespace fs = std::filesystem;

struct Fixture {
  std::string with_input_manifest;  // case 1: MANIFEST.json is the input
  std::string with_input_complete;  // case 2: COMPLETE is the input
};

Fixture make_fixture() {
  const std::string root = tarn::fuzz::scratch_dir();
  Fixture f{root + "/step_1", root + "/step_2"};
  for (const std::string& dir : {f.with_input_manifest, f.with_input_complete}) {
    tarn::CheckpointWriter w(dir);
    w.write_file("progress.json", tarn::json::dump(tarn::app::progress_json(tarn::testing::sample_progress()), 2) + "\n");
    w.write_file("notes.txt", "fuzz fixture\n");
    w.set_info("step", "1200");
    w.commit();
  }
  if (const std::string out = tarn::fuzz::seeds_out_dir(); !out.empty()) {
    fs::create_directories(out);
    for (const char* name : {"MANIFEST.json", "COMPLETE", "progress.json"})
      fs::copy_file(f.with_input_manifest + "/" + name, out + "/" + name, fs::copy_options::overwrite_existing);
  }
  return f;
}

// Plain writes, not write_file_atomic: its fsyncs would cost most of the fuzzer's time.
void open_with_manifest(const std::string& dir, const std::string& manifest) {
  tarn::fuzz::write_scratch("step_1/MANIFEST.json", manifest);
  const std::string complete = "{\"manifest_bytes\":" + std::to_string(manifest.size()) + ",\"manifest_crc32\":\"" +
                               tarn::crc32_hex(tarn::crc32(manifest.data(), manifest.size())) + "\"}\n";
  tarn::fuzz::write_scratch("step_1/COMPLETE", complete);
  tarn::open_checkpoint(dir);
}

void parse_progress_round_trip(const std::string& text) {
  const tarn::app::Progress p = tarn::app::parse_progress(text, "progress.json");
  const std::string written = tarn::json::dump(tarn::app::progress_json(p), 2);
  try {
    const tarn::app::Progress q = tarn::app::parse_progress(written, "progress.json (written back)");
    if (tarn::json::dump(tarn::app::progress_json(q)) != tarn::json::dump(tarn::app::progress_json(p))) {
      std::fprintf(stderr, "progress.json round trip changed it:\n%s\n", written.c_str());
      std::abort();
    }
  } catch (const tarn::Error& e) {
    std::fprintf(stderr, "progress_json wrote what parse_progress rejects: %s\n%s\n", e.what(), written.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fixture = make_fixture();
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    open_with_manifest(fixture.with_input_manifest, input);
  } catch (const tarn::Error&) {
  }
  try {
    tarn::fuzz::write_scratch("step_2/COMPLETE", input);
    tarn::open_checkpoint(fixture.with_input_complete);
  } catch (const tarn::Error&) {
  }
  try {
    parse_progress_round_trip(input);
  } catch (const tarn::Error&) {
  }
  return 0;
}
