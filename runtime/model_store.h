// defines: ModelStore, the models of a process loaded once each and shared by every
// request (the CLI loads one or two, an experiment sweep many points over the same few).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "engine/model.h"

namespace specula {

class ModelStore {
 public:
  // The model in `dir`, loaded on first use.
  Model& get(const std::string& dir);

 private:
  std::map<std::string, std::unique_ptr<Model>> models_;
};

}  // namespace specula
