// tokenizer.json tokenizers and chat templates against the reference implementations: the real
// files of Llama 3.1 / 3.2, Qwen2.5 / Qwen3 and Llama 2 (and two Metaspace variants of Llama
// 2's), encoded and decoded by @huggingface/tokenizers and rendered by @huggingface/jinja in
// tests/reference/make_reference.mjs (scripts/setup.sh writes its output into the build
// folder; without it these tests fail). Then hand-made tokenizer.json files for the added-token
// flags and every refusal, the fingerprint, and Tokenizer::load's choice of file.
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "base/error.h"
#include "text/tokenizer.h"
#include "tests/test_support.h"

namespace specula {
namespace {

using nlohmann::json;
using Catch::Matchers::Contains;

std::string reference_path() {
  if (const char* env = std::getenv("SPECULA_TOKENIZER_REFERENCE")) return env;
  return SPECULA_TOKENIZER_REFERENCE;
}

const json& reference() {
  static const json ref = [] {
    std::ifstream in(reference_path());
    if (!in)
      throw SpeculaError(reference_path() + ": missing; scripts/setup.sh generates it (node tests/reference/make_reference.mjs)");
    return json::parse(in);
  }();
  return ref;
}

// Each reference tokenizer loaded once per process.
const Tokenizer& tokenizer_of(const std::string& dir) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(dir);
  if (it == loaded.end()) it = loaded.emplace(dir, Tokenizer::load(dir)).first;
  return it->second;
}

std::string streamed(const Tokenizer& tok, const std::vector<int>& ids) {
  std::string text;
  std::vector<int> previous;
  for (int id : ids) {
    text += tok.decode_piece(previous, id);
    previous.push_back(id);
  }
  return text;
}

// Agreement of one property over a tokenizer's cases, with the first few disagreements shown.
struct Tally {
  explicit Tally(const char* what) : what(what) {}
  const char* what;
  int agree = 0, total = 0;
  std::vector<std::string> examples;
  void add(bool ok, const std::string& example) {
    ++total;
    agree += ok;
    if (!ok && examples.size() < 3) examples.push_back(example);
  }
  void report(const std::string& name) const {
    std::printf("tokenizer %s: %s %d/%d\n", name.c_str(), what, agree, total);
    INFO(name << " " << what);
    for (const std::string& e : examples) UNSCOPED_INFO(e);
    CHECK(agree == total);
  }
};

std::string show(const std::vector<int>& ids) { return json(ids).dump(); }

}  // namespace

TEST_CASE("tokenizer.json: encode, decode and streaming equal @huggingface/tokenizers on every reference string",
          "[engine][tokenizer][tokenizer_json]") {
  const json& ref = reference();
  REQUIRE(ref.at("tokenizers").size() == 7);
  for (const json& t : ref.at("tokenizers")) {
    const std::string name = t.at("name");
    const Tokenizer& tok = tokenizer_of(t.at("dir"));
    Tally encode{"encode"}, plain{"encode without specials"}, decode{"decode"}, round_trip{"round trip"},
        stream{"streaming"};
    REQUIRE(t.at("encodings").size() > 2500);
    for (const json& e : t.at("encodings")) {
      const std::string text = e.at("text");
      const std::vector<int> want = e.at("ids"), want_plain = e.at("plain");
      const std::vector<int> ids = tok.encode(text, true);
      encode.add(ids == want, json(text).dump() + " -> " + show(ids) + ", reference " + show(want));
      const std::vector<int> p = tok.encode(text, false);
      plain.add(p == want_plain, json(text).dump() + " -> " + show(p) + ", reference " + show(want_plain));
      const std::string got = tok.decode(want);
      decode.add(got == e.at("decoded"), show(want) + " -> " + json(got).dump() + ", reference " + e.at("decoded").dump());
      if (e.at("decoded") == text) round_trip.add(tok.decode(ids) == text, json(text).dump());
      const std::string s = streamed(tok, want);
      stream.add(s == got, show(want) + " streams " + json(s).dump() + ", decodes " + json(got).dump());
    }
    for (const Tally* tally : {&encode, &plain, &decode, &round_trip, &stream}) tally->report(name);
    CHECK(round_trip.total > 1500);  // most strings hold no special-token text (or NFC changes)
  }
}

