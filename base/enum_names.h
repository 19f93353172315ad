// defines: EnumName (an option enum's value and its one spelling) and the lookups every option
// enum shares — name_of, parse_enum, enum_spellings — over the table that the enum's own header
// provides as an `enum_names(E)` overload (found by argument-dependent lookup). Options are
// parsed into enums once, at the edge (CLI flags, config keys), and spelled back from the same
// table in results and errors.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace specula {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

template <class E>
const char* name_of(E value) {
  for (const EnumName<E>& n : enum_names(E{}))
    if (n.value == value) return n.name;
  return "?";
}

template <class E>
std::optional<E> parse_enum(std::string_view text) {
  for (const EnumName<E>& n : enum_names(E{}))
    if (text == n.name) return n.value;
  return std::nullopt;
}

template <class E>
std::vector<std::string> enum_spellings() {
  std::vector<std::string> out;
  for (const EnumName<E>& n : enum_names(E{})) out.emplace_back(n.name);
  return out;
}

// "a, b or c", for error messages.
template <class E>
std::string enum_choices() {
  const std::vector<std::string> names = enum_spellings<E>();
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

}  // namespace specula
