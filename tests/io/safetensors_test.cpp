// safetensors: round trips, the exact byte layout, files written by hand as another tool would,
// and every way a file can be broken, each rejected with a message naming the file and problem.
#include "framework/io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "tests/io/io_test_util.h"

namespace tarn {
namespace {

using testing::ScratchDir;

// A tensor of `dtype` whose bytes are a recognisable pattern (seeded by `seed`).
Tensor patterned(const Shape& shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(shape, Device::cpu(), dtype);
  auto* p = t.data<unsigned char>();
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(seed * 31 + i * 7 + 3);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && (a.nbytes() == 0 || std::memcmp(a.data<char>(), b.data<char>(), a.nbytes()) == 0);
}

// A safetensors file assembled from a header text and data bytes, exactly as given.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string s;
  testing::append_u64_le(s, header.size());
  return s + header + data;
}

std::string padded(std::string header) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

TEST(Safetensors, RoundTripKeepsNamesOrderDtypesShapesAndBytes) {
  ScratchDir dir;
  const TensorList tensors = {
      {"model.shared.weight", patterned({5, 3}, DType::f32, 1)},
      {"odd.bf16", patterned({7}, DType::bf16, 2)},  // 14 bytes: would misalign what follows
      {"scalar", patterned({}, DType::f32, 3)},
      {"empty", patterned({0}, DType::f32, 4)},
      {"empty.3d", patterned({3, 0, 2}, DType::bf16, 5)},
      {"half", patterned({3, 3}, DType::f16, 6)},
      {"rank4", patterned({2, 1, 3, 2}, DType::f32, 7)},
      {"name with \"quotes\" and \xCF\x80", patterned({2}, DType::f32, 8)},
  };
  const SafetensorsMetadata meta = {{"format", "pt"}, {"tarn.step", "1200"}, {"note", "a \"quoted\"\nline"}};
  const std::string path = dir / "model.safetensors";
  save_safetensors(path, tensors, meta);

  const SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].first);
    EXPECT_EQ(f.tensors[i].first, tensors[i].first);
    EXPECT_EQ(f.tensors[i].second.dtype(), tensors[i].second.dtype());
    EXPECT_EQ(f.tensors[i].second.shape(), tensors[i].second.shape());
    EXPECT_TRUE(same_bytes(f.tensors[i].second, tensors[i].second));
  }
  EXPECT_EQ(f.at("scalar").dim(), 0);
  EXPECT_EQ(f.at("scalar").numel(), 1);
  EXPECT_ERROR_CONTAINS(f.at("nope"), "no tensor named \"nope\"");
  // What tarn writes passes the strict check, and no temporary is left behind.
  const SafetensorsHeader h = check_safetensors(path);
  EXPECT_EQ(h.entries.size(), tensors.size());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST(Safetensors, LayoutIsLittleEndianSizeThenSpacePaddedHeaderThenAlignedData) {
  ScratchDir dir;
  const std::string path = dir / "x.safetensors";
  Tensor a = Tensor::from_vector({1.0f, 2.0f, 3.0f}, {3});
  Tensor b = patterned({3}, DType::bf16, 9);
  Tensor c = Tensor::from_vector({-1.5f}, {1});
  save_safetensors(path, {{"b", b}, {"a", a}, {"c", c}}, {{"k", "v"}});

  const std::string bytes = testing::read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  const uint64_t n = testing::u64_le(bytes, 0);
  EXPECT_EQ(n % 8, 0u) << "header size " << n;
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  const size_t close = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces";
  EXPECT_LT(header.size() - close - 1, 8u) << "no more padding than alignment needs";
  // __metadata__ first, then tensors in the caller's order.
  EXPECT_EQ(header.substr(0, close + 1),
            "{\"__metadata__\":{\"k\":\"v\"},"
            "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
            "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}");
  // Data: F32 first (larger elements first keeps every tensor aligned), little-endian floats.
  ASSERT_EQ(bytes.size(), 8 + n + 22);
  const char* data = bytes.data() + 8 + n;
  const unsigned char one_le[4] = {0x00, 0x00, 0x80, 0x3F};  // 1.0f
  EXPECT_EQ(std::memcmp(data, one_le, 4), 0);
  float v[3];
  std::memcpy(v, data, 12);
  EXPECT_EQ(v[2], 3.0f);
  EXPECT_EQ(std::memcmp(data + 16, b.data<char>(), 6), 0);
}

