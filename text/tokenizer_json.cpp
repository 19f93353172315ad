// Loads a Hugging Face tokenizer.json (and tokenizer_config.json) into a BpeSpec: what this code
// implements is accepted, anything else is an error naming the file, the key and the value.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "base/error.h"
#include "text/tokenizer_bpe.h"

namespace specula {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  SPECULA_CHECK(in, path, ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    SPECULA_CHECK(false, path, ": not valid JSON: ", e.what());
  }
  return {};
}

// Reads the JSON of one tokenizer.json, with its path for messages.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw SpeculaError(detail::concat(path_, ": ", key, " ", what));
  }
  void unsupported(const std::string& key, const json& value) const {
    fail(key, "= " + value.dump() + " is not supported");
  }
  const json& at(const json& obj, const std::string& name, const std::string& key) const {
    if (!obj.is_object() || !obj.contains(name)) fail(key + "." + name, "is missing");
    return obj.at(name);
  }
  std::string string(const json& obj, const std::string& name, const std::string& key) const {
    const json& v = at(obj, name, key);
    if (!v.is_string()) fail(key + "." + name, "must be a string, not " + v.dump());
    return v.get<std::string>();
  }
  bool flag(const json& obj, const std::string& name, const std::string& key, bool fallback) const {
    if (!obj.contains(name) || obj.at(name).is_null()) return fallback;
    if (!obj.at(name).is_boolean()) fail(key + "." + name, "must be true or false, not " + obj.at(name).dump());
    return obj.at(name).get<bool>();
  }
  // The steps of `value`: itself, or the list under `list` when its type is "Sequence".
  std::vector<std::pair<const json*, std::string>> steps(const json& value, const std::string& key,
                                                         const std::string& list) const {
    std::vector<std::pair<const json*, std::string>> out;
    if (value.is_null()) return out;
    if (string(value, "type", key) != "Sequence") {
      out.emplace_back(&value, key);
      return out;
    }
    const json& items = at(value, list, key);
    if (!items.is_array()) fail(key + "." + list, "must be a list");
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string k = key + "." + list + "[" + std::to_string(i) + "]";
      for (auto& step : steps(items[i], k, list)) out.push_back(step);
    }
    return out;
  }
  // The literal of a {"String": s} pattern (Replace).
  std::string string_pattern(const json& step, const std::string& key) const {
    const json& p = at(step, "pattern", key);
    if (!p.is_object() || !p.contains("String") || !p.at("String").is_string()) unsupported(key + ".pattern", p);
    return p.at("String").get<std::string>();
  }

 private:
  std::string path_;
};

// Model: "BPE" with its vocabulary, merges and options.
void read_model(const Reader& r, const json& model, BpeSpec& spec) {
  const std::string type = model.contains("type") ? r.string(model, "type", "model") : "BPE";
  if (type != "BPE") r.unsupported("model.type", type);
  if (model.contains("dropout") && !model.at("dropout").is_null()) r.unsupported("model.dropout", model.at("dropout"));
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(affix) && !model.at(affix).is_null() && model.at(affix) != "")
      r.unsupported(std::string("model.") + affix, model.at(affix));
  spec.byte_fallback = r.flag(model, "byte_fallback", "model", false);
  spec.fuse_unk = r.flag(model, "fuse_unk", "model", false);
  spec.ignore_merges = r.flag(model, "ignore_merges", "model", false);
  const json& vocab = r.at(model, "vocab", "model");
  if (!vocab.is_object()) r.fail("model.vocab", "must be an object of piece -> id");
  for (const auto& [piece, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 10'000'000)
      r.fail("model.vocab." + piece, "must be an id in [0, 10000000], not " + id.dump());
    const auto i = static_cast<std::size_t>(id.get<int64_t>());
    if (spec.pieces.size() <= i) spec.pieces.resize(i + 1);
    if (!spec.pieces[i].empty()) r.fail("model.vocab." + piece, "repeats id " + std::to_string(i));
    if (piece.empty()) r.fail("model.vocab", "holds an empty piece");
    spec.pieces[i] = piece;
  }
  std::unordered_map<std::string, int> ids;
  for (std::size_t i = 0; i < spec.pieces.size(); ++i)
    if (!spec.pieces[i].empty()) ids.emplace(spec.pieces[i], static_cast<int>(i));
  const json& merges = r.at(model, "merges", "model");
  if (!merges.is_array()) r.fail("model.merges", "must be a list");
  spec.merges.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string a, b;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ', 1);
      if (space == std::string::npos) r.fail("model.merges[" + std::to_string(rank) + "]", "= " + m.dump() + " is not 'a b'");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      r.fail("model.merges[" + std::to_string(rank) + "]", "= " + m.dump() + " is not 'a b' or [a, b]");
    }
    const auto ia = ids.find(a), ib = ids.find(b);
    if (ia == ids.end() || ib == ids.end())
      r.fail("model.merges[" + std::to_string(rank) + "]", "= " + m.dump() + " names a piece that is not in model.vocab");
    spec.merges.emplace_back(ia->second, ib->second);
  }
  if (model.contains("unk_token") && !model.at("unk_token").is_null()) {
    const std::string unk = r.string(model, "unk_token", "model");
    const auto it = ids.find(unk);
    if (it == ids.end()) r.fail("model.unk_token", "= '" + unk + "' is not in model.vocab");
    spec.unk_id = it->second;
  }
}

