// The BPE implementation of TokenizerBackend over a BpeSpec: Hugging Face tokenizers' pipeline
// (added tokens split out, normaliser, pre-tokeniser, BPE merges by rank, post-processor;
// decoder steps on the way back), checked against @huggingface/tokenizers by
// tests/test_engine_tokenizer_json.cpp.
#include "text/tokenizer_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <queue>
#include <string_view>
#include <unordered_map>

#include "base/error.h"

namespace specula {
namespace {

// ---- UTF-8 ----------------------------------------------------------------------------------

// Byte length of the UTF-8 character that starts with `lead` (input already validated).
int utf8_length(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// The code point at `s[i]` (valid UTF-8), its length in `len`.
char32_t utf8_at(std::string_view s, std::size_t i, int& len) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  len = utf8_length(b(0));
  switch (len) {
    case 1: return b(0);
    case 2: return (char32_t(b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return (char32_t(b(0) & 0x0F) << 12) | (char32_t(b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return (char32_t(b(0) & 0x07) << 18) | (char32_t(b(1) & 0x3F) << 12) | (char32_t(b(2) & 0x3F) << 6) |
             (b(3) & 0x3F);
  }
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Length of the valid UTF-8 character at `s[i]`, or 0 when the bytes there are not one.
int valid_utf8_at(std::string_view s, std::size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  if (lead < 0x80) return 1;
  const int need = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
  if (need == 0 || i + need > s.size()) return 0;
  const auto second = static_cast<unsigned char>(s[i + 1]);
  const unsigned char lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
  const unsigned char hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
  if (second < lo || second > hi) return 0;
  for (int k = 2; k < need; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return need;
}

// `bytes` with every maximal invalid subsequence replaced by U+FFFD (the WHATWG decoder's
// rule, which Rust's from_utf8_lossy and TextDecoder share).
std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    if (const int n = valid_utf8_at(bytes, i)) {
      out.append(bytes.substr(i, n));
      i += n;
      continue;
    }
    // The longest prefix of a valid sequence is one replacement; a lone bad byte is one too.
    const auto lead = static_cast<unsigned char>(bytes[i]);
    const int need = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
    std::size_t j = i + 1;
    if (need > 0 && j < bytes.size()) {
      const auto second = static_cast<unsigned char>(bytes[j]);
      const unsigned char lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
      const unsigned char hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
      if (second >= lo && second <= hi) {
        ++j;
        while (j < bytes.size() && static_cast<int>(j - i) < need && (static_cast<unsigned char>(bytes[j]) & 0xC0) == 0x80) ++j;
      }
    }
    out += "\xEF\xBF\xBD";
    i = j;
  }
  return out;
}

// Offset of the first byte of `s` that is not valid UTF-8, or npos.
std::size_t invalid_utf8_offset(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const int n = valid_utf8_at(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

// Unicode White_Space (Rust's char::is_whitespace, which Hugging Face's lstrip/rstrip use).
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  std::size_t i = 0;
  for (std::size_t hit; (hit = s.find(from, i)) != std::string_view::npos; i = hit + from.size()) {
    out.append(s.substr(i, hit - i));
    out.append(to);
  }
  out.append(s.substr(i));
  return out;
}

// NFC (utf8proc_NFC's options, but with the length given: the text may hold NUL).
std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  SPECULA_CHECK(n >= 0, "tokenizer: NFC normalisation failed: ", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return result;
}

// ---- GPT-2's byte <-> printable character map (ByteLevel) -------------------------------------

struct ByteMap {
  std::array<std::string, 256> to_text;              // byte -> its character, as UTF-8
  std::unordered_map<char32_t, unsigned char> to_byte;  // character -> byte
  ByteMap() {
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? char32_t(b) : char32_t(256 + extra++);
      append_utf8(to_text[b], c);
      to_byte[c] = static_cast<unsigned char>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

// ---- regex (PCRE2) -------------------------------------------------------------------------

class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                          &offset, nullptr);
    if (code_ == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      SPECULA_CHECK(false, where, ": regex '", pattern, "' does not compile at offset ", offset, ": ",
                    reinterpret_cast<const char*>(message.data()));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is absent
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Pieces of `text` (valid UTF-8): every match and every stretch between matches.
  void split_isolated(std::string_view text, std::vector<std::string>& out) const {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
    std::size_t start = 0, last = 0;
    while (start < text.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                                 PCRE2_NO_UTF_CHECK, match, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
      if (ov[1] == ov[0]) {  // an empty match: step one character
        int len = 0;
        utf8_at(text, ov[0], len);
        start = ov[0] + len;
        continue;
      }
      if (ov[0] > last) out.emplace_back(text.substr(last, ov[0] - last));
      out.emplace_back(text.substr(ov[0], ov[1] - ov[0]));
      last = start = ov[1];
    }
    if (last < text.size()) out.emplace_back(text.substr(last));
    pcre2_match_data_free(match);
  }

 private:
  pcre2_code* code_ = nullptr;
};

// GPT-2's split, which ByteLevel applies when use_regex is set.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---- the tokenizer --------------------------------------------------------------------------

// A stretch of the input: text still to tokenise, or an added token already found.
struct Segment {
  std::string text;
  int added = -1;        // index into spec.added, or -1
  bool at_start = true;  // the stretch starts the input (Metaspace's prepend_scheme "first")
};

class BpeTokenizer final : public TokenizerBackend {
 public:
  explicit BpeTokenizer(BpeSpec spec) : spec_(std::move(spec)) {
    for (std::size_t id = 0; id < spec_.pieces.size(); ++id)
      if (!spec_.pieces[id].empty()) piece_ids_.emplace(spec_.pieces[id], static_cast<int>(id));
    for (std::size_t rank = 0; rank < spec_.merges.size(); ++rank) {
      const auto [a, b] = spec_.merges[rank];
      const auto it = piece_ids_.find(spec_.pieces[a] + spec_.pieces[b]);
      SPECULA_CHECK(it != piece_ids_.end(), spec_.path, ": merges[", rank, "] ('", spec_.pieces[a], "', '",
                    spec_.pieces[b], "') makes a piece that is not in model.vocab");
      merges_.emplace(pair_key(a, b), Merge{static_cast<int>(rank), it->second});  // the first rank wins
    }
    special_.assign(spec_.pieces.size(), false);
    for (std::size_t i = 0; i < spec_.added.size(); ++i) {
      const AddedToken& t = spec_.added[i];
      if (t.special) special_[t.id] = true;
      (t.normalized && !spec_.normalizer.empty() ? normalized_added_ : raw_added_).push_back(static_cast<int>(i));
      if (t.normalized && !spec_.normalizer.empty()) normalized_content_.push_back(normalize(t.content));
    }
    for (const PreTokenizerStep& step : spec_.pre_tokenizer) {
      if (step.kind == PreTokenizerStep::kSplit) regexes_.push_back(std::make_unique<Regex>(step.pattern, spec_.path));
      if (step.kind == PreTokenizerStep::kByteLevel && step.use_regex)
        regexes_.push_back(std::make_unique<Regex>(kGpt2Pattern, spec_.path));
      byte_level_ = byte_level_ || step.kind == PreTokenizerStep::kByteLevel;
    }
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      const auto it = piece_ids_.find(name);
      byte_ids_[b] = it == piece_ids_.end() ? -1 : it->second;
      if (byte_ids_[b] >= 0) byte_of_id_.emplace(byte_ids_[b], static_cast<unsigned char>(b));
    }
  }

  std::vector<int> encode(const std::string& text, bool add_special) const override {
    const std::size_t bad = invalid_utf8_offset(text);
    SPECULA_CHECK(bad == std::string::npos, "tokenizer: text is not valid UTF-8 at byte ", bad);
    std::vector<int> ids;
    if (add_special) ids = spec_.prefix;
    for (Segment& raw : split_added({Segment{text}}, raw_added_, {})) {
      if (raw.added >= 0) {
        ids.push_back(spec_.added[raw.added].id);
        continue;
      }
      raw.text = normalize(raw.text);
      for (const Segment& seg : split_added({raw}, normalized_added_, normalized_content_)) {
        if (seg.added >= 0) {
          ids.push_back(spec_.added[seg.added].id);
          continue;
        }
        for (const std::string& word : pre_tokenize(seg)) bpe(word, ids);
      }
    }
    if (add_special) ids.insert(ids.end(), spec_.suffix.begin(), spec_.suffix.end());
    return ids;
  }

  std::string decode(const std::vector<int>& ids) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int id : ids)
      if (!special_[id] && !spec_.pieces[id].empty()) tokens.push_back(spec_.pieces[id]);
    for (const DecoderStep& step : spec_.decoder) tokens = apply(step, std::move(tokens));
    std::string text;
    for (const std::string& t : tokens) text += t;
    return utf8_lossy(text);
  }

  std::string decode_piece(std::span<const int> previous, int id) const override {
    // The text `id` adds is decode(context + id) past decode(context), over a window of recent
    // tokens; tokens that end in an incomplete character are held back until it completes.
    const std::size_t window = 16;
    std::vector<int> ctx;
    for (auto it = previous.end() - static_cast<long>(std::min(window, previous.size())); it != previous.end(); ++it)
      if (*it < piece_count()) ctx.push_back(*it);
    const std::string before = decode(without_incomplete_tail(ctx));
    ctx.push_back(id);
    const std::string after = decode(without_incomplete_tail(ctx));
    if (after.compare(0, before.size(), before) == 0) return after.substr(before.size());
    return after;
  }

  std::string piece(int id) const override { return spec_.pieces[id]; }
  int piece_count() const override { return static_cast<int>(spec_.pieces.size()); }
  int bos_id() const override { return spec_.bos_id; }
  int eos_id() const override { return spec_.eos_id; }
  uint64_t fingerprint() const override {
    Fnv1a h;
    h.add(static_cast<int64_t>(spec_.settings_hash));
    for (const std::string& piece : spec_.pieces) h.add(piece);
    return h.value();
  }

 private:
  struct Merge {
    int rank;
    int id;
  };
  static uint64_t pair_key(int a, int b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  std::string normalize(std::string text) const {
    for (const NormalizerStep& step : spec_.normalizer) {
      if (text.empty()) break;
      switch (step.kind) {
        case NormalizerStep::kNfc: text = nfc(text); break;
        case NormalizerStep::kPrepend: text = step.text + text; break;
        case NormalizerStep::kReplace: text = replace_all(text, step.text, step.replacement); break;
      }
    }
    return text;
  }

  // Splits the text segments of `in` at the added tokens `which` (indices into spec.added;
  // `contents` their text to match when it is not their content), leftmost-longest.
  std::vector<Segment> split_added(std::vector<Segment> in, const std::vector<int>& which,
                                   const std::vector<std::string>& contents) const {
    if (which.empty()) return in;
    std::vector<Segment> out;
    for (Segment& seg : in) {
      if (seg.added >= 0) {
        out.push_back(std::move(seg));
        continue;
      }
      const std::string& s = seg.text;
      std::size_t last = 0;  // start of the text not yet emitted
      bool at_start = seg.at_start;
      std::size_t i = 0;
      while (i < s.size()) {
        int best = -1;
        std::size_t best_len = 0;
        for (std::size_t k = 0; k < which.size(); ++k) {
          const std::string& c = contents.empty() ? spec_.added[which[k]].content : contents[k];
          if (c.size() > best_len && s.compare(i, c.size(), c) == 0 && single_word_ok(which[k], s, i, c.size())) {
            best = which[k];
            best_len = c.size();
          }
        }
        if (best < 0) {
          int len = 0;
          utf8_at(s, i, len);
          i += len;
          continue;
        }
        const AddedToken& t = spec_.added[best];
        std::size_t text_end = i;
        if (t.lstrip) text_end = trim_space_back(s, last, i);
        std::size_t next = i + best_len;
        if (t.rstrip) next = skip_space(s, next);
        if (text_end > last) out.push_back(Segment{s.substr(last, text_end - last), -1, at_start});
        out.push_back(Segment{"", best, false});
        at_start = false;
        last = i = next;
      }
      if (last < s.size()) out.push_back(Segment{s.substr(last), -1, at_start});
    }
    return out;
  }

  bool single_word_ok(int added, const std::string& s, std::size_t at, std::size_t len) const {
    if (!spec_.added[added].single_word) return true;
    if (at > 0) {
      std::size_t p = at - 1;
      while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
      int n = 0;
      if (is_word_char(utf8_at(s, p, n))) return false;
    }
    int n = 0;
    return at + len >= s.size() || !is_word_char(utf8_at(s, at + len, n));
  }

  // The end of s[from, to) without its trailing whitespace.
  static std::size_t trim_space_back(const std::string& s, std::size_t from, std::size_t to) {
    while (to > from) {
      std::size_t p = to - 1;
      while (p > from && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
      int n = 0;
      if (!is_space(utf8_at(s, p, n))) break;
      to = p;
    }
    return to;
  }
  static std::size_t skip_space(const std::string& s, std::size_t i) {
    while (i < s.size()) {
      int n = 0;
      if (!is_space(utf8_at(s, i, n))) break;
      i += n;
    }
    return i;
  }

  std::vector<std::string> pre_tokenize(const Segment& seg) const {
    std::vector<std::string> pieces{seg.text};
    std::size_t regex = 0;
    for (const PreTokenizerStep& step : spec_.pre_tokenizer) {
      std::vector<std::string> next;
      switch (step.kind) {
        case PreTokenizerStep::kSplit:
          for (const std::string& p : pieces) regexes_[regex]->split_isolated(p, next);
          ++regex;
          break;
        case PreTokenizerStep::kByteLevel:
          if (step.use_regex) {
            for (const std::string& p : pieces) regexes_[regex]->split_isolated(p, next);
            ++regex;
          } else {
            next = std::move(pieces);
          }
          for (std::string& p : next) {
            std::string mapped;
            for (unsigned char b : p) mapped += byte_map().to_text[b];
            p = std::move(mapped);
          }
          break;
        case PreTokenizerStep::kMetaspace:
          for (std::size_t i = 0; i < pieces.size(); ++i) {
            std::string p = replace_all(pieces[i], " ", step.replacement);
            const bool prepend = step.prepend == PreTokenizerStep::kAlways ||
                                 (step.prepend == PreTokenizerStep::kFirst && seg.at_start && i == 0);
            if (prepend && !p.starts_with(step.replacement)) p = step.replacement + p;
            next.push_back(std::move(p));
          }
          break;
      }
      pieces = std::move(next);
    }
    return pieces;
  }

  // Appends the BPE ids of `word` (one pre-token) to `ids`.
  void bpe(const std::string& word, std::vector<int>& ids) const {
    if (word.empty()) return;
    if (spec_.ignore_merges) {
      if (const auto it = piece_ids_.find(word); it != piece_ids_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    // Symbols as a linked list over the characters; merged symbols stay at their left one.
    struct Symbol {
      int id;
      int prev, next;
    };
    std::vector<Symbol> sym;
    for (std::size_t i = 0; i < word.size();) {
      int len = 0;
      utf8_at(word, i, len);
      const auto it = piece_ids_.find(word.substr(i, len));
      if (it != piece_ids_.end()) {
        sym.push_back({it->second, 0, 0});
      } else {
        bool bytes = spec_.byte_fallback;
        for (int k = 0; k < len && bytes; ++k) bytes = byte_ids_[static_cast<unsigned char>(word[i + k])] >= 0;
        if (bytes) {
          for (int k = 0; k < len; ++k) sym.push_back({byte_ids_[static_cast<unsigned char>(word[i + k])], 0, 0});
        } else {
          SPECULA_CHECK(spec_.unk_id >= 0, spec_.path, ": the character '", word.substr(i, len),
                        "' has no piece and the model has no unk_token");
          if (!(spec_.fuse_unk && !sym.empty() && sym.back().id == spec_.unk_id)) sym.push_back({spec_.unk_id, 0, 0});
        }
      }
      i += len;
    }
    const int n = static_cast<int>(sym.size());
    for (int i = 0; i < n; ++i) sym[i] = {sym[i].id, i - 1, i + 1 < n ? i + 1 : -1};
    // Lowest rank first, leftmost among equal ranks; stale entries are skipped when popped.
    struct Candidate {
      int rank, pos, left, right;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    const auto consider = [&](int pos) {
      if (pos < 0 || sym[pos].next < 0) return;
      const auto it = merges_.find(pair_key(sym[pos].id, sym[sym[pos].next].id));
      if (it != merges_.end()) queue.push({it->second.rank, pos, sym[pos].id, sym[sym[pos].next].id});
    };
    for (int i = 0; i + 1 < n; ++i) consider(i);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& left = sym[c.pos];
      if (left.id < 0 || left.next < 0 || left.id != c.left || sym[left.next].id != c.right) continue;
      const int right = left.next;
      left.id = merges_.at(pair_key(c.left, c.right)).id;
      left.next = sym[right].next;
      if (left.next >= 0) sym[left.next].prev = c.pos;
      sym[right].id = -1;  // removed
      consider(left.prev);
      consider(c.pos);
    }
    for (int i = 0; i >= 0 && i < n; i = sym[i].next) ids.push_back(sym[i].id);
  }

  // Raw bytes a token stands for, before any UTF-8 check (for holding incomplete characters).
  std::string token_bytes(int id) const {
    if (special_[id]) return "";
    const std::string& piece = spec_.pieces[id];
    if (const auto it = byte_of_id_.find(id); it != byte_of_id_.end() && !byte_level_)
      return std::string(1, static_cast<char>(it->second));
    if (!byte_level_) return piece;
    std::string out;
    for (std::size_t i = 0; i < piece.size();) {
      int len = 0;
      const auto it = byte_map().to_byte.find(utf8_at(piece, i, len));
      if (it == byte_map().to_byte.end()) return piece;  // an added token's own text
      out += static_cast<char>(it->second);
      i += len;
    }
    return out;
  }

  std::vector<int> without_incomplete_tail(std::vector<int> ids) const {
    std::string tail;  // bytes of the last few tokens
    std::size_t k = ids.size();
    while (k > 0 && tail.size() < 4) tail = token_bytes(ids[--k]) + tail;
    std::size_t held = static_cast<std::size_t>(utf8_incomplete_suffix(tail));
    while (held > 0 && !ids.empty()) {
      const std::size_t n = token_bytes(ids.back()).size();
      ids.pop_back();
      held = n >= held ? 0 : held - n;
    }
    return ids;
  }

  std::vector<std::string> apply(const DecoderStep& step, std::vector<std::string> tokens) const {
    switch (step.kind) {
      case DecoderStep::kByteLevel: {
        // Runs of byte-level pieces become their bytes; an added token's text stays as it is.
        std::vector<std::string> out;
        std::string run;
        for (const std::string& t : tokens) {
          std::string bytes;
          bool all = true;
          for (std::size_t i = 0; i < t.size() && all;) {
            int len = 0;
            const auto it = byte_map().to_byte.find(utf8_at(t, i, len));
            all = it != byte_map().to_byte.end();
            if (all) bytes += static_cast<char>(it->second);
            i += len;
          }
          if (all) {
            run += bytes;
          } else {
            if (!run.empty()) out.push_back(utf8_lossy(run));
            run.clear();
            out.push_back(t);
          }
        }
        if (!run.empty()) out.push_back(utf8_lossy(run));
        return out;
      }
      case DecoderStep::kReplace:
        for (std::string& t : tokens) t = replace_all(t, step.text, step.replacement);
        return tokens;
      case DecoderStep::kByteFallback: {
        std::vector<std::string> out;
        std::string run;
        for (std::string& t : tokens) {
          unsigned value = 0;
          const bool is_byte = t.size() == 6 && t.starts_with("<0x") && t.back() == '>' &&
                               std::sscanf(t.c_str() + 3, "%2x", &value) == 1;
          if (is_byte) {
            run += static_cast<char>(value);
            continue;
          }
          if (!run.empty()) out.push_back(utf8_lossy(run));
          run.clear();
          out.push_back(std::move(t));
        }
        if (!run.empty()) out.push_back(utf8_lossy(run));
        return out;
      }
      case DecoderStep::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        return {all};
      }
      case DecoderStep::kStrip:
        for (std::string& t : tokens) {
          std::size_t b = 0, e = t.size();
          for (int i = 0; i < step.start && t.compare(b, step.text.size(), step.text) == 0; ++i) b += step.text.size();
          for (int i = 0; i < step.stop && e >= b + step.text.size() &&
                          t.compare(e - step.text.size(), step.text.size(), step.text) == 0;
               ++i)
            e -= step.text.size();
          t = t.substr(b, e - b);
        }
        return tokens;
      case DecoderStep::kMetaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replace_all(tokens[i], step.text, " ");
          if (i == 0 && step.prepend && tokens[i].starts_with(' ')) tokens[i].erase(0, 1);
        }
        return tokens;
    }
    return tokens;
  }

  BpeSpec spec_;
  std::unordered_map<std::string, int> piece_ids_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::vector<bool> special_;                   // by id: dropped on decode
  std::vector<int> raw_added_, normalized_added_;  // indices into spec_.added
  std::vector<std::string> normalized_content_;    // of normalized_added_
  std::vector<std::unique_ptr<Regex>> regexes_;    // of the Split and regex ByteLevel steps, in order
  bool byte_level_ = false;
  std::array<int, 256> byte_ids_{};                // byte -> its <0xXX> piece, or -1
  std::unordered_map<int, unsigned char> byte_of_id_;
};

}  // namespace

std::unique_ptr<TokenizerBackend> make_bpe_tokenizer(BpeSpec spec) {
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

}  // namespace specula
