// Byte-level BPE against HuggingFace's tokenizers on the committed fixture
// (tests/fixtures/hf_bart_tiny, made by tools/fixtures/make_hf_bart_fixture.py).
#include "data/byte_level_bpe.h"

#include <gtest/gtest.h>

#include "data/tokenizer.h"
#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "kernels/check.h"

namespace tarn {
namespace {

const std::string kFixture = std::string(TARN_SOURCE_DIR) + "/tests/fixtures/hf_bart_tiny";

struct Expected {
  std::vector<std::string> strings;
  std::vector<std::vector<int32_t>> ids;
};

Expected expected_ids() {
  const std::string path = kFixture + "/expected.json";
  const json::Json root = json::parse(read_file(path), path);
  Expected e;
  for (const json::Json& s : json::items(root.at("strings"), "strings")) e.strings.push_back(json::as_string(s, "string"));
  for (const json::Json& row : json::items(root.at("ids"), "ids")) {
    std::vector<int32_t> ids;
    for (const json::Json& id : json::items(row, "ids")) ids.push_back(static_cast<int32_t>(json::as_u64(id, "id")));
    e.ids.push_back(ids);
  }
  return e;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

void expect_same_ids(const ByteLevelBpe& bpe, const char* which) {
  const Expected e = expected_ids();
  ASSERT_EQ(e.strings.size(), e.ids.size());
  ASSERT_GE(e.strings.size(), 300u);
  size_t same = 0;
  for (size_t i = 0; i < e.strings.size(); ++i) {
    const std::vector<int32_t> got = bpe.encode(e.strings[i]);
    if (got == e.ids[i]) ++same;
    else ADD_FAILURE() << which << ": string " << i << " " << json::quote(e.strings[i]) << "\n  tarn "
                       << show(got) << "\n  HF   " << show(e.ids[i]);
  }
  EXPECT_EQ(same, e.strings.size());
}

TEST(ByteLevelBpe, VocabAndMergesGiveHuggingFacesIdsOnVariedUtf8) {
  const ByteLevelBpe bpe = ByteLevelBpe::from_files(
      kFixture + "/hf/vocab.json", kFixture + "/hf/merges.txt",
      {{"<s>"}, {"<pad>"}, {"</s>"}, {"<unk>"}, {"<mask>", 0, /*lstrip=*/true}});
  expect_same_ids(bpe, "vocab.json + merges.txt");
}

TEST(ByteLevelBpe, TokenizerJsonGivesHuggingFacesIdsOnVariedUtf8) {
  const std::string path = kFixture + "/hf/tokenizer.json";
  expect_same_ids(ByteLevelBpe::from_tokenizer_json(read_file(path), path), "tokenizer.json");
}

TEST(ByteLevelBpe, ItsOwnTokenizerJsonReadsBackToTheSameTokenizer) {
  const std::string path = kFixture + "/hf/tokenizer.json";
  const ByteLevelBpe a = ByteLevelBpe::from_tokenizer_json(read_file(path), path);
  const ByteLevelBpe b = ByteLevelBpe::from_tokenizer_json(a.to_tokenizer_json(), "written");
  expect_same_ids(b, "written back");
}

TEST(ByteLevelBpe, DecodeGivesTheTextBack) {
  const std::string path = kFixture + "/hf/tokenizer.json";
  const ByteLevelBpe bpe = ByteLevelBpe::from_tokenizer_json(read_file(path), path);
  for (const std::string& s : expected_ids().strings) {
    if (s.find('<') != std::string::npos) continue;  // <mask> swallows the space before it (lstrip)
    EXPECT_EQ(bpe.decode(bpe.encode(s), {}), s);
  }
  // Bytes that are not UTF-8 still encode, each as its byte's token, and decode as Rust's
  // from_utf8_lossy reads them: one U+FFFD per maximal ill-formed subpart.
  const std::string broken = "a\xff\xfe b\xc3";
  EXPECT_EQ(bpe.decode(bpe.encode(broken), {}), "a\xEF\xBF\xBD\xEF\xBF\xBD b\xEF\xBF\xBD");
  // A truncated 4-byte sequence is one subpart; a surrogate (ED A0 80) is three.
  EXPECT_EQ(bpe.decode(bpe.encode("\xF0\x9F\x98x"), {}), "\xEF\xBF\xBDx");
  EXPECT_EQ(bpe.decode(bpe.encode("\xED\xA0\x80"), {}), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(ByteLevelBpe, TokenizerLoadsTokenizerJsonAsByteLevelBpe) {
  const Tokenizer tok = Tokenizer::load(kFixture + "/hf/tokenizer.json");
  EXPECT_EQ(tok.kind(), Tokenizer::Kind::byte_level_bpe);
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.mask_id(), 4);
  const Expected e = expected_ids();
  const Ragged rows = tok.encode_lines(e.strings);
  for (size_t i = 0; i < e.strings.size(); ++i) EXPECT_EQ(rows.row(i).to_vector(), e.ids[i]) << i;
  // <s>, </s> and <pad> decode to nothing, as SentencePiece's control pieces do.
  std::vector<int32_t> ids = tok.encode("hello world");
  const std::string text = tok.decode(ids);
  EXPECT_EQ(text, "hello world");
  ids.insert(ids.begin(), kBosId);
  ids.push_back(kEosId);
  ids.push_back(kPadId);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(ByteLevelBpe, RefusesTokenizersThatAreNotByteLevelBpe) {
  const std::string text = read_file(kFixture + "/hf/tokenizer.json");
  auto refused = [&](const std::string& from, const std::string& to, const std::string& why) {
    std::string t = text;
    const size_t at = t.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), to);
    try {
      ByteLevelBpe::from_tokenizer_json(t, "t.json");
      ADD_FAILURE() << "accepted " << to;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused("\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model.type is \"WordPiece\"");
  refused("\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", "normalizer");
  refused("\"add_prefix_space\": false", "\"add_prefix_space\": true", "pre_tokenizer.add_prefix_space");
}

// Found by fuzz/bpe_tokenizer_fuzzer: an added token that the vocabulary gives another id loaded
// (the vocabulary's id then decoded to the token but nothing encoded to it), and the
// tokenizer.json written from it, which `tarn import` writes, was refused on reading it back
// ("no token has id 0"). Refused on the first reading now, naming the token and both ids.
TEST(ByteLevelBpe, RefusesAnAddedTokenThatAlreadyHasAnotherId) {
  const std::string path = kFixture + "/hf/tokenizer.json";
  const json::Json fixture = json::parse(read_file(path), path);
  auto refusal = [](const json::Json& t) -> std::string {
    try {
      ByteLevelBpe::from_tokenizer_json(json::dump(t), "t.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  json::Json moved = fixture;  // <s> is id 0 in the vocabulary, and 400 (one past it) as an added token
  ASSERT_EQ(json::as_string(moved["added_tokens"][0]["content"], "content"), "<s>");
  moved["added_tokens"][0]["id"] = 400;
  EXPECT_NE(refusal(moved).find("t.json: added token <s> has id 400, but 0 is already its id"), std::string::npos)
      << refusal(moved);
  json::Json twice = fixture;  // <mask> added a second time under a new id
  json::Json again = twice["added_tokens"][4];
  ASSERT_EQ(json::as_string(again["content"], "content"), "<mask>");
  again["id"] = 400;
  twice["added_tokens"].push_back(again);
  EXPECT_NE(refusal(twice).find("added token <mask> has id 400, but 4 is already its id"), std::string::npos)
      << refusal(twice);
  EXPECT_EQ(refusal(fixture), "accepted");
}

}  // namespace
}  // namespace tarn
