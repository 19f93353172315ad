// TokenTree: builders, child walks, validation.
#include <catch2/catch.hpp>

#include "base/error.h"
#include "verify/token_tree.h"

namespace specula {

TEST_CASE("TokenTree builders keep parents, depths and draw modes consistent", "[verify]") {
  const TokenTree chain = TokenTree::chain(std::vector<int>{5, 6, 7}, SiblingDraw::kTopK);
  CHECK(chain.size() == 3);
  CHECK(chain.num_contexts() == 4);
  CHECK(chain.parent == std::vector<int>{-1, 0, 1});
  CHECK(chain.depth == std::vector<int>{1, 2, 3});
  CHECK(chain.draw == std::vector<SiblingDraw>(4, SiblingDraw::kTopK));
  chain.validate(8);

  TokenTree tree(SiblingDraw::kWithoutReplacement);
  CHECK(tree.add_node(-1, 3) == 0);
  tree.draw[1] = SiblingDraw::kSampled;  // children of node 0 are i.i.d.
  CHECK(tree.add_node(-1, 1) == 1);
  CHECK(tree.add_node(0, 2) == 2);
  CHECK(tree.add_node(0, 2) == 3);  // duplicates allowed under i.i.d. siblings
  CHECK(tree.add_node(2, 0) == 4);
  CHECK(tree.depth == std::vector<int>{1, 1, 2, 2, 3});
  CHECK(tree.draw == std::vector<SiblingDraw>{SiblingDraw::kWithoutReplacement, SiblingDraw::kSampled,
                                              SiblingDraw::kWithoutReplacement, SiblingDraw::kSampled,
                                              SiblingDraw::kSampled, SiblingDraw::kSampled});
  CHECK(tree.children(0) == std::vector<int>{0, 1});
  CHECK(tree.children(1) == std::vector<int>{2, 3});
  CHECK(tree.children(3) == std::vector<int>{4});
  CHECK(tree.children(5).empty());
  CHECK(tree.first_child(2) == -1);
  CHECK(tree.next_sibling(2) == 3);
  CHECK(tree.next_sibling(3) == -1);
  tree.validate(4);
  CHECK_THROWS_AS(tree.add_node(5, 1), SpeculaError);
}

TEST_CASE("TokenTree::validate names what is inconsistent", "[verify]") {
  auto base = [] {
    TokenTree t(SiblingDraw::kSampled);
    t.add_node(-1, 1);
    t.add_node(-1, 2);
    t.add_node(0, 3);
    return t;
  };
  base().validate(4);
  TokenTree t = base();
  t.tokens[2] = 4;
  CHECK_THROWS_WITH(t.validate(4), Catch::Contains("outside the vocabulary"));
  t = base();
  t.parent[1] = 2;
  CHECK_THROWS_WITH(t.validate(4), Catch::Contains("parents must precede"));
  t = base();
  t.depth[2] = 1;
  CHECK_THROWS_WITH(t.validate(4), Catch::Contains("depth"));
  t = base();
  t.draw.pop_back();
  CHECK_THROWS_WITH(t.validate(4), Catch::Contains("one entry per context"));
  t = base();
  t.parent.pop_back();
  CHECK_THROWS_AS(t.validate(4), SpeculaError);
  t = base();
  t.tokens[1] = 1;  // two root children with token 1: fine when i.i.d. ...
  t.validate(4);
  t.draw[0] = SiblingDraw::kTopK;  // ... not when top-k or without replacement
  CHECK_THROWS_WITH(t.validate(4), Catch::Contains("repeats child token 1"));
  t.draw[0] = SiblingDraw::kWithoutReplacement;
  CHECK_THROWS_AS(t.validate(4), SpeculaError);
}

}  // namespace specula
