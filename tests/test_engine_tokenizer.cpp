// The SentencePiece tokenizer with Hugging Face LlamaTokenizer conventions: exact round trip on
// every prompt and continuation of configs/prompts/dev.jsonl, BOS first, every id decodable,
// the special ids of the models' config.json, and streaming (decode_piece) adding up to decode.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "text/tokenizer.h"
#include "tests/test_support.h"

namespace specula {
namespace {

const Tokenizer& shared_tokenizer() {
  static const Tokenizer tok(test::model_dir("target-16m") + "/tokenizer.model");
  return tok;
}

// Every prompt and continuation text of the dev prompts: (label, text).
std::vector<std::pair<std::string, std::string>> dev_texts() {
  std::ifstream in(test::source_path("configs/prompts/dev.jsonl"));
  REQUIRE(in);
  std::vector<std::pair<std::string, std::string>> texts;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    for (const char* field : {"prompt", "continuation"})
      texts.emplace_back(j.at("id").get<std::string>() + "." + field, j.at(field).get<std::string>());
  }
  return texts;
}

}  // namespace

TEST_CASE("tokenizer: decode(encode(text)) is the text, BOS first, on every dev prompt", "[engine][tokenizer]") {
  const Tokenizer& tok = shared_tokenizer();
  const auto texts = dev_texts();
  REQUIRE(texts.size() == 70);
  for (const auto& [label, text] : texts) {
    INFO(label);
    const std::vector<int> ids = tok.encode(text);
    REQUIRE(!ids.empty());
    CHECK(ids[0] == 1);
    CHECK(std::count(ids.begin(), ids.end(), 1) == 1);
    CHECK(tok.decode(std::vector<int>(ids.begin() + 1, ids.end())) == text);
    CHECK(tok.decode(ids) == text);  // BOS produces no text
    CHECK(tok.encode(text, false) == std::vector<int>(ids.begin() + 1, ids.end()));
  }
}

TEST_CASE("tokenizer: streaming pieces add up to the decoded text", "[engine][tokenizer]") {
  // What `specula generate` prints token by token must be the decoded text, also where byte-
  // fallback pieces build a multi-byte character (the man pages hold U+2010 hyphens).
  const Tokenizer& tok = shared_tokenizer();
  for (const auto& [label, text] : dev_texts()) {
    INFO(label);
    const std::vector<int> ids = tok.encode(text, false);
    std::vector<int> previous;
    std::string streamed;
    for (int id : ids) {
      streamed += tok.decode_piece(previous, id);
      previous.push_back(id);
    }
    CHECK(streamed == text);
  }
}

TEST_CASE("tokenizer: every id decodes — special ids match the models' config", "[engine][tokenizer]") {
  const Tokenizer& tok = shared_tokenizer();
  REQUIRE(tok.vocab_size() == 4096);
  for (int id = 0; id < tok.vocab_size(); ++id) {
    INFO("id " << id);
    CHECK_NOTHROW(tok.decode({id}));
  }
  CHECK(tok.decode({1}).empty());
  CHECK(tok.decode({2}).empty());
  CHECK(tok.decode({13}) == "\n");  // byte fallback <0x0A>
  CHECK_THROWS_WITH(tok.decode({4096}), Catch::Contains("id 4096 is outside the vocabulary"));
  CHECK_THROWS_WITH(tok.decode({-1}), Catch::Contains("id -1 is outside the vocabulary"));
  for (const char* name : {"target-16m", "draft-4m", "draft-1m"}) {
    INFO(name);
    const ModelConfig c = load_model_config(test::model_dir(name) + "/config.json");
    CHECK(c.bos_token_id == 1);
    CHECK(c.eos_token_id == 2);
    CHECK(tok.bos_id() == c.bos_token_id);
    CHECK(tok.eos_id() == c.eos_token_id);
    CHECK(c.vocab_size == tok.vocab_size());
  }
  CHECK_THROWS_WITH(Tokenizer("/nonexistent/tokenizer.model"), Catch::Contains("/nonexistent/tokenizer.model"));
}

}  // namespace specula

namespace specula {

TEST_CASE("tokenizer: special tokens written as text encode as their ids, chunks as transformers' legacy flag says",
          "[engine][tokenizer][chat]") {
  const Tokenizer& legacy = shared_tokenizer();  // tokenizer_config.json: "legacy": true
  const auto cat = [](std::vector<int> a, const std::vector<int>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  // legacy: each chunk between special tokens is encoded as a text of its own.
  CHECK(legacy.encode("<s>[INST] Hi [/INST]", false) == cat({1}, legacy.encode("[INST] Hi [/INST]", false)));
  CHECK(legacy.encode("<s>x", true) == cat({1, 1}, legacy.encode("x", false)));
  CHECK(legacy.encode("a</s><s>b", false) == cat(cat(legacy.encode("a", false), {2, 1}), legacy.encode("b", false)));
  CHECK(legacy.encode("<unk>", false) == std::vector<int>{0});
  const std::vector<int> partial = legacy.encode("<s", false);  // not a special token
  CHECK(std::count(partial.begin(), partial.end(), 1) == 0);

  // legacy = false: the chunk after a special token gets no "▁" prefix; the first chunk does.
  test::TempDir dir;
  std::filesystem::create_symlink(test::model_dir("target-16m") + "/tokenizer.model", dir.path / "tokenizer.model");
  std::ofstream(dir.file("tokenizer_config.json")) << R"({"legacy": false})";
  const Tokenizer modern = Tokenizer::load(dir.path.string());
  CHECK(modern.fingerprint() != Tokenizer::load(test::model_dir("target-16m")).fingerprint());
  CHECK(modern.encode("Hi there", false) == legacy.encode("Hi there", false));
  const std::vector<int> after = modern.encode("<s>Hi", false);
  REQUIRE(after.size() >= 2);
  CHECK(after[0] == 1);
  CHECK(modern.piece(after[1]).rfind("\xe2\x96\x81", 0) != 0);  // no leading "▁"
  CHECK(modern.decode(after) == "Hi");
  CHECK(legacy.piece(legacy.encode("<s>Hi", false)[1]).rfind("\xe2\x96\x81", 0) == 0);
  std::ofstream(dir.file("tokenizer_config.json")) << R"({"legacy": "no"})";
  CHECK_THROWS_WITH(Tokenizer::load(dir.path.string()), Catch::Contains("tokenizer_config.json: key 'legacy' must be true or false, got \"no\""));
}

}  // namespace specula
