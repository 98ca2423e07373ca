#include "framework/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>

#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "framework/io/utf8.h"
#include "kernels/enum_name.h"
#include "kernels/check.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; tarn writes tensor memory as it is");

namespace tarn {

// ---------------------------------------------------------------------------------------------
// Dtypes

namespace {
struct DtypeInfo {
  const char* name;
  int bits;
};
// Every dtype of the reference implementation (safetensors/src/tensor.rs, enum Dtype).
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 8},     {"F4", 4},       {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
    {"I8", 8},       {"F8_E5M2", 8},  {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
    {"U16", 16},     {"F16", 16},     {"BF16", 16},   {"I32", 32},    {"U32", 32},
    {"F32", 32},     {"C64", 64},     {"F64", 64},    {"I64", 64},    {"U64", 64},
};

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string offsets_str(const SafetensorsEntry& e) {
  return str_cat("[", e.begin, ", ", e.end, "]");
}

bool tarn_dtype(std::string_view name, DType* out) {
  if (name == "F32") return *out = DType::f32, true;
  if (name == "BF16") return *out = DType::bf16, true;
  if (name == "F16") return *out = DType::f16, true;
  return false;
}
}  // namespace

int safetensors_dtype_bits(std::string_view dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.name) return d.bits;
  return 0;
}

const char* safetensors_dtype_name(DType dtype) { return enum_name(dtype, {"F32", "BF16", "F16"}); }

const SafetensorsEntry* SafetensorsHeader::find(std::string_view name) const {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

const Tensor* SafetensorsFile::find(std::string_view name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& SafetensorsFile::at(std::string_view name) const {
  const Tensor* t = find(name);
  TARN_CHECK(t != nullptr, "safetensors: no tensor named \"", name, "\" (the file holds ", tensors.size(),
             " tensors)");
  return *t;
}

// ---------------------------------------------------------------------------------------------
// Writing

void write_safetensors(FileWriter& out, const TensorList& tensors, const SafetensorsMetadata& metadata,
                       std::string_view name) {
  const size_t n = tensors.size();
  // Names: unique, valid UTF-8 (they go into JSON), not the reserved key.
  {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].first < tensors[b].first; });
    for (size_t k = 0; k < n; ++k) {
      const std::string& nm = tensors[order[k]].first;
      TARN_CHECK(k == 0 || nm != tensors[order[k - 1]].first, name, ": tensor name \"", nm,
                 "\" appears twice (safetensors forbids duplicate keys)");
      TARN_CHECK(nm != "__metadata__", name, ": \"__metadata__\" is reserved and cannot name a tensor");
      TARN_CHECK(is_valid_utf8(nm), name, ": tensor name \"", nm,
                 "\" is not valid UTF-8");
      TARN_CHECK(tensors[order[k]].second.defined(), name, ": tensor \"", nm, "\" is undefined");
    }
    for (const auto& [k, v] : metadata)
      TARN_CHECK(is_valid_utf8(k) &&
                     is_valid_utf8(v),
                 name, ": __metadata__ entry \"", k, "\" is not valid UTF-8");
  }

  // Data layout: by decreasing element size, stable, so that every tensor starts at a multiple of
  // its element size (the data buffer itself starts 8-byte aligned).
  std::vector<size_t> layout(n);
  std::iota(layout.begin(), layout.end(), 0);
  std::stable_sort(layout.begin(), layout.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });
  std::vector<uint64_t> begin(n);
  uint64_t offset = 0;
  for (size_t i : layout) {
    begin[i] = offset;
    offset += tensors[i].second.nbytes();
  }

  // Header, compact like the reference writer's serde_json output.
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first_kv = true;
    for (const auto& [k, v] : metadata) {
      if (!first_kv) header += ',';
      first_kv = false;
      header += json::quote(k) + ":" + json::quote(v);
    }
    header += '}';
    first = false;
  }
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = tensors[i].second;
    if (!first) header += ',';
    first = false;
    header += json::quote(tensors[i].first);
    header += ":{\"dtype\":\"";
    header += safetensors_dtype_name(t.dtype());
    header += "\",\"shape\":[";
    for (int d = 0; d < t.dim(); ++d) header += (d ? "," : "") + std::to_string(t.shape()[d]);
    header += "],\"data_offsets\":[" + std::to_string(begin[i]) + "," +
              std::to_string(begin[i] + t.nbytes()) + "]}";
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  TARN_CHECK(header.size() <= kSafetensorsMaxHeader, name, ": the header would take ",
             with_commas(header.size()), " bytes, more than readers accept (",
             with_commas(kSafetensorsMaxHeader), ")");

  unsigned char size_le[8];
  for (int b = 0; b < 8; ++b) size_le[b] = static_cast<unsigned char>(uint64_t{header.size()} >> (8 * b));
  out.write(size_le, 8);
  out.write(header);
  for (size_t i : layout) {
    const Tensor& t = tensors[i].second;
    if (t.nbytes() == 0) continue;
    const Tensor host = t.to(Device::cpu());  // one tensor at a time: no second copy of the model
    out.write(host.data<char>(), host.nbytes());
  }
}

