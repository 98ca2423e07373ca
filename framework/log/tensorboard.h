#pragma once
// Scalars in TensorBoard's event-file format, written natively: TFRecord framing (a length and
// the data, each followed by its masked CRC-32C) around `Event` protocol-buffer messages, whose
// `Summary` holds one `simple_value` per tag. TensorBoard, tensorboardX and TensorFlow's
// summary iterators read these files; the field numbers are those of TensorFlow's
// event.proto and summary.proto.
//
// A run folder may be written by several processes in turn (a run, then its resumes). Each
// writes its own file, events.out.tfevents.<unix time>.<host>.<pid>.tarn, which TensorBoard
// reads as one run. A run resumed from step S first rewinds the files it finds there: events
// after step S (written after the checkpoint it resumes from, and about to be trained again)
// are dropped, so no step appears twice. Files of other writers are never touched.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/io/atomic_file.h"

namespace tarn {

// CRC-32C (Castagnoli), as TFRecord uses it, and TFRecord's mask of it (rotated right by 15
// bits plus 0xa282ead8), which keeps a CRC of data that holds CRCs from being trivial.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// One record: the uint64 length, its masked CRC, the data, the data's masked CRC (little-endian).
std::string tfrecord(std::string_view data);

// An Event message: wall time in seconds since the epoch, step, and either the file version
// ("brain.Event:2", the first record of every file) or scalars as one Summary.
std::string event_file_version(double wall_time);
std::string event_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values);

// What a rewind found in one file.
struct EventFileRewind {
  std::string path;
  int64_t kept = 0, dropped = 0;
  bool damaged_tail = false;  // a partial or corrupt record at the end (a writer killed mid-write)
};

// Drops, in every tarn event file in `dir` (name ending ".tarn"), the events whose step is
// after `last_kept_step`, and a damaged tail; files that change are rewritten atomically.
// Returns what it did for each file it changed.
std::vector<EventFileRewind> rewind_event_files(const std::string& dir, int64_t last_kept_step);

// The tarn event files in `dir`, sorted by name (= by creation time).
std::vector<std::string> list_event_files(const std::string& dir);

class TensorBoardWriter {
 public:
  // Creates `dir` if needed, rewinds its event files to `start_step` (rewind_event_files) and
  // starts a new file with the version record. Errors name the folder or file and errno.
  TensorBoardWriter(const std::string& dir, int64_t start_step);

  // One event holding every (tag, value) pair at `step`; written through at once, so that a
  // TensorBoard watching the folder sees it and a killed run loses nothing written before.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  const std::string& path() const { return out_.path(); }
  const std::vector<EventFileRewind>& rewound() const { return rewound_; }

 private:
  FileWriter out_;
  std::vector<EventFileRewind> rewound_;
};

}  // namespace tarn
