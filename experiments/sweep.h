// defines: parse_sweep() and expand_grid(), the [sweep] table of a config — axes over
// dotted keys or whole sections, and sweep.exclude — and the grid of points it spans.
#pragma once

#include <filesystem>
#include <string>
#include <toml++/toml.h>
#include <vector>

#include "experiments/config.h"

namespace specula {

// Checks every key and value of `sweep` (errors name them and their file:line:column);
// relative paths resolve against `dir`.
Sweep parse_sweep(const toml::table& sweep, const std::filesystem::path& dir);

// The product of the axes over `base`, first axis slowest, without the points an
// exclusion matches; every point passes the checks across fields (errors name the point).
std::vector<GridPoint> expand_grid(const Settings& base, const Origins& origins, const Sweep& sweep,
                                   const std::string& file);

}  // namespace specula