void read_added_tokens(const Reader& r, const json& root, BpeSpec& spec) {
  if (!root.contains("added_tokens") || root.at("added_tokens").is_null()) return;
  const json& list = root.at("added_tokens");
  if (!list.is_array()) r.fail("added_tokens", "must be a list");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string key = "added_tokens[" + std::to_string(i) + "]";
    const json& t = list[i];
    AddedToken a;
    const json& id = r.at(t, "id", key);
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 10'000'000)
      r.fail(key + ".id", "must be an id in [0, 10000000], not " + id.dump());
    a.id = id.get<int>();
    a.content = r.string(t, "content", key);
    if (a.content.empty()) r.fail(key + ".content", "is empty");
    a.single_word = r.flag(t, "single_word", key, false);
    a.lstrip = r.flag(t, "lstrip", key, false);
    a.rstrip = r.flag(t, "rstrip", key, false);
    a.normalized = r.flag(t, "normalized", key, true);
    a.special = r.flag(t, "special", key, false);
    if (spec.pieces.size() <= static_cast<std::size_t>(a.id)) spec.pieces.resize(a.id + 1);
    std::string& piece = spec.pieces[a.id];
    if (!piece.empty() && piece != a.content)
      r.fail(key, "gives id " + std::to_string(a.id) + " to '" + a.content + "', which model.vocab gives to '" + piece + "'");
    piece = a.content;
    spec.added.push_back(a);
  }
}

void read_normalizer(const Reader& r, const json& root, BpeSpec& spec) {
  if (!root.contains("normalizer")) return;
  for (const auto& [step, key] : r.steps(root.at("normalizer"), "normalizer", "normalizers")) {
    const std::string type = r.string(*step, "type", key);
    if (type == "NFC") {
      spec.normalizer.push_back({NormalizerStep::kNfc, "", ""});
    } else if (type == "Prepend") {
      spec.normalizer.push_back({NormalizerStep::kPrepend, r.string(*step, "prepend", key), ""});
    } else if (type == "Replace") {
      spec.normalizer.push_back({NormalizerStep::kReplace, r.string_pattern(*step, key), r.string(*step, "content", key)});
    } else {
      r.unsupported(key + ".type", type);
    }
  }
}

PreTokenizerStep::Prepend prepend_scheme(const Reader& r, const json& step, const std::string& key) {
  if (step.contains("prepend_scheme")) {
    const std::string s = r.string(step, "prepend_scheme", key);
    if (s == "always") return PreTokenizerStep::kAlways;
    if (s == "first") return PreTokenizerStep::kFirst;
    if (s == "never") return PreTokenizerStep::kNever;
    r.unsupported(key + ".prepend_scheme", s);
  }
  return r.flag(step, "add_prefix_space", key, true) ? PreTokenizerStep::kAlways : PreTokenizerStep::kNever;
}

