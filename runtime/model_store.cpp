#include "runtime/model_store.h"

#include "base/error.h"

namespace specula {

const Model& ModelStore::model(const std::string& dir) {
  auto it = models_.find(dir);
  if (it == models_.end()) it = models_.emplace(dir, std::make_unique<Model>(dir)).first;
  return *it->second;
}

const Backend& ModelStore::get(const std::string& dir, std::optional<MatrixFormat> matrices_as, BackendKind kind) {
  const auto key = std::make_tuple(dir, kind, matrices_as);
  auto it = backends_.find(key);
  if (it == backends_.end()) it = backends_.emplace(key, make_backend(kind, model(dir), matrices_as)).first;
  return *it->second;
}

const HeadBackend& ModelStore::head(const std::string& dir, const std::string& target_dir, BackendKind kind,
                                    HeadKind head_kind) {
  const Model& target = model(target_dir);
  auto& loaded = head_models_[{dir, target_dir, head_kind}];
  if (!loaded) loaded = std::make_unique<HeadModel>(dir, target.config(), head_kind);
  auto& backend = heads_[{dir, target_dir, head_kind, kind}];
  if (!backend) backend = make_head_backend(kind, *loaded, target);
  return *backend;
}

const MedusaBackend& ModelStore::medusa(const std::string& dir, const std::string& target_dir, BackendKind kind) {
  const Model& target = model(target_dir);
  auto& loaded = medusa_models_[{dir, target_dir}];
  if (!loaded) loaded = std::make_unique<MedusaModel>(dir, target.config());
  auto& backend = medusas_[{dir, target_dir, kind}];
  if (!backend) backend = make_medusa_backend(kind, *loaded, target);
  return *backend;
}

HeadKind head_kind(DraftMethod method) {
  SPECULA_CHECK(drafts_with_eagle_head(method), "draft method ", name_of(method), " loads no EAGLE head");
  return method == DraftMethod::kEagle ? HeadKind::kEagle1 : HeadKind::kEagle3;
}

}  // namespace specula
