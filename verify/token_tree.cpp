#include "verify/token_tree.h"

#include <algorithm>
#include <utility>

#include "base/error.h"

namespace specula {

TokenTree TokenTree::chain(std::span<const int> chain_tokens, SiblingDraw mode) {
  TokenTree tree(mode);
  for (int token : chain_tokens) tree.add_node(tree.size() - 1, token);
  return tree;
}

int TokenTree::add_node(int parent_node, int token) {
  SPECULA_CHECK(parent_node >= -1 && parent_node < size(), "token tree: parent ", parent_node,
                " is not a node of a tree of size ", size());
  tokens.push_back(token);
  parent.push_back(parent_node);
  depth.push_back(parent_node < 0 ? 1 : depth[parent_node] + 1);
  draw.push_back(draw[parent_node + 1]);
  return size() - 1;
}

int TokenTree::first_child(int context) const {
  for (int i = std::max(context, 0); i < size(); ++i)
    if (parent[i] == context - 1) return i;
  return -1;
}

int TokenTree::next_sibling(int node) const {
  for (int i = node + 1; i < size(); ++i)
    if (parent[i] == parent[node]) return i;
  return -1;
}

std::vector<int> TokenTree::children(int context) const {
  std::vector<int> out;
  for (int i = first_child(context); i >= 0; i = next_sibling(i)) out.push_back(i);
  return out;
}

void TokenTree::validate(int vocab) const {
  const int n = size();
  SPECULA_CHECK(parent.size() == tokens.size() && depth.size() == tokens.size(),
                "token tree: tokens, parent and depth must have one entry per node (", tokens.size(), ", ",
                parent.size(), ", ", depth.size(), ")");
  SPECULA_CHECK(static_cast<int>(draw.size()) == n + 1, "token tree: draw must have one entry per context (", n + 1,
                "), has ", draw.size());
  for (int i = 0; i < n; ++i) {
    SPECULA_CHECK(parent[i] >= -1 && parent[i] < i, "token tree: node ", i, " has parent ", parent[i],
                  " (parents must precede their children)");
    const int expected = parent[i] < 0 ? 1 : depth[parent[i]] + 1;
    SPECULA_CHECK(depth[i] == expected, "token tree: node ", i, " has depth ", depth[i], ", expected ", expected);
    SPECULA_CHECK(tokens[i] >= 0 && tokens[i] < vocab, "token tree: node ", i, " has token ", tokens[i],
                  " outside the vocabulary [0, ", vocab, ")");
  }
  // Distinct siblings where the draw mode promises them: sort (context, token) pairs.
  std::vector<std::pair<int, int>> keyed;
  for (int i = 0; i < n; ++i)
    if (draw[parent[i] + 1] != SiblingDraw::kSampled) keyed.emplace_back(parent[i] + 1, tokens[i]);
  std::sort(keyed.begin(), keyed.end());
  const auto repeat = std::adjacent_find(keyed.begin(), keyed.end());
  SPECULA_CHECK(repeat == keyed.end(), "token tree: context ", repeat->first, " repeats child token ", repeat->second,
                " although its children were drawn without replacement or top-k");
}

void TokenTree::path_tokens(int context, std::vector<int>& out) const {
  out.clear();
  for (int node = context - 1; node >= 0; node = parent[static_cast<std::size_t>(node)])
    out.push_back(tokens[static_cast<std::size_t>(node)]);
  std::reverse(out.begin(), out.end());
}

}  // namespace specula
