// defines: ModelStore, the models of a process loaded once each and shared by every
// request (the CLI loads one or two, an experiment sweep many points over the same few):
// one Model per folder, one Backend per (folder, backend, matrix dtype), one draft head per
// (folder, target folder, head kind, backend), one Medusa head per (folder, target folder,
// backend); and head_kind, the EAGLE head kind a draft method loads.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "engine/backend.h"
#include "engine/head_backend.h"
#include "draft/draft_options.h"
#include "engine/medusa_backend.h"
#include "model/model.h"

namespace specula {

class ModelStore {
 public:
  // The checkpoint in `dir`, loaded on first use.
  const Model& model(const std::string& dir);
  // The model in `dir` on backend `kind`, its matrices read as stored or as `matrices_as`.
  const Backend& get(const std::string& dir, std::optional<MatrixFormat> matrices_as = std::nullopt,
                     BackendKind kind = BackendKind::kCpu);
  // The draft head of `head_kind` in `dir` for the target in `target_dir`, on backend `kind`.
  const HeadBackend& head(const std::string& dir, const std::string& target_dir, BackendKind kind, HeadKind head_kind);
  // The Medusa heads in `dir` for the target in `target_dir`, on backend `kind`.
  const MedusaBackend& medusa(const std::string& dir, const std::string& target_dir, BackendKind kind = BackendKind::kCpu);

 private:
  std::map<std::string, std::unique_ptr<Model>> models_;
  std::map<std::tuple<std::string, std::string, HeadKind>, std::unique_ptr<HeadModel>> head_models_;
  std::map<std::tuple<std::string, std::string, HeadKind, BackendKind>, std::unique_ptr<HeadBackend>> heads_;
  std::map<std::tuple<std::string, std::string>, std::unique_ptr<MedusaModel>> medusa_models_;
  std::map<std::tuple<std::string, std::string, BackendKind>, std::unique_ptr<MedusaBackend>> medusas_;
  std::map<std::tuple<std::string, BackendKind, std::optional<MatrixFormat>>, std::unique_ptr<Backend>> backends_;
};

// The kind of head draft method `method` (eagle3 or eagle) loads.
HeadKind head_kind(DraftMethod method);

}  // namespace specula
