// defines: StopStrings, the stop-string rule over one sample's decoded text, fed one token's
// text at a time:
//
//  - The sample stops at the first token after which its text contains a stop string; the
//    text is cut where that stop string begins (the stop string and everything after it are
//    dropped; the token ids stay). Of several stop strings in the text then, the one that
//    begins first wins, and of those beginning at the same place, the shortest.
//  - A match may span any number of tokens: the text is searched, not the tokens.
//  - released() is how much of the text a stream may show: everything but the tail from the
//    first place where a stop string could still begin (a tail that is a proper prefix of
//    one). It never decreases; after end() (the sample ended without a stop) or a stop, it is
//    the whole kept text.
//
//   StopStrings stops({"\n\n", "END"});
//   for (int token : tokens) {
//     const bool stop = stops.feed(tokenizer.decode_piece(previous, token));
//     show(stops.text().substr(shown, stops.released() - shown)), shown = stops.released();
//     if (stop) break;
//   }
//   stops.end();  // then show the held-back tail
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

namespace specula {

class StopStrings {
 public:
  StopStrings() = default;  // no stop strings: nothing is held back
  // Each stop string non-empty (validate_stop_strings checks a request's).
  explicit StopStrings(std::vector<std::string> stops);

  // Appends `piece`, the text one token adds; returns true when the text now holds a stop
  // string (then text() ends before it, and nothing more may be fed).
  bool feed(std::string_view piece);
  // The sample ended without a stop: the held-back tail is released.
  void end();

  std::string_view text() const { return text_; }
  std::size_t released() const { return released_; }
  // The stop string met, nullopt while none is.
  const std::optional<std::string>& matched() const { return matched_; }
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::size_t longest_ = 0;  // bytes of the longest stop string
  std::string text_;
  std::size_t released_ = 0;
  std::optional<std::string> matched_;
};

// The rule over `ids`' text, each token's Tokenizer::decode_piece after the tokens before it,
// fed up to the first stop.
StopStrings stop_text(const Tokenizer& tokenizer, std::vector<std::string> stops, std::span<const int> ids);

}  // namespace specula
