#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.h"

namespace specula {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

DType tensor_dtype(const std::string& s, const std::string& path, const std::string& tensor, bool index_tensors) {
  // Safetensors spells dtypes in capitals; "bf16" is not a safetensors dtype.
  if (const auto t = parse_dtype(s); t && s == dtype_name(*t)) return *t;
  throw SpeculaError(detail::concat(path, ": tensor '", tensor, "' has unsupported dtype '", s,
                                    "' (supported: F32, F16, BF16", index_tensors ? ", I64, I32, BOOL)" : ")"));
}

// Whether `s` names an index tensor's dtype, and which (into `type`).
bool index_type(const std::string& s, IndexTensorView::Type& type) {
  for (auto t : {IndexTensorView::Type::kI64, IndexTensorView::Type::kI32, IndexTensorView::Type::kBool}) {
    if (s == index_type_name(t)) {
      type = t;
      return true;
    }
  }
  return false;
}

std::size_t index_type_size(IndexTensorView::Type t) {
  return t == IndexTensorView::Type::kI64 ? 8 : t == IndexTensorView::Type::kI32 ? 4 : 1;
}

}  // namespace

const char* index_type_name(IndexTensorView::Type t) {
  switch (t) {
    case IndexTensorView::Type::kI64: return "I64";
    case IndexTensorView::Type::kI32: return "I32";
    case IndexTensorView::Type::kBool: return "BOOL";
  }
  return "?";
}

int64_t IndexTensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t IndexTensorView::at(int64_t i) const {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (type == Type::kBool) return bytes[i] != 0;
  if (type == Type::kI32) {
    int32_t v;
    std::memcpy(&v, bytes + 4 * i, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, bytes + 8 * i, 8);
  return v;
}

SafetensorsFile::SafetensorsFile(const std::string& path, bool index_tensors) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  SPECULA_CHECK(fd >= 0, path, ": cannot open safetensors file: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw SpeculaError(detail::concat(path, ": cannot stat: ", std::strerror(errno)));
  }
  map_size_ = static_cast<std::size_t>(st.st_size);
  if (map_size_ < 8) {
    ::close(fd);
    throw SpeculaError(detail::concat(path, ": truncated safetensors file (", map_size_,
                                      " bytes, the 8-byte header length is missing)"));
  }
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw SpeculaError(detail::concat(path, ": mmap failed: ", std::strerror(errno)));
  }
  try {
    const auto* bytes = static_cast<const unsigned char*>(map_);
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes, 8);  // little-endian u64, as the format specifies
    SPECULA_CHECK(header_len <= map_size_ - 8, path, ": header length ", header_len,
                  " runs past the end of the file (", map_size_, " bytes)");
    nlohmann::json header;
    std::set<std::string> names;  // tensor names seen (JSON objects keep the last of duplicate keys)
    const auto unique_names = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& key) {
      if (event == nlohmann::json::parse_event_t::key && depth == 1)
        SPECULA_CHECK(names.insert(key.get<std::string>()).second, path, ": tensor '", key.get<std::string>(),
                      "' appears twice in the header");
      return true;
    };
    try {
      header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len, unique_names);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number beyond a double
      throw SpeculaError(detail::concat(path, ": header is not valid JSON: ", e.what()));
    }
    SPECULA_CHECK(header.is_object(), path, ": header must be a JSON object");
    const unsigned char* data = bytes + 8 + header_len;
    const uint64_t data_size = map_size_ - 8 - header_len;

    struct Range { uint64_t begin, end; std::string name; };
    std::vector<Range> ranges;
    for (auto& [name, info] : header.items()) {
      if (name == "__metadata__") continue;
      SPECULA_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") &&
                        info.contains("data_offsets"),
                    path, ": tensor '", name, "' needs dtype, shape and data_offsets");
      SPECULA_CHECK(info["dtype"].is_string(), path, ": tensor '", name, "': dtype must be a string");
      TensorView t;
      t.name = name;
      t.origin = path;
      const std::string dtype = info["dtype"].get<std::string>();
      IndexTensorView::Type index_kind = IndexTensorView::Type::kI64;
      const bool index = index_tensors && index_type(dtype, index_kind);
      if (!index) t.dtype = tensor_dtype(dtype, path, name, index_tensors);
      const auto& shape = info["shape"];
      SPECULA_CHECK(shape.is_array(), path, ": tensor '", name, "': shape must be an array");
      for (const auto& d : shape) {
        SPECULA_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, path, ": tensor '", name,
                      "': bad dimension ", d.dump());
        t.shape.push_back(d.get<int64_t>());
      }
      const auto& off = info["data_offsets"];
      SPECULA_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                        off[1].is_number_unsigned(),
                    path, ": tensor '", name, "': data_offsets must be two non-negative integers");
      uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
      SPECULA_CHECK(begin <= end && end <= data_size, path, ": tensor '", name, "': data_offsets [",
                    begin, ", ", end, ") out of range of the data section (", data_size, " bytes)");
      // shape x dtype size, without overflowing
      uint64_t expected = index ? index_type_size(index_kind) : dtype_size(t.dtype);
      for (int64_t d : t.shape) {
        SPECULA_CHECK(!__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected), path, ": tensor '",
                      name, "': shape ", shape_str(t.shape), " is too large");
      }
      SPECULA_CHECK(end - begin == expected, path, ": tensor '", name, "': ", end - begin, " bytes but shape ",
                    shape_str(t.shape), " x ", index ? index_type_name(index_kind) : dtype_name(t.dtype), " needs ",
                    expected);
      t.data = data + begin;
      ranges.push_back({begin, end, name});
      if (index) {
        index_tensors_.emplace(name, IndexTensorView{name, index_kind, std::move(t.shape), t.data, path});
      } else {
        tensors_.emplace(name, std::move(t));
      }
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    for (std::size_t i = 1; i < ranges.size(); ++i) {
      SPECULA_CHECK(ranges[i].begin >= ranges[i - 1].end, path, ": tensors '", ranges[i - 1].name,
                    "' and '", ranges[i].name, "' overlap");
    }
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