void save_safetensors(const std::string& path, const TensorList& tensors, const SafetensorsMetadata& metadata) {
  AtomicFile f(path);
  write_safetensors(f.out(), tensors, metadata, path);
  f.commit();
}

// ---------------------------------------------------------------------------------------------
// Reading

namespace {

class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TARN_CHECK(fd_ >= 0, path, ": cannot open: ", std::strerror(errno));
    struct stat st;
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw Error(str_cat(path, ": not a regular file"));
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  uint64_t size() const { return size_; }

  void read_at(uint64_t offset, void* dst, uint64_t n) const {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      const size_t chunk = n < (uint64_t{1} << 30) ? static_cast<size_t>(n) : (size_t{1} << 30);
      const ssize_t r = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      TARN_CHECK(r >= 0, path_, ": read failed at byte ", with_commas(offset), ": ", std::strerror(errno));
      TARN_CHECK(r > 0, path_, ": file is truncated (it ended at byte ", with_commas(offset),
                 " while reading; was it changed while being read?)");
      p += r;
      offset += static_cast<uint64_t>(r);
      n -= static_cast<uint64_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Every rule of the format; `strict` adds the writer conventions check_safetensors promises.
SafetensorsHeader read_header(const InputFile& file, const std::string& path, bool strict) {
  const uint64_t size = file.size();
  TARN_CHECK(size >= 8, path, ": file is truncated or not a safetensors file (", size,
             " bytes; the header size field alone takes 8)");
  unsigned char size_le[8];
  file.read_at(0, size_le, 8);
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | size_le[b];
  TARN_CHECK(n <= kSafetensorsMaxHeader, path, ": header size ", with_commas(n), " exceeds the limit of ",
             with_commas(kSafetensorsMaxHeader), " bytes (not a safetensors file, or a corrupted one)");
  TARN_CHECK(8 + n <= size, path, ": file is truncated (expected at least ", with_commas(8 + n),
             " bytes for its ", with_commas(n), "-byte header, found ", with_commas(size), ")");
  TARN_CHECK(n > 0, path, ": header size is 0 (the header must hold at least \"{}\")");
  if (strict)
    TARN_CHECK(n % 8 == 0, path, ": header size ", n,
               " is not a multiple of 8 (writers pad the header with spaces so tensor data is aligned)");

  std::string text(n, '\0');
  file.read_at(8, text.data(), n);
  TARN_CHECK(text[0] == '{', path, ": header does not begin with '{' (found byte ",
             static_cast<int>(static_cast<unsigned char>(text[0])), " at byte 8; not a safetensors file?)");
  const json::Json root = json::parse(text, path + ": header", 8);
  if (strict) {
    const size_t close = text.rfind('}');
    for (size_t k = close + 1; k < text.size(); ++k)
      TARN_CHECK(text[k] == ' ', path, ": header padding at byte ", 8 + k,
                 " is not a space (0x20); only spaces may follow the closing '}'");
  }

  SafetensorsHeader h;
  h.header_bytes = n;
  h.file_bytes = size;
  for (const auto& [key, value] : json::members(root, "header")) {
    if (key == "__metadata__") {
      for (const auto& [k, v] : json::members(value, path + ": __metadata__"))
        h.metadata[k] = json::as_string(v, str_cat(path, ": __metadata__ \"", k, "\" (values must be strings)"));
      continue;
    }
    const std::string what = str_cat(path, ": tensor \"", key, "\"");
    SafetensorsEntry e;
    e.name = key;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    for (const auto& [field, fv] : json::members(value, what)) {
      if (field == "dtype") {
        e.dtype = json::as_string(fv, what + ": dtype");
        TARN_CHECK(safetensors_dtype_bits(e.dtype) > 0, what, ": unknown dtype \"", e.dtype, "\"");
        has_dtype = true;
      } else if (field == "shape") {
        const auto& dims = json::items(fv, what + ": shape");
        for (size_t d = 0; d < dims.size(); ++d) {
          const uint64_t x = json::as_u64(dims[d], str_cat(what, ": shape[", d, "]"));
          TARN_CHECK(x <= static_cast<uint64_t>(INT64_MAX), what, ": shape[", d, "] = ", x, " is too large");
          e.shape.push_back(static_cast<int64_t>(x));
        }
        has_shape = true;
      } else if (field == "data_offsets") {
        const auto& off = json::items(fv, what + ": data_offsets");
        TARN_CHECK(off.size() == 2, what, ": data_offsets must be [BEGIN, END], got ", off.size(), " numbers");
        e.begin = json::as_u64(off[0], what + ": data_offsets[0]");
        e.end = json::as_u64(off[1], what + ": data_offsets[1]");
        TARN_CHECK(e.begin <= e.end, what, ": data_offsets ", offsets_str(e), " end before they begin");
        has_offsets = true;
      } else {
        TARN_CHECK(!strict, what, ": unknown field \"", field, "\" (expected dtype, shape, data_offsets)");
      }
    }
    TARN_CHECK(has_dtype, what, ": missing \"dtype\"");
    TARN_CHECK(has_shape, what, ": missing \"shape\"");
    TARN_CHECK(has_offsets, what, ": missing \"data_offsets\"");

    const int bits = safetensors_dtype_bits(e.dtype);
    uint64_t numel = 1, nbits = 0;
    bool overflow = false;
    for (int64_t d : e.shape) overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(bits), &nbits);
    TARN_CHECK(!overflow, what, ": shape ", shape_str(e.shape), " overflows 64-bit byte counts");
    TARN_CHECK(nbits % 8 == 0, what, ": ", numel, " elements of ", e.dtype, " (", bits,
               " bits each) do not fill whole bytes");
    TARN_CHECK(e.nbytes() == nbits / 8, what, ": shape ", shape_str(e.shape), " of ", e.dtype, " needs ",
               with_commas(nbits / 8), " bytes but data_offsets ", offsets_str(e), " hold ",
               with_commas(e.nbytes()));
    if (strict && bits >= 8 && e.nbytes() > 0)  // empty tensors have no data to align
      TARN_CHECK(e.begin % (bits / 8) == 0, what, ": data at offset ", e.begin, " is not aligned to its ",
                 bits / 8, "-byte elements");
    h.entries.push_back(std::move(e));
  }

  // The byte ranges, sorted, must tile [0, data size) exactly.
  std::vector<size_t> order(h.entries.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = h.entries[a];
    const auto& y = h.entries[b];
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  uint64_t covered = 0;
  const SafetensorsEntry* prev = nullptr;
  for (size_t i : order) {
    const SafetensorsEntry& e = h.entries[i];
    TARN_CHECK(e.begin <= covered, path, ": bytes [", covered, ", ", e.begin,
               ") of the data buffer belong to no tensor (a gap ",
               prev ? str_cat("after tensor \"", prev->name, "\"") : std::string("at the start"),
               ", before tensor \"", e.name, "\"; the buffer must be fully indexed)");
    TARN_CHECK(e.begin == covered, path, ": tensor \"", e.name, "\" (data_offsets ", offsets_str(e),
               ") overlaps tensor \"", prev->name, "\" (data_offsets ", offsets_str(*prev), ")");
    if (e.end > covered || !prev) prev = &e;
    covered = e.end;
  }
  const uint64_t data_bytes = size - 8 - n;
  if (covered > data_bytes) {
    const SafetensorsEntry* cut = nullptr;
    for (size_t i : order)
      if (h.entries[i].end > data_bytes) {
        cut = &h.entries[i];
        break;
      }
    throw Error(str_cat(path, ": file is truncated (expected ", with_commas(8 + n + covered), " bytes, found ",
                        with_commas(size), "); tensor \"", cut->name, "\" is cut off"));
  }
  TARN_CHECK(covered == data_bytes, path, ": ", with_commas(data_bytes - covered),
             " bytes follow the last tensor's data (expected ", with_commas(8 + n + covered),
             " bytes, found ", with_commas(size), "; trailing bytes are not allowed)");
  return h;
}

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  InputFile file(path);
  return read_header(file, path, /*strict=*/false);
}

SafetensorsHeader check_safetensors(const std::string& path) {
  InputFile file(path);
  return read_header(file, path, /*strict=*/true);
}

SafetensorsFile load_safetensors(const std::string& path, const SafetensorsLoadOptions& options) {
  InputFile file(path);
  const SafetensorsHeader h = read_header(file, path, /*strict=*/false);
  SafetensorsFile out;
  out.metadata = h.metadata;
  for (const SafetensorsEntry& e : h.entries) {
    DType dtype;
    if (!tarn_dtype(e.dtype, &dtype)) {
      TARN_CHECK(options.skip_unsupported_dtypes, path, ": tensor \"", e.name, "\" has dtype ", e.dtype,
                 ", which tarn tensors cannot hold (F32, BF16, F16)");
      out.skipped.push_back(e.name);
      continue;
    }
    TARN_CHECK(e.shape.size() <= static_cast<size_t>(Shape::kMaxDims), path, ": tensor \"", e.name,
               "\" has ", e.shape.size(), " dimensions; tarn tensors hold at most ", Shape::kMaxDims);
    Tensor t = Tensor::empty(Shape(e.shape), Device::cpu(), dtype);
    if (e.nbytes() > 0) file.read_at(h.data_start() + e.begin, t.data<char>(), e.nbytes());
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace tarn
