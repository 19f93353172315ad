// defines: Tokenizer, the one tokenizer type the engine uses: a SentencePiece tokenizer.model
// (Hugging Face LlamaTokenizer conventions) or a Hugging Face tokenizer.json (BPE, byte-level
// or SentencePiece-style), chosen by Tokenizer::load; optionally padded to a model's larger
// vocabulary (embedding rows past the last piece, which decode to no text).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace specula {

// The implementations (text/tokenizer_sentencepiece.cpp, text/tokenizer_bpe.cpp) behind
// Tokenizer; see text/tokenizer_backend.h.
class TokenizerBackend;

class Tokenizer {
 public:
  // A SentencePiece tokenizer.model. vocab_size: the model's vocabulary, at least the piece
  // count (0 = the piece count).
  explicit Tokenizer(const std::string& model_path, int vocab_size = 0);
  // The tokenizer of a model folder: tokenizer.model when there is one (with
  // tokenizer_config.json's `legacy`), else tokenizer.json
  // (with tokenizer_config.json when present). A folder with neither, or a tokenizer.json
  // this code does not implement, is an error naming the file and the key.
  static Tokenizer load(const std::string& dir, int vocab_size = 0);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`. add_bos: with the special tokens Hugging Face's `encode` adds by
  // default (SentencePiece: BOS first; tokenizer.json: its post-processor as
  // tokenizer_config.json's add_bos_token / add_eos_token leave it). Special-token text in
  // `text` becomes the special token (tokenizer.json).
  std::vector<int> encode(const std::string& text, bool add_bos = true) const;
  // Text of `ids`; special tokens and padding ids produce no text, byte pieces are merged,
  // invalid UTF-8 becomes U+FFFD. An id outside [0, vocab_size) is an error.
  std::string decode(const std::vector<int>& ids) const;
  // Text that token `id` adds when appended after `previous` (for streaming output: byte
  // pieces and a leading space that decode drops need the context). The bytes of a
  // multi-byte character come out with the piece that completes it.
  std::string decode_piece(std::span<const int> previous, int id) const;

  // The vocabulary's string for `id` ("▁the", "Ġthe", "<|eot_id|>"); "" for padding ids.
  std::string piece(int id) const;

  int vocab_size() const { return vocab_size_; }  // ids a model may produce
  int piece_count() const;                          // ids with a piece
  int bos_id() const;                               // -1 when the tokenizer has none
  int eos_id() const;                               // -1 when the tokenizer has none
  // A 64-bit hash of the pieces in id order, the special tokens, the normalisation and
  // pre-tokenisation settings and vocab_size, computed once at load: two tokenizers with the
  // same fingerprint encode and decode alike (draft/target compatibility).
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Tokenizer(std::unique_ptr<TokenizerBackend> backend, const std::string& path, int vocab_size);

  std::unique_ptr<TokenizerBackend> backend_;
  int vocab_size_;
  uint64_t fingerprint_;
};

}  // namespace specula
