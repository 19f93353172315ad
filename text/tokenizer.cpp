#include "text/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "text/tokenizer_backend.h"

namespace specula {

int utf8_incomplete_suffix(std::string_view bytes) {
  const int n = static_cast<int>(bytes.size());
  for (int back = 1; back <= 3 && back <= n; ++back) {
    const auto lead = static_cast<unsigned char>(bytes[n - back]);
    if ((lead & 0xC0) == 0x80) continue;  // a continuation byte: the lead is further back
    const int need = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3
                                                  : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
    if (need <= back) return 0;  // complete, or not a lead byte at all
    if (back >= 2) {  // the second byte's range depends on the lead (no overlongs, surrogates)
      const auto second = static_cast<unsigned char>(bytes[n - back + 1]);
      const unsigned char lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
      const unsigned char hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
      if (second < lo || second > hi) return 0;
    }
    return back;
  }
  return 0;
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerBackend> backend, const std::string& path, int vocab_size)
    : backend_(std::move(backend)) {
  vocab_size_ = vocab_size == 0 ? piece_count() : vocab_size;
  SPECULA_CHECK(vocab_size_ >= piece_count(), path, ": ", piece_count(),
                " pieces do not fit the model's vocab_size = ", vocab_size_);
  Fnv1a h;
  h.add(static_cast<int64_t>(backend_->fingerprint()));
  h.add(vocab_size_);
  fingerprint_ = h.value();
}

Tokenizer::Tokenizer(const std::string& model_path, int vocab_size)
    : Tokenizer(load_sentencepiece_tokenizer(model_path), model_path, vocab_size) {}

namespace {

// tokenizer_config.json's "legacy" (true when the file or the key is absent, as in transformers).
bool sentencepiece_legacy(const std::filesystem::path& config_path) {
  std::ifstream in(config_path);
  if (!in) return true;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  SPECULA_CHECK(j.is_object(), config_path.string(), ": not a JSON object");
  if (!j.contains("legacy") || j["legacy"].is_null()) return true;
  SPECULA_CHECK(j["legacy"].is_boolean(), config_path.string(), ": key 'legacy' must be true or false, got ", j["legacy"].dump());
  return j["legacy"].get<bool>();
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& dir, int vocab_size) {
  const std::filesystem::path d(dir);
  if (std::filesystem::exists(d / "tokenizer.model")) {
    const std::string model = (d / "tokenizer.model").string();
    return Tokenizer(load_sentencepiece_tokenizer(model, sentencepiece_legacy(d / "tokenizer_config.json")), model,
                     vocab_size);
  }
  const std::string json = (d / "tokenizer.json").string();
  SPECULA_CHECK(std::filesystem::exists(json), dir, ": no tokenizer.model or tokenizer.json");
  return Tokenizer(load_json_tokenizer(json, (d / "tokenizer_config.json").string()), json, vocab_size);
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int> Tokenizer::encode(const std::string& text, bool add_bos) const {
  return backend_->encode(text, add_bos);
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::vector<int> pieces;  // ids without the padding
  pieces.reserve(ids.size());
  for (int id : ids) {
    SPECULA_CHECK(id >= 0 && id < vocab_size(), "tokenizer: id ", id, " is outside the vocabulary");
    if (id < piece_count()) pieces.push_back(id);
  }
  return backend_->decode(pieces);
}

std::string Tokenizer::decode_piece(std::span<const int> previous, int id) const {
  SPECULA_CHECK(id >= 0 && id < vocab_size(), "tokenizer: id ", id, " is outside the vocabulary");
  if (id >= piece_count()) return "";
  return backend_->decode_piece(previous, id);
}

std::string Tokenizer::piece(int id) const {
  SPECULA_CHECK(id >= 0 && id < vocab_size(), "tokenizer: id ", id, " is outside the vocabulary");
  return id < piece_count() ? backend_->piece(id) : "";
}

int Tokenizer::piece_count() const { return backend_->piece_count(); }
int Tokenizer::bos_id() const { return backend_->bos_id(); }
int Tokenizer::eos_id() const { return backend_->eos_id(); }

}  // namespace specula