TEST_CASE("tokenizer.json: arbitrary ids and cut-off characters decode as @huggingface/tokenizers does",
          "[engine][tokenizer][tokenizer_json]") {
  for (const json& t : reference().at("tokenizers")) {
    const std::string name = t.at("name");
    const Tokenizer& tok = tokenizer_of(t.at("dir"));
    Tally decode{"decode of arbitrary ids"};
    for (const json& d : t.at("decodes")) {
      const std::vector<int> ids = d.at("ids");
      const std::string got = tok.decode(ids);
      decode.add(got == d.at("text"), show(ids) + " -> " + json(got).dump() + ", reference " + d.at("text").dump());
    }
    decode.report(name);
  }
}

TEST_CASE("tokenizer.json: streaming holds back a character until its last byte", "[engine][tokenizer][tokenizer_json]") {
  for (const char* name : {"llama3_1", "qwen3", "llama2"}) {
    INFO(name);
    std::string dir;
    for (const json& t : reference().at("tokenizers"))
      if (t.at("name") == name) dir = t.at("dir");
    const Tokenizer& tok = tokenizer_of(dir);
    // 😀 is 4 bytes: byte-level BPE or byte fallback spreads it over several ids.
    const std::vector<int> ids = tok.encode("a😀", false);
    REQUIRE(ids.size() >= 2);
    std::vector<int> previous;
    std::vector<std::string> pieces;
    for (int id : ids) {
      pieces.push_back(tok.decode_piece(previous, id));
      previous.push_back(id);
    }
    CHECK(pieces.back().ends_with("😀"));
    std::string all;
    for (const std::string& p : pieces) {
      CHECK(p.find("\xEF\xBF\xBD") == std::string::npos);  // never a replacement character
      all += p;
    }
    CHECK(all == "a😀");
  }
}

TEST_CASE("chat templates: render_chat equals @huggingface/jinja on every reference conversation",
          "[engine][tokenizer][chat]") {
  std::map<std::string, Tally> tallies;
  const std::map<std::string, std::string> families = {{"llama3_1", "llama3"},  {"llama3_2", "llama3-date"},
                                                        {"qwen2_5", "qwen2.5"}, {"qwen3", "qwen3"},
                                                        {"llama2", "llama2"},   {"mistral", "mistral"},
                                                        {"mistral-v0.1", "mistral"}};
  for (const json& c : reference().at("chats")) {
    const std::string name = c.at("name");
    const std::string dir = c.at("dir");
    ChatTemplate tmpl;
    if (c.at("template").is_null()) {
      tmpl = load_chat_template(dir);
    } else {
      std::ifstream in(dir + "/tokenizer_config.json");
      const json config = json::parse(in);
      tmpl = recognise_chat_template(c.at("template"), config.at("bos_token"), config.at("eos_token"), name);
    }
    CHECK(tmpl.name() == families.at(name));
    std::vector<ChatMessage> messages;
    for (const json& m : c.at("messages")) messages.push_back({m.at("role"), m.at("content")});
    ChatOptions options;
    if (c.at("options").contains("date_string")) options.date_string = c.at("options").at("date_string");
    if (c.at("options").contains("enable_thinking")) options.enable_thinking = c.at("options").at("enable_thinking");
    const auto it = tallies.try_emplace(name, "chat rendering").first;
    const std::string label = c.at("messages").dump() + " gen " + c.at("add_generation_prompt").dump() + " " +
                              c.at("options").dump();
    if (c.at("error").is_null()) {
      std::string got;
      try {
        got = render_chat(tmpl, messages, c.at("add_generation_prompt"), options);
      } catch (const SpeculaError& e) {
        got = std::string("error: ") + e.what();
      }
      it->second.add(got == c.at("text"), label + " -> " + json(got).dump() + ", reference " + c.at("text").dump());
    } else {
      // The template raises (roles that do not alternate, a system turn Mistral refuses).
      bool raised = false;
      try {
        render_chat(tmpl, messages, c.at("add_generation_prompt"), options);
      } catch (const SpeculaError& e) {
        raised = std::string(e.what()).find(c.at("error").get<std::string>()) != std::string::npos;
      }
      it->second.add(raised, label + " does not raise " + c.at("error").dump());
    }
  }
  REQUIRE(tallies.size() == families.size());
  for (const auto& [name, tally] : tallies) tally.report(name);
}