TEST(Safetensors, EmptyFileMatchesReferenceBytes) {
  // The reference implementation's own test: no tensors, no metadata -> "{}" padded to 8.
  ScratchDir dir;
  save_safetensors(dir / "e.safetensors", {});
  const std::string expect = std::string("\x08\0\0\0\0\0\0\0{}      ", 16);
  EXPECT_EQ(testing::read_bytes(dir / "e.safetensors"), expect);
  EXPECT_TRUE(load_safetensors(dir / "e.safetensors").tensors.empty());
  // And with metadata {"framework": "pt"}: 40-byte header.
  save_safetensors(dir / "m.safetensors", {}, {{"framework", "pt"}});
  const std::string m = testing::read_bytes(dir / "m.safetensors");
  EXPECT_EQ(testing::u64_le(m, 0), 40u);
  EXPECT_EQ(m.substr(8), "{\"__metadata__\":{\"framework\":\"pt\"}}     ");
}

TEST(Safetensors, FileWrittenByHandByAnotherToolLoads) {
  // As another writer might produce it: tensors listed out of offset order, __metadata__ last,
  // whitespace inside the JSON, escapes in a name, a scalar, an empty tensor, BF16 and F16 data.
  const std::string header = padded(
      "{\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]},\n"
      " \"a\\u002eweight\": {\"data_offsets\": [0, 8], \"shape\": [2, 2], \"dtype\": \"BF16\"},\n"
      " \"zero\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [18, 18]},\n"
      " \"s\": {\"dtype\": \"F16\", \"shape\": [], \"data_offsets\": [16, 18]},\n"
      " \"__metadata__\": {\"format\": \"pt\", \"source\": \"hand\"}}");
  std::string data;
  for (unsigned char c : {0x80, 0x3F, 0x00, 0x40, 0x40, 0x40, 0x80, 0xBF}) data += static_cast<char>(c);  // bf16 1, 2, 3, -1
  for (unsigned char c : {0x00, 0x00, 0x20, 0x41, 0x00, 0x00, 0x48, 0xC2}) data += static_cast<char>(c);  // f32 10, -50
  for (unsigned char c : {0x00, 0x3C}) data += static_cast<char>(c);  // f16 1.0
  ScratchDir dir;
  const std::string path = dir / "hand.safetensors";
  testing::write_bytes(path, raw_file(header, data));

  const SafetensorsFile f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors[0].first, "b");  // header order
  EXPECT_EQ(f.tensors[1].first, "a.weight");
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("source"), "hand");
  EXPECT_EQ(f.at("b").to_vector(), (std::vector<float>{10.0f, -50.0f}));
  const Tensor& a = f.at("a.weight");
  EXPECT_EQ(a.dtype(), DType::bf16);
  EXPECT_EQ(a.shape(), Shape({2, 2}));
  EXPECT_EQ(a.data<uint16_t>()[0], 0x3F80);
  EXPECT_EQ(a.data<uint16_t>()[3], 0xBF80);
  EXPECT_EQ(f.at("s").dtype(), DType::f16);
  EXPECT_EQ(f.at("s").dim(), 0);
  EXPECT_EQ(f.at("s").data<uint16_t>()[0], 0x3C00);
  EXPECT_EQ(f.at("zero").shape(), Shape({0, 3}));
  // The strict check accepts it too: N is a multiple of 8, padding is spaces, data aligned.
  EXPECT_NO_THROW(check_safetensors(path));
}

TEST(Safetensors, UnalignedButValidFilesLoadAndFailOnlyTheStrictCheck) {
  ScratchDir dir;
  const std::string data(8, '\0');
  // N = 62: not a multiple of 8 (older writers did not pad).
  const std::string h1 = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  testing::write_bytes(dir / "u.safetensors", raw_file(h1, data));
  EXPECT_EQ(load_safetensors(dir / "u.safetensors").tensors.size(), 1u);
  EXPECT_ERROR_CONTAINS(check_safetensors(dir / "u.safetensors"), "is not a multiple of 8");
  // Padded with newlines instead of spaces: valid JSON whitespace, not what the spec describes.
  std::string h2 = h1;
  h2.append((8 - h2.size() % 8) % 8, '\n');
  testing::write_bytes(dir / "nl.safetensors", raw_file(h2, data));
  EXPECT_NO_THROW(load_safetensors(dir / "nl.safetensors"));
  EXPECT_ERROR_CONTAINS(check_safetensors(dir / "nl.safetensors"), "is not a space (0x20)");
  // An F32 tensor at an odd offset.
  const std::string h3 = padded(
      "{\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1,5]}}");
  testing::write_bytes(dir / "odd.safetensors", raw_file(h3, std::string(5, '\0')));
  EXPECT_NO_THROW(read_safetensors_header(dir / "odd.safetensors"));
  EXPECT_ERROR_CONTAINS(check_safetensors(dir / "odd.safetensors"), "tensor \"w\": data at offset 1 is not aligned");
  // Unknown fields: tolerated on load (as the reference reader does), rejected by the check.
  const std::string h4 = padded("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"extra\":1}}");
  testing::write_bytes(dir / "x.safetensors", raw_file(h4, data));
  EXPECT_NO_THROW(load_safetensors(dir / "x.safetensors"));
  EXPECT_ERROR_CONTAINS(check_safetensors(dir / "x.safetensors"), "unknown field \"extra\"");
}

