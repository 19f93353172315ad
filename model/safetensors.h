// defines: TensorView, IndexTensorView (an integer or boolean tensor: index tables such as an
// EAGLE-3 head's d2t / t2d), SafetensorsFile (one memory-mapped .safetensors file, its header
// validated) and Checkpoint (a model folder: one file or shards listed in
// model.safetensors.index.json).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace specula {

// A read-only view of one tensor inside a mapped file. Row-major, `shape` outermost first.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // points into the mapping; lives as long as the file
  std::string origin;          // file the tensor came from, for error messages

  int64_t numel() const;
};

// A read-only view of one integer or boolean tensor (safetensors I64, I32 or BOOL) inside a
// mapped file: an index table, never a weight. Row-major, `shape` outermost first.
struct IndexTensorView {
  enum class Type { kI64, kI32, kBool };
  std::string name;
  Type type = Type::kI64;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // points into the mapping; lives as long as the file
  std::string origin;          // file the tensor came from, for error messages

  int64_t numel() const;
  // Element i widened to int64 (BOOL: 0 or 1, any nonzero byte read as 1).
  int64_t at(int64_t i) const;
};

// "I64", "I32", "BOOL" (safetensors' spelling).
const char* index_type_name(IndexTensorView::Type t);

class SafetensorsFile {
 public:
  // Maps `path` and validates the header: its length lies inside the file, every tensor's
  // dtype is F32/F16/BF16, its byte range lies inside the data section, byte size equals
  // shape x dtype size, and no two tensors overlap. Throws SpeculaError naming the file
  // and tensor. With `index_tensors`, I64, I32 and BOOL tensors are accepted too and kept
  // apart (index_tensors()); without, they are an unsupported dtype like any other.
  explicit SafetensorsFile(const std::string& path, bool index_tensors = false);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, IndexTensorView>& index_tensors() const { return index_tensors_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, IndexTensorView> index_tensors_;
};

class Checkpoint {
 public:
  // `dir` holds model.safetensors, or model.safetensors.index.json and its shards;
  // `index_tensors` as SafetensorsFile's.
  explicit Checkpoint(const std::string& dir, bool index_tensors = false);

  // The tensor `name` with exactly `shape`; a clear error if it is missing or mis-shaped.
  const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Every tensor of the checkpoint by name (all shards).
  const std::map<std::string, const TensorView*>& tensors() const { return tensors_; }
  // Every index tensor by name (all shards; empty unless opened with index_tensors).
  const std::map<std::string, const IndexTensorView*>& index_tensors() const { return index_tensors_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> tensors_;
  std::map<std::string, const IndexTensorView*> index_tensors_;
};

}  // namespace specula
