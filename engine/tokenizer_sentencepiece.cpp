// The SentencePiece tokenizer.model implementation of TokenizerBackend: Hugging Face
// LlamaTokenizer conventions (BOS prepended on encode, controls dropped on decode).
#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "base/error.h"
#include "engine/tokenizer_backend.h"

namespace specula {
namespace {

// Removes the U+FFFD replacement characters that end `text`.
void drop_incomplete_tail(std::string& text) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  while (text.ends_with(kReplacement)) text.resize(text.size() - kReplacement.size());
}

class SentencePieceTokenizer final : public TokenizerBackend {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path) {
    SPECULA_CHECK(std::filesystem::is_regular_file(model_path), model_path,
                  ": not a file (a SentencePiece tokenizer.model is expected)");
    auto status = sp_.Load(model_path);
    SPECULA_CHECK(status.ok(), model_path, ": cannot load SentencePiece model: ", status.ToString());
    // The serialized model holds the pieces, their scores and types, and the normaliser spec.
    Fnv1a h;
    h.add(std::string_view("sentencepiece"));
    h.add(std::string_view(sp_.serialized_model_proto()));
    fingerprint_ = h.value();
  }

  std::vector<int> encode(const std::string& text, bool add_bos) const override {
    std::vector<int> ids;
    auto status = sp_.Encode(text, &ids);
    SPECULA_CHECK(status.ok(), "tokenizer: encode failed: ", status.ToString());
    if (add_bos) ids.insert(ids.begin(), bos_id());
    return ids;
  }

  std::string decode(const std::vector<int>& ids) const override {
    std::vector<int> pieces;  // ids without the padding
    pieces.reserve(ids.size());
    for (int id : ids)
      if (id < piece_count()) pieces.push_back(id);
    std::string text;
    auto status = sp_.Decode(pieces, &text);
    SPECULA_CHECK(status.ok(), "tokenizer: decode failed: ", status.ToString());
    return text;
  }

  std::string decode_piece(const std::vector<int>& previous, int id) const override {
    // Decoding is not per-token additive (byte fallback, leading-space removal), so the
    // new text is the difference between decoding with and without the token. A window
    // of recent tokens keeps this O(1) per token.
    const std::size_t window = 16;
    std::vector<int> ctx(previous.end() - static_cast<long>(std::min(window, previous.size())), previous.end());
    // A byte-fallback piece that leaves a UTF-8 character incomplete decodes to U+FFFD; its
    // text is held back until the character completes.
    std::string before = decode(ctx);
    const auto is_byte = [&](int piece) { return piece < piece_count() && sp_.IsByte(piece); };
    if (!ctx.empty() && is_byte(ctx.back())) drop_incomplete_tail(before);
    ctx.push_back(id);
    std::string after = decode(ctx);
    if (is_byte(id)) drop_incomplete_tail(after);
    if (after.compare(0, before.size(), before) == 0) return after.substr(before.size());
    return after;
  }

  std::string piece(int id) const override { return sp_.IdToPiece(id); }
  int piece_count() const override { return sp_.GetPieceSize(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }
  uint64_t fingerprint() const override { return fingerprint_; }

 private:
  sentencepiece::SentencePieceProcessor sp_;
  uint64_t fingerprint_ = 0;
};

}  // namespace

std::unique_ptr<TokenizerBackend> load_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

}  // namespace specula
