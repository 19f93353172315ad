#include "text/stop_strings.h"

#include <algorithm>

#include "base/error.h"

namespace specula {

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& stop : stops_) {
    SPECULA_CHECK(!stop.empty(), "a stop string is empty");
    longest_ = std::max(longest_, stop.size());
  }
}

bool StopStrings::feed(std::string_view piece) {
  SPECULA_CHECK(!matched_, "StopStrings::feed after the stop string '", *matched_, "'");
  const std::size_t before = text_.size();
  text_.append(piece);
  if (stops_.empty()) {
    released_ = text_.size();
    return false;
  }
  // A stop string found now ends in the new piece: it begins no earlier than this.
  const std::size_t from = before >= longest_ - 1 ? before - (longest_ - 1) : 0;
  std::size_t first = std::string::npos;
  const std::string* winner = nullptr;
  for (const std::string& stop : stops_) {
    const std::size_t at = text_.find(stop, from);
    if (at == std::string::npos) continue;
    if (at < first || (at == first && stop.size() < winner->size())) first = at, winner = &stop;
  }
  if (winner) {
    matched_ = *winner;
    text_.resize(first);
    released_ = first;
    return true;
  }
  // The first place from which the rest of the text is a proper prefix of a stop string.
  const auto could_begin = [&](std::size_t at) {
    const std::string_view tail = std::string_view(text_).substr(at);
    return std::any_of(stops_.begin(), stops_.end(), [&](const std::string& stop) { return stop.starts_with(tail); });
  };
  std::size_t held = std::max(released_, text_.size() >= longest_ ? text_.size() - (longest_ - 1) : 0);
  while (held < text_.size() && !could_begin(held)) ++held;
  released_ = held;
  return false;
}

void StopStrings::end() { released_ = text_.size(); }

StopStrings stop_text(const Tokenizer& tokenizer, std::vector<std::string> stops, std::span<const int> ids) {
  StopStrings text(std::move(stops));
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (text.feed(tokenizer.decode_piece(ids.first(i), ids[i]))) break;
  return text;
}

}  // namespace specula