void read_pre_tokenizer(const Reader& r, const json& root, BpeSpec& spec) {
  if (!root.contains("pre_tokenizer")) return;
  for (const auto& [step, key] : r.steps(root.at("pre_tokenizer"), "pre_tokenizer", "pretokenizers")) {
    const std::string type = r.string(*step, "type", key);
    PreTokenizerStep s{};
    if (type == "Split") {
      s.kind = PreTokenizerStep::kSplit;
      const json& p = r.at(*step, "pattern", key);
      if (!p.is_object() || !p.contains("Regex") || !p.at("Regex").is_string()) r.unsupported(key + ".pattern", p);
      s.pattern = p.at("Regex").get<std::string>();
      const std::string behavior = r.string(*step, "behavior", key);
      if (behavior != "Isolated") r.unsupported(key + ".behavior", behavior);
      if (r.flag(*step, "invert", key, false)) r.unsupported(key + ".invert", true);
    } else if (type == "ByteLevel") {
      s.kind = PreTokenizerStep::kByteLevel;
      if (r.flag(*step, "add_prefix_space", key, false)) r.unsupported(key + ".add_prefix_space", true);
      s.use_regex = r.flag(*step, "use_regex", key, true);
    } else if (type == "Metaspace") {
      s.kind = PreTokenizerStep::kMetaspace;
      s.replacement = r.string(*step, "replacement", key);
      s.prepend = prepend_scheme(r, *step, key);
      if (r.flag(*step, "split", key, true)) r.unsupported(key + ".split", true);
    } else {
      r.unsupported(key + ".type", type);
    }
    spec.pre_tokenizer.push_back(s);
  }
}

// The special ids of TemplateProcessing's "single" around $A.
void read_post_processor(const Reader& r, const json& root, BpeSpec& spec) {
  if (!root.contains("post_processor")) return;
  for (const auto& [step, key] : r.steps(root.at("post_processor"), "post_processor", "processors")) {
    const std::string type = r.string(*step, "type", key);
    if (type == "ByteLevel") continue;  // offsets only
    if (type != "TemplateProcessing") r.unsupported(key + ".type", type);
    const json& single = r.at(*step, "single", key);
    const json& specials = r.at(*step, "special_tokens", key);
    bool seen_a = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const std::string k = key + ".single[" + std::to_string(i) + "]";
      const json& item = single[i];
      if (item.contains("Sequence")) {
        if (r.string(item.at("Sequence"), "id", k + ".Sequence") != "A" || seen_a) r.unsupported(k, item);
        seen_a = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = r.string(item.at("SpecialToken"), "id", k + ".SpecialToken");
        const json& ids = r.at(r.at(specials, name, key + ".special_tokens"), "ids", key + ".special_tokens." + name);
        for (const json& id : ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<std::size_t>() >= spec.pieces.size())
            r.fail(key + ".special_tokens." + name + ".ids", "holds " + id.dump() + ", not an id of the vocabulary");
          (seen_a ? spec.suffix : spec.prefix).push_back(id.get<int>());
        }
      } else {
        r.unsupported(k, item);
      }
    }
    if (!seen_a) r.fail(key + ".single", "has no $A");
  }
}

void read_decoder(const Reader& r, const json& root, BpeSpec& spec) {
  if (!root.contains("decoder")) return;
  for (const auto& [step, key] : r.steps(root.at("decoder"), "decoder", "decoders")) {
    const std::string type = r.string(*step, "type", key);
    DecoderStep d{};
    if (type == "ByteLevel") {
      d.kind = DecoderStep::kByteLevel;
    } else if (type == "Replace") {
      d = {DecoderStep::kReplace, r.string_pattern(*step, key), r.string(*step, "content", key)};
    } else if (type == "ByteFallback") {
      d.kind = DecoderStep::kByteFallback;
    } else if (type == "Fuse") {
      d.kind = DecoderStep::kFuse;
    } else if (type == "Strip") {
      d.kind = DecoderStep::kStrip;
      d.text = r.string(*step, "content", key);
      for (auto [name, field] : {std::pair{"start", &d.start}, std::pair{"stop", &d.stop}}) {
        const json& v = r.at(*step, name, key);
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000)
          r.fail(key + "." + name, "must be a count in [0, 1000], not " + v.dump());
        *field = v.get<int>();
      }
    } else if (type == "Metaspace") {
      d.kind = DecoderStep::kMetaspace;
      d.text = r.string(*step, "replacement", key);
      d.prepend = prepend_scheme(r, *step, key) != PreTokenizerStep::kNever;
    } else {
      r.unsupported(key + ".type", type);
    }
    spec.decoder.push_back(d);
  }
}