TEST_CASE("tokenizer.json: special ids and the files Tokenizer::load picks", "[engine][tokenizer][tokenizer_json]") {
  std::map<std::string, std::string> dirs;
  for (const json& t : reference().at("tokenizers")) dirs[t.at("name")] = t.at("dir");
  const Tokenizer& llama3 = tokenizer_of(dirs.at("llama3_1"));
  CHECK(llama3.bos_id() == 128000);
  CHECK(llama3.eos_id() == 128009);  // <|eot_id|>, tokenizer_config.json's eos_token
  CHECK(llama3.piece_count() == 128256);
  CHECK(llama3.piece(128000) == "<|begin_of_text|>");
  CHECK(llama3.decode({128000, 9906}) == "Hello");  // specials produce no text
  const Tokenizer& qwen3 = tokenizer_of(dirs.at("qwen3"));
  CHECK(qwen3.bos_id() == -1);
  CHECK(qwen3.eos_id() == 151645);
  CHECK(qwen3.piece_count() == 151669);
  const Tokenizer& llama2 = tokenizer_of(dirs.at("llama2"));
  CHECK(llama2.bos_id() == 1);
  CHECK(llama2.eos_id() == 2);
  CHECK(llama2.piece(13) == "<0x0A>");

  // Padded to a model's larger embedding (Qwen3's 151936 rows): padding ids decode to no text.
  const Tokenizer padded = Tokenizer::load(dirs.at("qwen3"), 151936);
  CHECK(padded.vocab_size() == 151936);
  CHECK(padded.decode({9707, 151900}) == "Hello");
  CHECK(padded.fingerprint() != qwen3.fingerprint());
  CHECK_THROWS_WITH(Tokenizer::load(dirs.at("qwen3"), 1000), Contains("151669 pieces do not fit the model's vocab_size = 1000"));
  CHECK_THROWS_WITH(padded.decode({151936}), Contains("id 151936 is outside the vocabulary"));

  // Fingerprints: equal for the same files, different across tokenizers.
  CHECK(Tokenizer::load(dirs.at("llama2")).fingerprint() == llama2.fingerprint());
  CHECK(llama2.fingerprint() != tokenizer_of(dirs.at("llama2-metaspace")).fingerprint());
  CHECK(qwen3.fingerprint() != tokenizer_of(dirs.at("qwen2_5")).fingerprint());
  CHECK(llama3.fingerprint() != qwen3.fingerprint());

  // A folder with tokenizer.model uses it (the bundled models), one with neither is an error.
  const std::string bundled = test::model_dir("draft-1m");
  const Tokenizer sp = Tokenizer::load(bundled);
  const Tokenizer direct(bundled + "/tokenizer.model");
  CHECK(sp.encode("def main():") == direct.encode("def main():"));
  CHECK(sp.fingerprint() == direct.fingerprint());
  CHECK(sp.fingerprint() != llama2.fingerprint());
  test::TempDir empty;
  CHECK_THROWS_WITH(Tokenizer::load(empty.path.string()), Contains("no tokenizer.model or tokenizer.json"));
}

namespace {

// A tiny byte-level tokenizer.json: pieces for " ", "a", "b", "ab", "<x>" (added, id 5).
json tiny_tokenizer() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 5, "content": "<x>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
    "post_processor": null,
    "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false,
              "vocab": {"Ġ": 0, "a": 1, "b": 2, "ab": 3, "Ġa": 4}, "merges": ["a b", "Ġ a"]}
  })");
}

std::string write_tokenizer(const test::TempDir& dir, const json& tokenizer, const json& config = json::object()) {
  std::ofstream(dir.file("tokenizer.json")) << tokenizer.dump();
  std::ofstream(dir.file("tokenizer_config.json")) << config.dump();
  return dir.path.string();
}

}  // namespace

