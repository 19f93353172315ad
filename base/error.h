// defines: SpeculaError (the typed error every layer throws for bad input or exhausted
// resources) and SPECULA_CHECK (throw with context when a condition on input fails).
//
// Error tiers (docs/architecture.md): CUDA_CHECK with file:line for device calls,
// SPECULA_CHECK for anything a user can get wrong (files, keys, values), assert() for
// internal invariants only.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace specula {

class SpeculaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown when a fixed-size pool (KV blocks, device memory) cannot serve a request; the
// request fails, the process and other sequences carry on.
class ResourceExhausted : public SpeculaError {
 public:
  using SpeculaError::SpeculaError;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

}  // namespace specula

// SPECULA_CHECK(cond, "file ", path, ": key '", key, "' must be positive")
#define SPECULA_CHECK(cond, ...)                                           \
  do {                                                                     \
    if (!(cond)) throw ::specula::SpeculaError(::specula::detail::concat(__VA_ARGS__)); \
  } while (0)
