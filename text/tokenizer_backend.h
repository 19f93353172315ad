// defines: TokenizerBackend (what each tokenizer implementation provides to Tokenizer), the
// factories of the two implementations, and Fnv1a, the hash behind Tokenizer::fingerprint.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace specula {

class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  // Ids of `text`, with the default special tokens when `add_special`.
  virtual std::vector<int> encode(const std::string& text, bool add_special) const = 0;
  // Text of `ids`, every id in [0, piece_count()); specials produce no text.
  virtual std::string decode(const std::vector<int>& ids) const = 0;
  // Text that `id` adds after `previous` (Tokenizer::decode_piece), ids in [0, piece_count()).
  virtual std::string decode_piece(std::span<const int> previous, int id) const = 0;
  // The vocabulary's string for `id` in [0, piece_count()) ("" for an id without one).
  virtual std::string piece(int id) const = 0;
  virtual int piece_count() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  // Hash of the pieces, specials and normalisation settings (Tokenizer adds vocab_size).
  virtual uint64_t fingerprint() const = 0;
};

// A SentencePiece tokenizer.model (text/tokenizer_sentencepiece.cpp); `legacy` is
// tokenizer_config.json's (how text after a special token is encoded; true when unset).
std::unique_ptr<TokenizerBackend> load_sentencepiece_tokenizer(const std::string& model_path, bool legacy = true);
// A Hugging Face tokenizer.json and, when `config_path` exists, its tokenizer_config.json
// (text/tokenizer_json.cpp, over text/tokenizer_bpe.h).
std::unique_ptr<TokenizerBackend> load_json_tokenizer(const std::string& json_path, const std::string& config_path);

// 64-bit FNV-1a; each add() hashes the length first, so field boundaries count.
class Fnv1a {
 public:
  void add(std::string_view bytes) {
    add_raw(std::to_string(bytes.size()));
    add_raw(bytes);
  }
  void add(int64_t v) { add(std::string_view(std::to_string(v))); }
  uint64_t value() const { return h_; }

 private:
  void add_raw(std::string_view bytes) {
    for (unsigned char c : bytes) h_ = (h_ ^ c) * 0x100000001b3ull;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// Length of the incomplete UTF-8 character that ends `bytes` (1-3), or 0 when `bytes` ends on
// a whole character or on bytes that can never complete one.
int utf8_incomplete_suffix(std::string_view bytes);

}  // namespace specula