TEST_CASE("tokenizer.json: added-token flags and the post-processor, on a hand-made file", "[engine][tokenizer][tokenizer_json]") {
  test::TempDir dir;
  json t = tiny_tokenizer();
  {
    const Tokenizer tok = Tokenizer::load(write_tokenizer(dir, t));
    CHECK(tok.encode("ab a<x> b") == std::vector<int>{3, 4, 5, 0, 2});
    CHECK(tok.encode("a<x>b<x>") == std::vector<int>{1, 5, 2, 5});
    CHECK(tok.decode({3, 5, 4}) == "ab a");
  }
  SECTION("lstrip and rstrip take the whitespace around the token") {
    t["added_tokens"][0]["lstrip"] = true;
    t["added_tokens"][0]["rstrip"] = true;
    const Tokenizer tok = Tokenizer::load(write_tokenizer(dir, t));
    CHECK(tok.encode("a  <x>  b") == std::vector<int>{1, 5, 2});
  }
  SECTION("single_word matches only between non-word characters") {
    t["added_tokens"][0]["single_word"] = true;
    t["added_tokens"][0]["content"] = "ab";
    t["added_tokens"][0]["id"] = 3;
    const Tokenizer tok = Tokenizer::load(write_tokenizer(dir, t));
    CHECK(tok.encode(" ab") == std::vector<int>{0, 3});  // the added "ab", then nothing
    CHECK(tok.encode("aab") == std::vector<int>{1, 3});  // BPE's "ab": "aab" is one word
    CHECK(tok.decode({0, 3}) == " ");                    // a special token: no text
  }
  SECTION("TemplateProcessing and add_bos_token / add_eos_token") {
    t["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<x>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<x>": {"id": "<x>", "ids": [5], "tokens": ["<x>"]}}})");
    const Tokenizer tok = Tokenizer::load(write_tokenizer(dir, t, {{"bos_token", "<x>"}}));
    CHECK(tok.encode("ab") == std::vector<int>{5, 3});
    CHECK(tok.encode("ab", false) == std::vector<int>{3});
    CHECK(tok.bos_id() == 5);
    const Tokenizer no_bos = Tokenizer::load(write_tokenizer(dir, t, {{"bos_token", "<x>"}, {"add_bos_token", false}}));
    CHECK(no_bos.encode("ab") == std::vector<int>{3});
    const Tokenizer eos = Tokenizer::load(write_tokenizer(dir, t, {{"eos_token", "<x>"}, {"add_eos_token", true}}));
    CHECK(eos.encode("ab") == std::vector<int>{5, 3, 5});
  }
  SECTION("the fingerprint follows the pieces and the settings") {
    const uint64_t base = Tokenizer::load(write_tokenizer(dir, t)).fingerprint();
    json renamed = t;
    renamed["model"]["vocab"] = json::parse(R"({"Ġ": 0, "a": 1, "b": 2, "ab": 3, "Ġb": 4})");
    renamed["model"]["merges"] = json::parse(R"(["a b", "Ġ b"])");
    CHECK(Tokenizer::load(write_tokenizer(dir, renamed)).fingerprint() != base);
    json nfc = t;
    nfc["normalizer"] = json::parse(R"({"type": "NFC"})");
    CHECK(Tokenizer::load(write_tokenizer(dir, nfc)).fingerprint() != base);
    CHECK(Tokenizer::load(write_tokenizer(dir, t)).fingerprint() == base);
  }
}

TEST_CASE("tokenizer.json: what the code does not implement is an error naming the file and the key",
          "[engine][tokenizer][tokenizer_json]") {
  test::TempDir dir;
  const std::string file = dir.file("tokenizer.json");
  const auto refused = [&](const std::string& patch, const std::string& message) {
    json t = tiny_tokenizer();
    t.merge_patch(json::parse(patch));
    INFO(patch);
    CHECK_THROWS_WITH(Tokenizer::load(write_tokenizer(dir, t)), Contains(file) && Contains(message));
  };
  refused(R"({"model": {"type": "Unigram"}})", "model.type = \"Unigram\" is not supported");
  refused(R"({"model": {"dropout": 0.1}})", "model.dropout = 0.1 is not supported");
  refused(R"({"model": {"continuing_subword_prefix": "##"}})", "model.continuing_subword_prefix = \"##\" is not supported");
  refused(R"({"model": {"merges": ["a c"]}})", "model.merges[0] = \"a c\" names a piece that is not in model.vocab");
  refused(R"({"model": {"unk_token": "<unk>"}})", "model.unk_token = '<unk>' is not in model.vocab");
  refused(R"({"normalizer": {"type": "NFKC"}})", "normalizer.type = \"NFKC\" is not supported");
  refused(R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}})",
          "normalizer.normalizers[1].type = \"Lowercase\" is not supported");
  refused(R"({"pre_tokenizer": {"type": "Whitespace"}})", "pre_tokenizer.type = \"Whitespace\" is not supported");
  refused(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Removed", "invert": false}})",
          "pre_tokenizer.behavior = \"Removed\" is not supported");
  refused(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated", "invert": false}})",
          "regex '(a' does not compile");
  refused(R"({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true}})",
          "pre_tokenizer.add_prefix_space = true is not supported");
  refused(R"({"pre_tokenizer": {"type": "Metaspace", "replacement": "_", "split": true}})",
          "pre_tokenizer.split = true is not supported");
  refused(R"({"post_processor": {"type": "BertProcessing"}})", "post_processor.type = \"BertProcessing\" is not supported");
  refused(R"({"decoder": {"type": "WordPiece"}})", "decoder.type = \"WordPiece\" is not supported");
  refused(R"({"truncation": {"max_length": 8}})", "truncation = {\"max_length\":8} is not supported");
  refused(R"({"added_tokens": [{"id": 1, "content": "zz"}]})", "gives id 1 to 'zz', which model.vocab gives to 'a'");
  // Input the byte-level tokenizer cannot take.
  const Tokenizer tok = Tokenizer::load(write_tokenizer(dir, tiny_tokenizer()));
  CHECK_THROWS_WITH(tok.encode("a\xFF"), Contains("text is not valid UTF-8 at byte 1"));
  std::ofstream(dir.file("tokenizer.json")) << "{not json";
  CHECK_THROWS_WITH(Tokenizer::load(dir.path.string()), Contains(file) && Contains("not valid JSON"));
  // A config whose bos_token the tokenizer lacks.
  CHECK_THROWS_WITH(Tokenizer::load(write_tokenizer(dir, tiny_tokenizer(), {{"bos_token", "<s>"}})),
                    Contains("bos_token = '<s>' is not a token of"));
}

