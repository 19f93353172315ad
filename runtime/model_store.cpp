#include "runtime/model_store.h"

namespace specula {

Model& ModelStore::get(const std::string& dir) {
  auto it = models_.find(dir);
  if (it == models_.end()) it = models_.emplace(dir, std::make_unique<Model>(dir)).first;
  return *it->second;
}

}  // namespace specula
