#include "engine/cpu/medusa_cpu.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "engine/cpu/ops.h"

namespace specula::cpu {

MedusaCpuBackend::MedusaCpuBackend(const MedusaModel& medusa, const TensorView& final_norm, float eps, MatmulIsa isa)
    : MedusaBackend(medusa), final_norm_(tensor_f32(final_norm)), eps_(eps) {
  SPECULA_CHECK(final_norm.numel() == medusa.config().hidden_size, final_norm.origin, ": the final norm '",
                final_norm.name, "' has ", final_norm.numel(), " weights, the Medusa heads in ", medusa.dir(),
                " read hidden_size ", medusa.config().hidden_size);
  for (const MedusaModel::Head& h : medusa.heads()) {
    std::vector<Block> blocks;
    for (const MedusaModel::ResBlock& b : h.blocks)
      blocks.push_back({WeightMatrix(*b.weight, isa, std::nullopt), tensor_f32(*b.bias)});
    heads_.push_back({std::move(blocks), WeightMatrix(*h.lm_head, isa, std::nullopt)});
  }
}

void MedusaCpuBackend::forward(std::span<const float> states, int n, int heads, Workspace& workspace,
                               std::span<float> logits) const {
  auto* ws = dynamic_cast<MedusaCpuWorkspace*>(&workspace);
  SPECULA_CHECK(ws != nullptr, "medusa forward: the workspace was not made by the CPU Medusa backend");
  MedusaCpuWorkspace& s = *ws;
  const MedusaConfig& c = config();
  const std::size_t hidden = static_cast<std::size_t>(c.hidden_size), vocab = static_cast<std::size_t>(c.vocab_size);
  const std::size_t rows = static_cast<std::size_t>(n), k = static_cast<std::size_t>(heads);
  SPECULA_CHECK(heads >= 1 && heads <= c.num_heads, "medusa forward: ", heads, " heads asked of ", c.num_heads);
  SPECULA_CHECK(n > 0 && states.size() == rows * hidden && logits.size() == rows * k * vocab, "medusa forward: ", n,
                " rows of ", heads, " heads need states of ", rows * hidden, " floats and logits of ", rows * k * vocab,
                ", got ", states.size(), " and ", logits.size());
  s.normed.resize(rows * hidden);
  rms_norm(states.data(), final_norm_.data(), eps_, s.normed.data(), n, c.hidden_size);
  s.x.resize(rows * hidden);
  s.y.resize(rows * hidden);
  s.logits.resize(rows * vocab);
  for (std::size_t i = 0; i < k; ++i) {
    const Head& head = heads_[i];
    std::copy(s.normed.begin(), s.normed.end(), s.x.begin());
    for (const Block& b : head.blocks) {  // x += SiLU(W x + b)
      b.weight.product(s.x.data(), s.y.data(), n);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t j = 0; j < hidden; ++j) {
          const float z = s.y[r * hidden + j] + b.bias[j];
          s.x[r * hidden + j] += z / (1.0f + std::exp(-z));
        }
    }
    head.lm_head.product(s.x.data(), s.logits.data(), n);
    for (std::size_t r = 0; r < rows; ++r)
      std::copy_n(&s.logits[r * vocab], vocab, &logits[(r * k + i) * vocab]);
  }
}

}  // namespace specula::cpu
