#include "engine/tokenizer.h"

#include <sentencepiece_processor.h>

#include <string_view>

#include "base/error.h"

namespace specula {
namespace {

// Removes the U+FFFD replacement characters that end `text`.
void drop_incomplete_tail(std::string& text) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  while (text.ends_with(kReplacement)) text.resize(text.size() - kReplacement.size());
}

}  // namespace

Tokenizer::Tokenizer(const std::string& model_path, int vocab_size)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  auto status = sp_->Load(model_path);
  SPECULA_CHECK(status.ok(), model_path, ": cannot load SentencePiece model: ", status.ToString());
  vocab_size_ = vocab_size == 0 ? piece_count() : vocab_size;
  SPECULA_CHECK(vocab_size_ >= piece_count(), model_path, ": ", piece_count(),
                " pieces do not fit the model's vocab_size = ", vocab_size_);
}

Tokenizer::~Tokenizer() = default;

std::vector<int> Tokenizer::encode(const std::string& text, bool add_bos) const {
  std::vector<int> ids;
  auto status = sp_->Encode(text, &ids);
  SPECULA_CHECK(status.ok(), "tokenizer: encode failed: ", status.ToString());
  if (add_bos) ids.insert(ids.begin(), bos_id());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::vector<int> pieces;  // ids without the padding
  pieces.reserve(ids.size());
  for (int id : ids) {
    SPECULA_CHECK(id >= 0 && id < vocab_size(), "tokenizer: id ", id, " is outside the vocabulary");
    if (id < piece_count()) pieces.push_back(id);
  }
  std::string text;
  auto status = sp_->Decode(pieces, &text);
  SPECULA_CHECK(status.ok(), "tokenizer: decode failed: ", status.ToString());
  return text;
}

std::string Tokenizer::decode_piece(const std::vector<int>& previous, int id) const {
  // Decoding is not per-token additive (byte fallback, leading-space removal), so the
  // new text is the difference between decoding with and without the token. A window
  // of recent tokens keeps this O(1) per token.
  const std::size_t window = 16;
  std::vector<int> ctx(previous.end() - static_cast<long>(std::min(window, previous.size())), previous.end());
  // A byte-fallback piece that leaves a UTF-8 character incomplete decodes to U+FFFD; its
  // text is held back until the character completes.
  std::string before = decode(ctx);
  const auto is_byte = [&](int piece) { return piece < piece_count() && sp_->IsByte(piece); };
  if (!ctx.empty() && is_byte(ctx.back())) drop_incomplete_tail(before);
  ctx.push_back(id);
  std::string after = decode(ctx);
  if (is_byte(id)) drop_incomplete_tail(after);
  if (after.compare(0, before.size(), before) == 0) return after.substr(before.size());
  return after;
}

int Tokenizer::piece_count() const { return sp_->GetPieceSize(); }
int Tokenizer::bos_id() const { return sp_->bos_id(); }
int Tokenizer::eos_id() const { return sp_->eos_id(); }

}  // namespace specula
