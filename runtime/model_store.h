// defines: ModelStore, the models of a process loaded once each and shared by every
// request (the CLI loads one or two, an experiment sweep many points over the same few).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "engine/model.h"

namespace specula {

class ModelStore {
 public:
  // The model in `dir`, loaded on first use, its matrices read as stored or as `matrices_as`
  // (one copy per dir and dtype).
  Model& get(const std::string& dir, std::optional<DType> matrices_as = std::nullopt);

 private:
  std::map<std::pair<std::string, std::optional<DType>>, std::unique_ptr<Model>> models_;
};

}  // namespace specula
