#include "runtime/model_store.h"

namespace specula {

Model& ModelStore::get(const std::string& dir, std::optional<DType> matrices_as) {
  const auto key = std::make_pair(dir, matrices_as);
  auto it = models_.find(key);
  if (it == models_.end()) it = models_.emplace(key, std::make_unique<Model>(dir, matrices_as)).first;
  return *it->second;
}

}  // namespace specula