TEST(Safetensors, OtherDtypesAreValidButNotLoadableAsTarnTensors) {
  ScratchDir dir;
  const std::string path = dir / "ids.safetensors";
  const std::string header = padded(
      "{\"position_ids\":{\"dtype\":\"I64\",\"shape\":[1,3],\"data_offsets\":[0,24]},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[24,28]},"
      "\"q\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[28,30]}}");
  testing::write_bytes(path, raw_file(header, std::string(30, '\0')));
  EXPECT_NO_THROW(check_safetensors(path));
  EXPECT_ERROR_CONTAINS(load_safetensors(path),
                        path + ": tensor \"position_ids\" has dtype I64, which tarn tensors cannot hold");
  SafetensorsLoadOptions skip;
  skip.skip_unsupported_dtypes = true;
  const SafetensorsFile f = load_safetensors(path, skip);
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].first, "w");
  EXPECT_EQ(f.skipped, (std::vector<std::string>{"position_ids", "q"}));
  EXPECT_EQ(safetensors_dtype_bits("F8_E4M3"), 8);
  EXPECT_EQ(safetensors_dtype_bits("C64"), 64);
  EXPECT_EQ(safetensors_dtype_bits("f32"), 0);
}

struct Corruption {
  const char* name;
  std::function<std::string()> bytes;  // the whole file
  const char* expected;                // part of the message (after the path)
};

std::string good_header() {
  return padded("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}");
}

