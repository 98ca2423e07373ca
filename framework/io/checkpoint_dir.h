#pragma once
// Checkpoint folders: a set of files (model.safetensors, optimizer state, trainer state, the
// resolved config) that must appear together or not at all, and survive a writer killed at any
// instant. A run folder holds them as step_<N>/:
//
//   runs/small/step_1200/model.safetensors
//                        ...                 files the trainer wrote
//                        MANIFEST.json       every file's name, size and CRC-32
//                        COMPLETE            written last; names MANIFEST.json's size and CRC-32
//   runs/small/best -> step_1200             symlink (a verified copy where symlinks fail)
//
// Writing (CheckpointWriter): files go into "step_N.tmp/", each fsynced; then MANIFEST.json; the
// folder is fsynced and renamed to "step_N" (atomic), the run folder fsynced, and COMPLETE
// written and fsynced last. A killed writer leaves either "step_N.tmp" (ignored, cleaned up by
// cleanup_incomplete_checkpoints) or, between rename and COMPLETE, "step_N" without COMPLETE
// (ignored by every reader). Earlier checkpoints are never touched.
//
// Reading (open_checkpoint): checks COMPLETE, MANIFEST.json against it, then every file's size
// and CRC-32, with messages such as
//   checkpoint runs/small/step_1200: model.safetensors is truncated (expected 37,748,736 bytes, found 4,096)
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/io/atomic_file.h"
#include "framework/io/safetensors.h"

namespace tarn {

inline constexpr const char* kManifestFile = "MANIFEST.json";
inline constexpr const char* kCompleteFile = "COMPLETE";

struct CheckpointFile {
  std::string name;  // relative to the checkpoint folder, no '/'
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

class CheckpointWriter {
 public:
  // Starts checkpoint folder `dir` (e.g. "runs/small/step_1200"); the parent must exist. A stale
  // "dir.tmp" from a killed writer is removed first.
  explicit CheckpointWriter(std::string dir);
  // Without commit(): removes "dir.tmp"; `dir` and other checkpoints are left as they were.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  void write_file(const std::string& name, std::string_view bytes);
  void write_safetensors(const std::string& name, const TensorList& tensors,
                         const SafetensorsMetadata& metadata = {});
  // For files produced piece by piece: open, write, then finish_file (fsyncs and records it).
  FileWriter open_file(const std::string& name);
  void finish_file(FileWriter& writer);

  // Free-form strings recorded in MANIFEST.json ("step", "val_loss", ...).
  void set_info(const std::string& key, const std::string& value) { info_[key] = value; }

  // Makes the checkpoint visible and complete (see the protocol above). An existing `dir` (a
  // re-save of the same step) is replaced.
  void commit();

  const std::string& dir() const { return dir_; }
  const std::string& tmp_dir() const { return tmp_; }
  const std::vector<CheckpointFile>& files() const { return files_; }

 private:
  void check_name(const std::string& name) const;

  std::string dir_, tmp_;
  std::vector<CheckpointFile> files_;
  std::map<std::string, std::string> info_;
  bool committed_ = false;
};

// For tests of the write protocol: called at each instant where a writer killed there must still
// leave the run loadable (after each file, after MANIFEST.json, after the rename, after
// COMPLETE, after an old folder is moved aside or removed), with the instant's name. A test's
// hook ends a child process at the instant it picks (SIGKILL), deterministically, where fixed
// delays would land wherever the machine's speed put them. nullptr (the default) = no hook.
using CheckpointCrashHook = void (*)(const std::string& instant);
void set_checkpoint_crash_hook(CheckpointCrashHook hook);

// A verified checkpoint.
struct Checkpoint {
  std::string dir;
  std::vector<CheckpointFile> files;  // as MANIFEST.json lists them
  std::map<std::string, std::string> info;
  bool has(std::string_view name) const;
  std::string path(std::string_view name) const;  // dir/name; throws when not in the manifest
};

// Verifies `dir` as described above; verify_checksums=false checks sizes only (fast).
Checkpoint open_checkpoint(const std::string& dir, bool verify_checksums = true);

// ---------------------------------------------------------------------------------------------
// Run folders

struct CheckpointEntry {
  int64_t step = 0;
  std::string dir;  // run_dir/step_N
};

std::string checkpoint_dir(const std::string& run_dir, int64_t step);  // run_dir/step_<step>

// Complete checkpoints (step_N folders holding COMPLETE), by increasing step. Unverified: use
// open_checkpoint or latest_valid_checkpoint before trusting the files.
std::vector<CheckpointEntry> list_checkpoints(const std::string& run_dir);

// The newest checkpoint that open_checkpoint accepts; each newer one it rejected is described in
// `rejected` (when given). nullopt when there is none.
std::optional<Checkpoint> latest_valid_checkpoint(const std::string& run_dir,
                                                  std::vector<std::string>* rejected = nullptr);

// Removes what killed writers leave in `run_dir`: "*.tmp" folders (checkpoints being written or
// pruned) and "*.tmp.<pid>" files of processes that no longer exist. A checkpoint moved aside to
// be replaced ("step_N.old.tmp") whose replacement never arrived is moved back instead. Must
// not run while another process writes checkpoints into the same run folder. Returns what it
// removed or restored.
std::vector<std::string> cleanup_incomplete_checkpoints(const std::string& run_dir);

// Points run_dir/best at step_<step> (which must be complete): an atomically replaced relative
// symlink, or, where the file system refuses symlinks, a copy written with CheckpointWriter.
void set_best_checkpoint(const std::string& run_dir, int64_t step);
// The step `best` points to (a symlink's target, or the step a copy was made from).
std::optional<int64_t> best_checkpoint_step(const std::string& run_dir);

// Keeps the newest `keep_last` (>= 1) complete checkpoints and the one `best` links to; removes
// the other complete ones and any incomplete step_N older than the newest complete one. Each is
// renamed to "*.tmp" before removal, so a kill mid-way never leaves a half-deleted checkpoint
// that looks complete. Returns the removed folders.
std::vector<std::string> prune_checkpoints(const std::string& run_dir, int keep_last);

}  // namespace tarn
