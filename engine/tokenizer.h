// defines: Tokenizer, a SentencePiece tokenizer.model with Hugging Face LlamaTokenizer
// conventions (BOS prepended on encode, specials dropped on decode).
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
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();

  // Token ids of `text`, with BOS first when `add_bos`.
  std::vector<int> encode(const std::string& text, bool add_bos = true) const;
  // Text of `ids`; BOS/EOS/UNK controls produce no text, byte pieces are merged.
  std::string decode(const std::vector<int>& ids) const;
  // Text that token `id` adds when appended after `previous` (for streaming output:
  // byte-fallback pieces and the dummy-prefix space need the context). The bytes of a
  // multi-byte character come out with the piece that completes it.
  std::string decode_piece(const std::vector<int>& previous, int id) const;

  int vocab_size() const;
  int bos_id() const;
  int eos_id() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace specula