Checkpoint::Checkpoint(const std::string& dir, bool index_tensors) : dir_(dir) {
  namespace fs = std::filesystem;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  std::vector<std::string> shard_names;
  if (fs::exists(index)) {
    std::ifstream in(index);
    SPECULA_CHECK(in, index.string(), ": cannot open");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw SpeculaError(detail::concat(index.string(), ": invalid JSON: ", e.what()));
    }
    SPECULA_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                  index.string(), ": key 'weight_map' (an object) is missing");
    for (auto& [tensor, shard] : j["weight_map"].items()) {
      SPECULA_CHECK(shard.is_string(), index.string(), ": weight_map['", tensor, "'] must be a file name");
      auto name = shard.get<std::string>();
      SPECULA_CHECK(name.find('/') == std::string::npos, index.string(), ": weight_map['", tensor,
                    "'] = '", name, "' must be a file in the same folder");
      if (std::find(shard_names.begin(), shard_names.end(), name) == shard_names.end())
        shard_names.push_back(name);
    }
    std::sort(shard_names.begin(), shard_names.end());
  } else {
    SPECULA_CHECK(fs::exists(single), dir, ": no model.safetensors or model.safetensors.index.json");
    shard_names.push_back("model.safetensors");
  }
  for (const auto& name : shard_names) {
    files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / name).string(), index_tensors));
    for (const auto& [tname, view] : files_.back()->tensors()) {
      const auto index = index_tensors_.find(tname);
      SPECULA_CHECK(index == index_tensors_.end(), dir, ": tensor '", tname, "' appears in both ",
                    index->second->origin, " and ", view.origin);
      auto [it, inserted] = tensors_.emplace(tname, &view);
      SPECULA_CHECK(inserted, dir, ": tensor '", tname, "' appears in both ", it->second->origin,
                    " and ", view.origin);
    }
    for (const auto& [tname, view] : files_.back()->index_tensors()) {
      const auto weight = tensors_.find(tname);
      SPECULA_CHECK(weight == tensors_.end(), dir, ": tensor '", tname, "' appears in both ", weight->second->origin,
                    " and ", view.origin);
      auto [it, inserted] = index_tensors_.emplace(tname, &view);
      SPECULA_CHECK(inserted, dir, ": tensor '", tname, "' appears in both ", it->second->origin, " and ", view.origin);
    }
  }
}

const TensorView& Checkpoint::get(const std::string& name, const std::vector<int64_t>& shape) const {
  auto it = tensors_.find(name);
  SPECULA_CHECK(it != tensors_.end(), dir_, ": missing tensor '", name, "'");
  const TensorView& t = *it->second;
  SPECULA_CHECK(t.shape == shape, t.origin, ": tensor '", name, "' has shape ", shape_str(t.shape),
                ", expected ", shape_str(shape));
  return t;
}

}  // namespace specula
