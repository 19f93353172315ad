// defines: Tokenizer, a SentencePiece tokenizer.model with Hugging Face LlamaTokenizer
// conventions (BOS prepended on encode, specials dropped on decode), optionally padded to a
// model's larger vocabulary (embedding rows past the last piece, which decode to no text).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace specula {

class Tokenizer {
 public:
  // vocab_size: the model's vocabulary, at least the piece count (0 = the piece count).
  explicit Tokenizer(const std::string& model_path, int vocab_size = 0);
  ~Tokenizer();

  // Token ids of `text`, with BOS first when `add_bos`.
  std::vector<int> encode(const std::string& text, bool add_bos = true) const;
  // Text of `ids`; BOS/EOS/UNK controls and padding ids produce no text, byte pieces are
  // merged. An id outside [0, vocab_size) is an error.
  std::string decode(const std::vector<int>& ids) const;
  // Text that token `id` adds when appended after `previous` (for streaming output:
  // byte-fallback pieces and the dummy-prefix space need the context). The bytes of a
  // multi-byte character come out with the piece that completes it.
  std::string decode_piece(const std::vector<int>& previous, int id) const;

  int vocab_size() const { return vocab_size_; }  // ids a model may produce
  int piece_count() const;                          // ids with a SentencePiece piece
  int bos_id() const;
  int eos_id() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int vocab_size_;
};

}  // namespace specula
