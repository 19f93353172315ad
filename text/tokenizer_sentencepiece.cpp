// The SentencePiece tokenizer.model implementation of TokenizerBackend: Hugging Face
// LlamaTokenizer conventions (BOS prepended on encode, controls dropped on decode, special
// tokens written as text — "<s>", "</s>", "<unk>" in a rendered chat prompt — encoded as their
// ids, as transformers' tokenization_llama.py splits them out before SentencePiece).
#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <utility>

#include "base/error.h"
#include "text/tokenizer_backend.h"

namespace specula {
namespace {

// Removes the U+FFFD replacement characters that end `text`.
void drop_incomplete_tail(std::string& text) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  while (text.ends_with(kReplacement)) text.resize(text.size() - kReplacement.size());
}

class SentencePieceTokenizer final : public TokenizerBackend {
 public:
  SentencePieceTokenizer(const std::string& model_path, bool legacy) : legacy_(legacy) {
    SPECULA_CHECK(std::filesystem::is_regular_file(model_path), model_path,
                  ": not a file (a SentencePiece tokenizer.model is expected)");
    auto status = sp_.Load(model_path);
    SPECULA_CHECK(status.ok(), model_path, ": cannot load SentencePiece model: ", status.ToString());
    for (int id = 0; id < sp_.GetPieceSize(); ++id) {
      if ((sp_.IsControl(id) || sp_.IsUnknown(id)) && !sp_.IdToPiece(id).empty())
        specials_.emplace_back(sp_.IdToPiece(id), id);
    }
    // Longest first, so that a special token that prefixes another never wins over it.
    std::sort(specials_.begin(), specials_.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    unk_prefix_ = raw_encode(sp_.IdToPiece(sp_.unk_id())).size();
    // The serialized model holds the pieces, their scores and types, and the normaliser spec.
    Fnv1a h;
    h.add(std::string_view("sentencepiece"));
    h.add(std::string_view(sp_.serialized_model_proto()));
    h.add(static_cast<int64_t>(legacy_));
    fingerprint_ = h.value();
  }

  // Text between special tokens is encoded chunk by chunk. legacy (tokenizer_config.json's
  // default): every chunk as SentencePiece encodes a text, its dummy prefix "▁" included;
  // legacy = false: a chunk after a special token without the prefix (transformers encodes
  // "<unk>" + chunk and drops the pieces of "<unk>", which this mirrors).
  std::vector<int> encode(const std::string& text, bool add_bos) const override {
    std::vector<int> ids;
    if (add_bos) ids.push_back(bos_id());
    std::size_t start = 0;  // of the current chunk
    bool after_special = false;
    const auto flush = [&](std::size_t end) {
      if (end == start) return;
      const std::string chunk = text.substr(start, end - start);
      std::vector<int> part;
      if (legacy_ || !after_special) {
        part = raw_encode(chunk);
      } else {
        part = raw_encode(sp_.IdToPiece(sp_.unk_id()) + chunk);
        part.erase(part.begin(), part.begin() + static_cast<long>(std::min(unk_prefix_, part.size())));
      }
      ids.insert(ids.end(), part.begin(), part.end());
    };
    for (std::size_t i = 0; i < text.size();) {
      const auto special = std::find_if(specials_.begin(), specials_.end(),
                                        [&](const auto& s) { return text.compare(i, s.first.size(), s.first) == 0; });
      if (special == specials_.end()) {
        ++i;
        continue;
      }
      flush(i);
      ids.push_back(special->second);
      i += special->first.size();
      start = i;
      after_special = true;
    }
    flush(text.size());
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

  std::string decode_piece(std::span<const int> previous, int id) const override {
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
  std::vector<int> raw_encode(const std::string& text) const {
    std::vector<int> ids;
    auto status = sp_.Encode(text, &ids);
    SPECULA_CHECK(status.ok(), "tokenizer: encode failed: ", status.ToString());
    return ids;
  }

  sentencepiece::SentencePieceProcessor sp_;
  bool legacy_;
  std::vector<std::pair<std::string, int>> specials_;  // control and unknown pieces: (text, id), longest first
  std::size_t unk_prefix_ = 0;                          // pieces of the text "<unk>"
  uint64_t fingerprint_ = 0;
};

}  // namespace

std::unique_ptr<TokenizerBackend> load_sentencepiece_tokenizer(const std::string& model_path, bool legacy) {
  return std::make_unique<SentencePieceTokenizer>(model_path, legacy);
}

}  // namespace specula