TEST(Safetensors, EveryCorruptionIsRejectedWithAMessageNamingFileAndProblem) {
  const std::string data24(24, '\x01');
  auto with_header = [&](std::string h, std::string data) { return [h, data] { return raw_file(padded(h), data); }; };
  const std::vector<Corruption> cases = {
      {"shorter than the size field", [] { return std::string("\x10\0\0", 3); },
       "file is truncated or not a safetensors file (3 bytes"},
      {"header size beyond the file",
       [] {
         std::string s;
         testing::append_u64_le(s, 4096);
         return s + "{}";
       },
       "file is truncated (expected at least 4,104 bytes for its 4,096-byte header, found 10)"},
      {"header size absurd",
       [] {
         std::string s;
         testing::append_u64_le(s, 0xFFFFFFFFFFFFull);
         return s + "{}";
       },
       "exceeds the limit of 100,000,000 bytes"},
      {"header size zero",
       [] {
         std::string s;
         testing::append_u64_le(s, 0);
         return s;
       },
       "header size is 0"},
      {"truncated data", [&] { return raw_file(good_header(), data24).substr(0, 8 + good_header().size() + 10); },
       "file is truncated (expected 96 bytes, found 82); tensor \"w\" is cut off"},
      {"trailing bytes", [&] { return raw_file(good_header(), data24 + "xyz"); },
       "3 bytes follow the last tensor's data (expected 96 bytes, found 99"},
      {"not starting with {", [&] { return raw_file("  {}    ", ""); }, "header does not begin with '{'"},
      {"not JSON", with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3] \"data_offsets\":[0,24]}}", data24),
       "header: invalid JSON at byte 42 (line 1, column 35): expected ',' or '}'"},
      {"invalid UTF-8", with_header("{\"w\xFF\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", data24),
       "invalid JSON at byte 11 (line 1, column 4): invalid UTF-8"},
      {"duplicate tensor",
       with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                   "\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[12,24]}}",
                   data24),
       "duplicate key \"w\""},
      {"duplicate field", with_header("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,24]}}", data24),
       "duplicate key \"dtype\""},
      {"unknown dtype", with_header("{\"w\":{\"dtype\":\"F31\",\"shape\":[6],\"data_offsets\":[0,24]}}", data24),
       "tensor \"w\": unknown dtype \"F31\""},
      {"lower-case dtype", with_header("{\"w\":{\"dtype\":\"float32\",\"shape\":[6],\"data_offsets\":[0,24]}}", data24),
       "unknown dtype \"float32\""},
      {"shape disagrees with offsets", with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", data24.substr(0, 20)),
       "tensor \"w\": shape (2, 3) of F32 needs 24 bytes but data_offsets [0, 20] hold 20"},
      {"dtype disagrees with offsets", with_header("{\"w\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,24]}}", data24),
       "shape (6,) of F16 needs 12 bytes but data_offsets [0, 24] hold 24"},
      {"gap between tensors",
       with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[12,24]}}",
                   data24),
       "bytes [8, 12) of the data buffer belong to no tensor (a gap after tensor \"a\", before tensor \"b\""},
      {"gap at the start", with_header("{\"b\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[4,24]}}", data24),
       "bytes [0, 4) of the data buffer belong to no tensor (a gap at the start"},
      {"overlapping tensors",
       with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                   data24),
       "tensor \"b\" (data_offsets [8, 24]) overlaps tensor \"a\" (data_offsets [0, 16])"},
      {"same range twice",
       with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}",
                   data24),
       "overlaps tensor"},
      {"offsets reversed", with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[24,0]}}", data24),
       "data_offsets [24, 0] end before they begin"},
      {"three offsets", with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,12,24]}}", data24),
       "data_offsets must be [BEGIN, END], got 3 numbers"},
      {"negative extent", with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[-6],\"data_offsets\":[0,24]}}", data24),
       "tensor \"w\": shape[0]: expected a non-negative integer, got -6"},
      {"fractional extent", with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[6.0],\"data_offsets\":[0,24]}}", data24),
       "shape[0]: expected a non-negative integer, got 6.0"},
      {"string offsets", with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[\"0\",24]}}", data24),
       "data_offsets[0]: expected a non-negative integer, got a string"},
      {"overflowing shape",
       with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,24]}}", data24),
       "overflows 64-bit byte counts"},
      {"missing shape", with_header("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,24]}}", data24), "missing \"shape\""},
      {"missing dtype", with_header("{\"w\":{\"shape\":[6],\"data_offsets\":[0,24]}}", data24), "missing \"dtype\""},
      {"missing offsets", with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[6]}}", data24), "missing \"data_offsets\""},
      {"entry not an object", with_header("{\"w\":[1,2]}", ""), "tensor \"w\": expected an object, got an array"},
      {"metadata not strings", with_header("{\"__metadata__\":{\"step\":1200}}", ""),
       "__metadata__ \"step\" (values must be strings): expected a string, got a number"},
      {"metadata not an object", with_header("{\"__metadata__\":\"x\"}", ""), "__metadata__: expected an object"},
      {"sub-byte dtype not filling bytes", with_header("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", "ab"),
       "3 elements of F4 (4 bits each) do not fill whole bytes"},
      {"top level not an object", [] { return raw_file("[]      ", ""); }, "header does not begin with '{'"},
  };
  ScratchDir dir;
  for (const Corruption& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir / "bad.safetensors";
    testing::write_bytes(path, c.bytes());
    // The same message from every entry point, always starting with the file's path.
    for (int entry = 0; entry < 3; ++entry) {
      const std::string msg = testing::error_of([&] {
        if (entry == 0) load_safetensors(path);
        if (entry == 1) read_safetensors_header(path);
        if (entry == 2) check_safetensors(path);
      });
      ASSERT_NE(msg, "") << "accepted by entry point " << entry;
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.expected), std::string::npos) << "message: " << msg << "\nexpected: " << c.expected;
    }
  }
}

TEST(Safetensors, ZeroSizeTensorsMayShareAnOffsetButNotSitInsideAnother) {
  ScratchDir dir;
  const std::string ok = padded(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"e1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
      "\"e2\":{\"dtype\":\"BF16\",\"shape\":[4,0],\"data_offsets\":[8,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}");
  testing::write_bytes(dir / "ok.safetensors", raw_file(ok, std::string(12, '\0')));
  EXPECT_EQ(load_safetensors(dir / "ok.safetensors").tensors.size(), 4u);
  const std::string inside = padded(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}");
  testing::write_bytes(dir / "in.safetensors", raw_file(inside, std::string(8, '\0')));
  EXPECT_ERROR_CONTAINS(load_safetensors(dir / "in.safetensors"), "tensor \"e\" (data_offsets [4, 4]) overlaps tensor \"a\"");
}