TEST_CASE("chat templates: an unrecognised template, or roles a family refuses, are errors", "[engine][tokenizer][chat]") {
  CHECK_THROWS_WITH(recognise_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}", "", "", "cfg.json"),
                    Contains("cfg.json: chat_template is not one this code renders") && Contains("{% for m in messages"));
  test::TempDir dir;
  std::ofstream(dir.file("tokenizer_config.json")) << R"({"bos_token": "<s>"})";
  CHECK_THROWS_WITH(load_chat_template(dir.path.string()), Contains("no chat_template, and no") &&
                                                               Contains("chat_template.jinja"));
  std::ofstream(dir.file("chat_template.jinja")) << "{{ bos_token }}{% for message in messages %}";
  CHECK_THROWS_WITH(load_chat_template(dir.path.string()), Contains("chat_template.jinja: chat_template is not one"));

  std::string qwen3_dir;
  for (const json& t : reference().at("tokenizers"))
    if (t.at("name") == "qwen3") qwen3_dir = t.at("dir");
  const ChatTemplate qwen3 = load_chat_template(qwen3_dir);
  CHECK_THROWS_WITH(render_chat(qwen3, {{"tool", "{}"}}, true), Contains("role 'tool' is not supported"));
  CHECK_THROWS_WITH(render_chat(qwen3, {}, true), Contains("no messages"));
}

TEST_CASE("chat templates: Llama 3.x's date is today's where the template asks strftime_now, else its default",
          "[engine][tokenizer][chat]") {
  std::string dir;
  for (const json& t : reference().at("tokenizers"))
    if (t.at("name") == "llama3_2") dir = t.at("dir");
  std::ifstream in(dir + "/tokenizer_config.json");
  const json config = json::parse(in);
  std::string text = config.at("chat_template");
  const ChatTemplate clock = recognise_chat_template(text, "<|begin_of_text|>", "<|eot_id|>", "3.2");
  REQUIRE(clock.date_from_clock);
  const std::string today = render_chat(clock, {{"user", "hi"}}, false);
  const std::size_t at = today.find("Today Date: ");
  REQUIRE(at != std::string::npos);
  const std::string date = today.substr(at + 12, 11);  // "01 Dec 2026"
  CHECK(std::isdigit(static_cast<unsigned char>(date[0])));
  CHECK(std::isdigit(static_cast<unsigned char>(date[1])));
  const std::size_t month = std::string("JanFebMarAprMayJunJulAugSepOctNovDec").find(date.substr(3, 3));
  CHECK((month != std::string::npos && month % 3 == 0));
  CHECK(date.substr(7, 2) == "20");
  // Llama 3.1's template has no strftime_now: its literal default.
  for (std::size_t p; (p = text.find("strftime_now")) != std::string::npos;) text.replace(p, 12, "no_clock");
  const ChatTemplate fixed = recognise_chat_template(text, "<|begin_of_text|>", "<|eot_id|>", "3.1");
  CHECK_FALSE(fixed.date_from_clock);
  CHECK(render_chat(fixed, {{"user", "hi"}}, false).find("Today Date: 26 Jul 2024\n") != std::string::npos);
}

}  // namespace specula
