#include "engine/medusa_backend.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "engine/cpu/medusa_cpu.h"
#include "engine/cuda/head_cuda.h"

namespace specula {

MedusaDrawPlan plan_medusa_draws(std::span<const MedusaTree> trees, int heads) {
  struct Context {
    int depth, tree, node;  // node: -1 the root
  };
  std::vector<Context> contexts;
  std::vector<std::vector<int>> parents(trees.size());
  MedusaDrawPlan plan;
  for (std::size_t r = 0; r < trees.size(); ++r) {
    const MedusaTree& t = trees[r];
    const std::size_t n = static_cast<std::size_t>(t.length);
    SPECULA_CHECK(t.length >= 1, "medusa draws: tree ", r, " has ", t.length, " nodes");
    SPECULA_CHECK(t.parents.empty() || t.parents.size() == n, "medusa draws: tree ", r, " has ", t.parents.size(),
                  " parents for ", n, " nodes");
    SPECULA_CHECK(is_draw_mode(t.mode) && (!t.parents.empty() || t.mode != kDrawWithoutReplacement), "medusa draws: tree ",
                  r, " draws by mode ", t.mode, "; a tree's modes are 0, 1 and 2 (kDraw*), a chain's 0 and 2");
    SPECULA_CHECK(t.uniforms.size() == (t.sampled() ? n : 0), "medusa draws: tree ", r, " has ", t.uniforms.size(),
                  " uniforms; need ", t.sampled() ? n : 0);
    for (std::size_t i = 0; i < t.uniforms.size(); ++i)
      SPECULA_CHECK(t.uniforms[i] >= 0 && t.uniforms[i] < 1, "medusa draws: tree ", r, " node ", i, ": uniform ",
                    t.uniforms[i], " is outside [0, 1)");
    check_draw_options(t.options, "medusa draws: tree", static_cast<int>(r));
    plan.keep_q = plan.keep_q || t.sampled();
    std::vector<int>& parent = parents[r];
    std::vector<int> depth(n);
    contexts.push_back({0, static_cast<int>(r), -1});
    for (std::size_t i = 0; i < n; ++i) {
      parent.push_back(t.parents.empty() ? static_cast<int>(i) - 1 : t.parents[i]);
      SPECULA_CHECK(parent[i] >= -1 && parent[i] < static_cast<int>(i) && (i == 0 || parent[i] >= parent[i - 1]),
                    "medusa draws: tree ", r, " node ", i, " has parent ", parent[i],
                    "; parents come before children, each context's children together in its order");
      depth[i] = parent[i] < 0 ? 1 : depth[static_cast<std::size_t>(parent[i])] + 1;
      SPECULA_CHECK(depth[i] <= heads, "medusa draws: tree ", r, " node ", i, " lies at depth ", depth[i],
                    "; the heads reach depth ", heads);
      if (parent[i] >= 0 && parent[i] != parent[i - 1])  // the first child of a node (node 0's parent is the root)
        contexts.push_back({depth[static_cast<std::size_t>(parent[i])], static_cast<int>(r), parent[i]});
    }
    plan.draw_of.emplace_back(n, -1);
  }
  // Level by level (a level's sources are draws of the levels above), trees in order within one.
  std::stable_sort(contexts.begin(), contexts.end(), [](const Context& a, const Context& b) { return a.depth < b.depth; });
  plan.child_first.push_back(0);
  for (const Context& c : contexts) {
    const MedusaTree& t = trees[static_cast<std::size_t>(c.tree)];
    const std::vector<int>& parent = parents[static_cast<std::size_t>(c.tree)];
    std::vector<int>& draw_of = plan.draw_of[static_cast<std::size_t>(c.tree)];
    while (static_cast<int>(plan.level_first.size()) <= c.depth) plan.level_first.push_back(plan.contexts());
    plan.context_rows.push_back(c.tree * heads + c.depth);
    plan.options.push_back(t.options);
    plan.modes.push_back(t.mode);
    plan.sources.push_back(c.node < 0 ? -1 : draw_of[static_cast<std::size_t>(c.node)]);
    for (std::size_t i = 0; i < parent.size(); ++i) {
      if (parent[i] != c.node) continue;
      draw_of[i] = plan.draws();
      plan.draw_rows.push_back(plan.contexts() - 1);
      plan.uniforms.push_back(t.sampled() ? t.uniforms[i] : 0.0);
    }
    plan.child_first.push_back(plan.draws());
  }
  plan.level_first.push_back(plan.contexts());
  return plan;
}

EnqueuedDraws MedusaBackend::enqueue_draws(std::span<const float>, int, int, std::span<const MedusaTree>,
                                           Workspace&) const {
  throw SpeculaError(medusa_.dir() + ": backend '" + name_of(kind()) +
                     "' draws the Medusa heads' trees on the host; only 'cuda' draws them on its device");
}

std::unique_ptr<MedusaBackend> make_medusa_backend(BackendKind kind, const MedusaModel& medusa, const Model& target) {
  const MedusaConfig& m = medusa.config();
  const ModelConfig& t = target.config();
  SPECULA_CHECK(t.hidden_size == m.hidden_size && t.vocab_size == m.vocab_size, medusa.dir(),
                ": the Medusa heads were loaded for a target of hidden_size ", m.hidden_size, " and vocab_size ",
                m.vocab_size, ", not ", target.dir(), " (hidden_size ", t.hidden_size, ", vocab_size ", t.vocab_size, ")");
  if (kind == BackendKind::kCuda) return cuda::make_cuda_medusa_backend(medusa, target);
  return std::make_unique<cpu::MedusaCpuBackend>(medusa, target.final_norm(), t.rms_norm_eps);
}

}  // namespace specula