TEST(Safetensors, WriterRejectsWhatTheFormatForbids) {
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  const Tensor t = Tensor::from_vector({1.0f}, {1});
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"a", t}, {"b", t}, {"a", t}}),
                        "tensor name \"a\" appears twice");
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"__metadata__", t}}), "\"__metadata__\" is reserved");
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"bad\xFFname", t}}), "is not valid UTF-8");
  EXPECT_ERROR_CONTAINS(save_safetensors(path, {{"u", Tensor()}}), "tensor \"u\" is undefined");
  EXPECT_ERROR_CONTAINS(save_safetensors(dir / "no/such/m.safetensors", {{"a", t}}),
                        dir / "no/such/m.safetensors: cannot write (");
  // A failed save leaves neither the file nor a temporary.
  EXPECT_FALSE(std::filesystem::exists(path));
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) ADD_FAILURE() << "left behind: " << e.path();
}

TEST(Safetensors, SaveReplacesAnExistingFileAtomically) {
  ScratchDir dir;
  const std::string path = dir / "m.safetensors";
  save_safetensors(path, {{"w", Tensor::from_vector({1, 2}, {2})}});
  save_safetensors(path, {{"w", Tensor::from_vector({3, 4, 5}, {3})}});
  EXPECT_EQ(load_safetensors(path).at("w").to_vector(), (std::vector<float>{3, 4, 5}));
}

TEST(Safetensors, RandomDamageIsRejectedCleanlyOrHarmless) {
  // Flipped bytes, changed header sizes and truncations: each load either succeeds with a
  // consistent result or throws tarn::Error; never a crash, a hang or another exception type.
  ScratchDir dir;
  const std::string good_path = dir / "good.safetensors";
  save_safetensors(good_path,
                   {{"a", patterned({3, 5}, DType::f32, 1)},
                    {"b", patterned({4}, DType::bf16, 2)},
                    {"c", patterned({}, DType::f16, 3)}},
                   {{"k", "v"}});
  const std::string good = testing::read_bytes(good_path);
  const uint64_t header_end = 8 + testing::u64_le(good, 0);
  std::mt19937 rng(1234);
  int rejected = 0, accepted = 0;
  for (int iter = 0; iter < 600; ++iter) {
    std::string bytes = good;
    const int kind = iter % 3;
    if (kind == 0) {  // a few random bytes anywhere in the size field or header
      for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k)
        bytes[rng() % header_end] = static_cast<char>(rng() & 0xFF);
    } else if (kind == 1) {  // a plausible character in the JSON
      const char* alphabet = "{}[]\",:0123456789 -.eE";
      bytes[8 + rng() % (header_end - 8)] = alphabet[rng() % std::strlen(alphabet)];
    } else {  // truncated anywhere
      bytes.resize(rng() % bytes.size());
    }
    const std::string path = dir / "fuzz.safetensors";
    testing::write_bytes(path, bytes);
    try {
      const SafetensorsFile f = load_safetensors(path);
      uint64_t total = 0;
      for (const auto& [name, t] : f.tensors) total += t.nbytes();
      EXPECT_LE(total, bytes.size());
      ++accepted;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 300);
  EXPECT_GT(accepted, 0);  // e.g. a digit changed inside a metadata value
}

TEST(Safetensors, IndependentPythonCheckerAgrees) {
  // tests/io/check_safetensors.py re-implements the format rules with Python's standard library
  // only; it must accept what tarn writes and list the same tensors.
  if (std::system("python3 --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  ScratchDir dir;
  const std::string path = dir / "m.safetensors";
  save_safetensors(path,
                   {{"w", patterned({4, 3}, DType::f32, 1)},
                    {"b", patterned({5}, DType::bf16, 2)},
                    {"s", patterned({}, DType::f16, 3)},
                    {"z", patterned({0, 2}, DType::f32, 4)}},
                   {{"format", "pt"}});
  const std::string out = dir / "summary.txt";
  const std::string cmd = std::string("python3 ") + TARN_SOURCE_DIR + "/tests/io/check_safetensors.py " + path +
                          " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string summary = testing::read_bytes(out);
  ASSERT_EQ(rc, 0) << summary;
  EXPECT_EQ(summary,
            "ok metadata {\"format\": \"pt\"}\n"
            "w F32 [4, 3] 0 48\n"
            "b BF16 [5] 48 58\n"
            "s F16 [] 58 60\n"
            "z F32 [0, 2] 48 48\n"
            "");
  // And rejects a corrupted one.
  std::string bytes = testing::read_bytes(path);
  testing::write_bytes(path, bytes.substr(0, bytes.size() - 1));
  EXPECT_NE(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace tarn
