// defines: edit_distance() and did_you_mean(), the "closest valid name" hint that config
// errors carry for unknown keys and unknown enum values.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace specula {

// Levenshtein distance (insertions, deletions, substitutions all cost 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

// "; did you mean 'x'?" naming the candidate closest to `word`, when it is close enough;
// otherwise "; valid: " and the names in `valid`. Dotted names also match on their last
// component, so "sampling.gamma" finds "draft.gamma" (distance = min(full, 1 + last)).
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates,
                         const std::vector<std::string>& valid);

}  // namespace specula
