#pragma once
// The safetensors format (huggingface/safetensors, README "Format"), read and written exactly so
// that HuggingFace tools load what `tarn export` writes and tarn loads what they write:
//
//   bytes [0, 8)        N, the header size, unsigned 64-bit little-endian
//   bytes [8, 8 + N)    the header: UTF-8 JSON that begins with '{' and may be padded at the end
//                       with spaces (0x20); writers pad N to a multiple of 8 so data is aligned
//                       {"__metadata__": {"k": "v", ...},            (optional, strings only)
//                        "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]},
//                        ...}
//   bytes [8 + N, end)  the data buffer; BEGIN/END are relative to its start, END one past
//
// Rules (each enforced on load, with a message naming the file and the problem): no duplicate
// keys; known dtype; shape of non-negative integers ([] is a scalar, 0 extents are allowed);
// END - BEGIN == numel * element size; the ranges, sorted, cover the buffer exactly, without
// gaps or overlaps, and end where the file ends; the header at most 100,000,000 bytes (the
// reference implementation's limit). Data is little-endian, row-major.
//
// The JSON may list tensors in any order (older writers sorted by name, current ones by offset);
// tarn writes them in the caller's order and lays the data out by decreasing element size
// (stable), as the reference writer does, so that every tensor is aligned for its dtype.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace tarn {

class FileWriter;

using TensorList = std::vector<std::pair<std::string, Tensor>>;
using SafetensorsMetadata = std::map<std::string, std::string>;

constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// One tensor as the header describes it.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;            // as in the file: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets, relative to the data buffer
  uint64_t nbytes() const { return end - begin; }
};

// A parsed and validated header.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in header (JSON) order
  SafetensorsMetadata metadata;
  uint64_t header_bytes = 0;  // N
  uint64_t file_bytes = 0;
  uint64_t data_start() const { return 8 + header_bytes; }
  const SafetensorsEntry* find(std::string_view name) const;
};

// What load_safetensors returns: the tensors (CPU) in header order, and __metadata__.
struct SafetensorsFile {
  TensorList tensors;
  SafetensorsMetadata metadata;
  std::vector<std::string> skipped;  // tensors whose dtype tarn cannot hold (with skip option)
  const Tensor* find(std::string_view name) const;
  const Tensor& at(std::string_view name) const;  // throws naming the tensor when absent
};

// Bits per element of a safetensors dtype name ("F32" -> 32, "F4" -> 4), 0 when unknown.
int safetensors_dtype_bits(std::string_view dtype);
const char* safetensors_dtype_name(DType dtype);  // DType::bf16 -> "BF16"

// Writes `path` atomically (temp file, fsync, rename). Tensors may live on any device; names
// must be unique, UTF-8 and not "__metadata__". __metadata__ is written only when non-empty.
void save_safetensors(const std::string& path, const TensorList& tensors,
                      const SafetensorsMetadata& metadata = {});

// The same bytes into an open writer (checkpoint folders use it). `name` is for messages.
void write_safetensors(FileWriter& out, const TensorList& tensors, const SafetensorsMetadata& metadata,
                       std::string_view name);

// Reads and validates the header against the file (every rule above; data is not read).
SafetensorsHeader read_safetensors_header(const std::string& path);

struct SafetensorsLoadOptions {
  // Tensors whose dtype tarn's Tensor cannot hold (anything but F32, BF16, F16) are an error by
  // default; with this set they are left out and listed in SafetensorsFile::skipped.
  bool skip_unsupported_dtypes = false;
};
SafetensorsFile load_safetensors(const std::string& path, const SafetensorsLoadOptions& options = {});

// Validates `path` against the format (as read_safetensors_header does) and, in addition,
// against what every current writer guarantees and tarn export promises: N a multiple of 8,
// the header's padding only spaces after the closing '}', and each tensor's data aligned to its
// element size. Throws tarn::Error naming the file and the first problem; returns the header.
SafetensorsHeader check_safetensors(const std::string& path);

}  // namespace tarn
