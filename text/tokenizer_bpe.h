// defines: BpeSpec (a BPE tokenizer as Hugging Face tokenizer.json describes it, the parts
// this code implements: normaliser, pre-tokeniser, model, post-processor and decoder steps)
// and make_bpe_tokenizer, its TokenizerBackend (text/tokenizer_bpe.cpp). Loading and
// validating the JSON is text/tokenizer_json.cpp's.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer_backend.h"

namespace specula {

// One entry of tokenizer.json's added_tokens (Hugging Face AddedToken).
struct AddedToken {
  int id = 0;
  std::string content;
  bool single_word = false;  // match only as a whole word
  bool lstrip = false;       // the match takes the whitespace on its left
  bool rstrip = false;       // the match takes the whitespace on its right
  bool normalized = false;   // matched in the normalised text rather than the input
  bool special = false;      // dropped on decode
};

struct NormalizerStep {
  enum Kind { kNfc, kPrepend, kReplace } kind;
  std::string text;         // kPrepend: what is prepended; kReplace: the string replaced
  std::string replacement;  // kReplace
};

struct PreTokenizerStep {
  enum Kind {
    kSplit,      // regex matches and the text between them are pieces (behavior Isolated)
    kByteLevel,  // bytes to GPT-2's printable characters; use_regex: GPT-2's split first
    kMetaspace,  // spaces to `replacement`, prefixed at the start of the text or of every piece
  } kind;
  std::string pattern;  // kSplit: the regex (PCRE2 syntax, UTF + UCP)
  bool use_regex = false;  // kByteLevel
  std::string replacement;  // kMetaspace
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;  // kMetaspace
};

struct DecoderStep {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string text;         // kReplace: replaced; kStrip: the character stripped; kMetaspace: replacement
  std::string replacement;  // kReplace
  int start = 0, stop = 0;  // kStrip: how many leading / trailing `text` per token
  bool prepend = true;      // kMetaspace: a leading space of the first token is dropped
};

struct BpeSpec {
  std::string path;                       // tokenizer.json, for messages
  std::vector<std::string> pieces;        // by id: model vocabulary and added tokens ("" = no piece)
  std::vector<std::pair<int, int>> merges;  // by rank: the ids merged
  bool byte_fallback = false;             // unknown characters as <0xXX> pieces
  bool fuse_unk = false;                  // consecutive unknowns as one unk
  bool ignore_merges = false;             // a pre-token that is a piece is that piece
  int unk_id = -1;
  std::vector<AddedToken> added;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<int> prefix, suffix;  // special ids the post-processor puts around a text
  std::vector<DecoderStep> decoder;
  int bos_id = -1, eos_id = -1;
  uint64_t settings_hash = 0;  // of everything above but the pieces (Tokenizer::fingerprint)
};

std::unique_ptr<TokenizerBackend> make_bpe_tokenizer(BpeSpec spec);

}  // namespace specula
