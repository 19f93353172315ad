#include "experiments/suggest.h"

#include <algorithm>
#include <numeric>

namespace specula {
namespace {

std::string_view last_component(std::string_view name) {
  const auto dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

std::size_t name_distance(std::string_view a, std::string_view b) {
  return std::min(edit_distance(a, b), 1 + edit_distance(last_component(a), last_component(b)));
}

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);  // row[j]: distance of a[0, i) to b[0, j)
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates,
                         const std::vector<std::string>& valid) {
  const std::string* best = nullptr;
  std::size_t best_distance = 0;
  for (const std::string& c : candidates) {
    const std::size_t d = name_distance(word, c);
    if (!best || d < best_distance) {
      best = &c;
      best_distance = d;
    }
  }
  const std::size_t close_enough = std::max<std::size_t>(2, last_component(word).size() / 2);
  if (best && best_distance <= close_enough) return "; did you mean '" + *best + "'?";
  std::string list;
  for (const std::string& v : valid) {
    if (!list.empty()) list += ", ";
    list += v;
  }
  return "; valid: " + list;
}

}  // namespace specula