// A token named in tokenizer_config.json: a string, or {"content": ...} (older files).
std::string config_token(const json& config, const char* name) {
  if (!config.contains(name)) return "";
  const json& v = config.at(name);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return "";
}

}  // namespace

std::unique_ptr<TokenizerBackend> load_json_tokenizer(const std::string& json_path, const std::string& config_path) {
  const json root = read_json(json_path);
  const Reader r(json_path);
  if (!root.is_object()) r.fail("(top level)", "must be an object");
  BpeSpec spec;
  spec.path = json_path;
  for (const char* key : {"truncation", "padding"})
    if (root.contains(key) && !root.at(key).is_null()) r.unsupported(key, root.at(key));
  read_model(r, r.at(root, "model", "(top level)"), spec);
  read_added_tokens(r, root, spec);
  read_normalizer(r, root, spec);
  read_pre_tokenizer(r, root, spec);
  read_post_processor(r, root, spec);
  read_decoder(r, root, spec);

  std::unordered_map<std::string, int> added_ids;
  for (const AddedToken& t : spec.added) added_ids.emplace(t.content, t.id);
  const auto id_of = [&](const std::string& piece) {
    if (const auto it = added_ids.find(piece); it != added_ids.end()) return it->second;
    for (std::size_t i = 0; i < spec.pieces.size(); ++i)
      if (spec.pieces[i] == piece) return static_cast<int>(i);
    return -1;
  };
  json config = json::object();
  if (std::filesystem::exists(config_path)) config = read_json(config_path);
  if (!config.is_object()) throw SpeculaError(config_path + ": must be an object");
  for (const char* name : {"bos_token", "eos_token"}) {
    const std::string token = config_token(config, name);
    if (token.empty()) continue;
    const int id = id_of(token);
    SPECULA_CHECK(id >= 0, config_path, ": ", name, " = '", token, "' is not a token of ", json_path);
    (std::string(name) == "bos_token" ? spec.bos_id : spec.eos_id) = id;
  }
  // transformers' LlamaTokenizer(Fast) rebuilds the post-processor from add_bos_token /
  // add_eos_token: the BOS before the text, the EOS after it, each when its flag says.
  for (auto [name, list, id] : {std::tuple{"add_bos_token", &spec.prefix, spec.bos_id},
                                std::tuple{"add_eos_token", &spec.suffix, spec.eos_id}}) {
    if (!config.contains(name) || config.at(name).is_null()) continue;
    SPECULA_CHECK(config.at(name).is_boolean(), config_path, ": ", name, " must be true or false, not ",
                  config.at(name).dump());
    const bool want = config.at(name).get<bool>();
    const std::vector<int> expected = want && id >= 0 ? std::vector<int>{id} : std::vector<int>{};
    if (*list == expected) continue;
    SPECULA_CHECK(list->empty() || *list == std::vector<int>{id}, config_path, ": ", name, " = ", want,
                  " conflicts with the post-processor of ", json_path);
    SPECULA_CHECK(!want || id >= 0, config_path, ": ", name, " is true but there is no ",
                  std::string(name) == "add_bos_token" ? "bos_token" : "eos_token");
    *list = expected;
  }
  // Everything that shapes encode and decode but the pieces themselves (not which token the
  // config calls EOS: a base and an instruct model of one family differ there, their ids agree).
  Fnv1a h;
  h.add(std::string_view("tokenizer.json bpe"));
  for (const char* key : {"normalizer", "pre_tokenizer", "decoder"})
    h.add(root.contains(key) ? root.at(key).dump() : "null");
  for (const char* key : {"byte_fallback", "fuse_unk", "ignore_merges", "unk_token"})
    h.add(root.at("model").contains(key) ? root.at("model").at(key).dump() : "null");
  for (const AddedToken& t : spec.added)
    h.add(detail::concat(t.id, ' ', t.content, ' ', t.single_word, t.lstrip, t.rstrip, t.normalized, t.special));
  for (int id : spec.prefix) h.add(id);
  h.add(std::string_view("|"));
  for (int id : spec.suffix) h.add(id);
  for (const auto& [a, b] : spec.merges) h.add((int64_t(a) << 32) | b);
  spec.settings_hash = h.value();
  return make_bpe_tokenizer(std::move(spec));
}

}  // namespace specula
