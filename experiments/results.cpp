#include "experiments/results.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <utility>

#include "base/error.h"
#include "runtime/generate_options.h"

namespace specula {

namespace {

// The fields resuming, run_info_from and the summaries read, each of its JSON type.
void check_line_shape(const nlohmann::json& j, const std::string& where) {
  using Check = bool (nlohmann::json::*)() const noexcept;
  const std::pair<const char*, Check> fields[] = {
      {"key", &nlohmann::json::is_string},        {"run", &nlohmann::json::is_string},
      {"run_index", &nlohmann::json::is_number_integer}, {"role", &nlohmann::json::is_string},
      {"baseline", &nlohmann::json::is_string},   {"drafter", &nlohmann::json::is_string},
      {"shape", &nlohmann::json::is_string},      {"tree", &nlohmann::json::is_string},
      {"gamma", &nlohmann::json::is_number_integer}, {"nodes", &nlohmann::json::is_number_integer},
      {"variant", &nlohmann::json::is_string},    {"strategy", &nlohmann::json::is_string},
      {"label", &nlohmann::json::is_string},      {"coords", &nlohmann::json::is_object},
      {"prompt_id", &nlohmann::json::is_string},  {"prompt_index", &nlohmann::json::is_number_integer},
      {"domain", &nlohmann::json::is_string},
      {"seed", &nlohmann::json::is_number_unsigned}, {"repetition", &nlohmann::json::is_number_integer},
      {"settings", &nlohmann::json::is_object},   {"machine", &nlohmann::json::is_object},
      {"stats", &nlohmann::json::is_object},
  };
  for (const auto& [field, is_type] : fields) {
    const auto it = j.find(field);
    SPECULA_CHECK(it != j.end(), where, ": results line without '", field, "' (a corrupt results file)");
    SPECULA_CHECK(((*it).*is_type)(), where, ": results line field '", field, "' = ", it->dump(),
                  " has the wrong type (a corrupt results file)");
  }
  const long long gamma = j.at("gamma").get<long long>();  // the summaries loop over the depths
  SPECULA_CHECK(gamma >= 0 && gamma <= kMaxGamma, where, ": results line field 'gamma' = ", gamma, " is outside [0, ",
                kMaxGamma, "]");
  for (const auto& [name, value] : j.at("coords").items())
    SPECULA_CHECK(value.is_string(), where, ": results line coords['", name, "'] = ", value.dump(), " must be a string");
  const auto& stats = j.at("stats");
  if (const auto it = stats.find("accepted_per_depth"); it != stats.end()) {
    SPECULA_CHECK(it->is_array() && std::all_of(it->begin(), it->end(), [](const nlohmann::json& v) { return v.is_number(); }),
                  where, ": results line stats.accepted_per_depth = ", it->dump(), " must be a list of numbers");
  }
  for (const char* object : {"time_breakdown", "sampler", "kv", "draft"}) {
    if (const auto it = stats.find(object); it != stats.end())
      SPECULA_CHECK(it->is_object(), where, ": results line stats.", object, " = ", it->dump(), " must be an object");
  }
  if (const auto it = stats.find("time_breakdown"); it != stats.end()) {
    for (const auto& [name, value] : it->items())
      SPECULA_CHECK(value.is_number(), where, ": results line stats.time_breakdown.", name, " = ", value.dump(),
                    " must be a number");
  }
  const auto& machine = j.at("machine");
  for (const char* number : {"cpu_s", "wall_s"}) {
    if (const auto it = machine.find(number); it != machine.end())
      SPECULA_CHECK(it->is_number(), where, ": results line machine.", number, " = ", it->dump(), " must be a number");
  }
  if (const auto it = machine.find("threads"); it != machine.end())  // the summaries read it as an int
    SPECULA_CHECK(it->is_number_integer() && it->get<long long>() >= 0 && it->get<long long>() <= INT_MAX, where,
                  ": results line machine.threads = ", it->dump(), " must be a whole number in [0, ", INT_MAX, "]");
  const auto& settings = j.at("settings");  // what the summary tables show of the run
  if (const auto it = settings.find("target"); it != settings.end())
    SPECULA_CHECK(it->is_string(), where, ": results line settings.target = ", it->dump(), " must be a string");
  if (const auto it = settings.find("sampling"); it != settings.end()) {
    SPECULA_CHECK(it->is_object(), where, ": results line settings.sampling = ", it->dump(), " must be an object");
    const auto all = [](const nlohmann::json& list, auto is) { return list.is_array() && std::all_of(list.begin(), list.end(), is); };
    const auto is_pair = [](const nlohmann::json& p) {
      return p.is_array() && p.size() == 2 && p[0].is_number_integer() && p[1].is_number();
    };
    for (const auto& [name, value] : it->items()) {
      const auto [ok, expected] =
          name == "strategy"        ? std::pair{value.is_string(), "a string"}
          : name == "logit_bias"    ? std::pair{all(value, is_pair), "a list of [token, value]"}
          : name == "banned_tokens" ? std::pair{all(value, [](const nlohmann::json& t) { return t.is_number_integer(); }), "a list of integers"}
          : name == "stop_strings"  ? std::pair{all(value, [](const nlohmann::json& s) { return s.is_string(); }), "a list of strings"}
                                    : std::pair{value.is_number(), "a number"};
      SPECULA_CHECK(ok, where, ": results line settings.sampling.", name, " = ", value.dump(), " must be ", expected);
    }
  }
  if (const auto it = j.find("requests"); it != j.end()) {  // a batched job: each request's object
    if (const auto size = settings.find("batch_size"); size != settings.end())
      SPECULA_CHECK(size->is_number_integer() && size->get<long long>() >= 0 && size->get<long long>() <= INT_MAX, where,
                    ": results line settings.batch_size = ", size->dump(), " must be a whole number in [0, ", INT_MAX, "]");
    SPECULA_CHECK(it->is_array() && !it->empty(), where, ": results line field 'requests' must be a non-empty list");
    for (const nlohmann::json& r : *it)
      SPECULA_CHECK(r.is_object() && r.contains("latency") && r["latency"].is_object() && r.contains("stats") &&
                        r["stats"].is_object() && r.contains("prompt_id") && r["prompt_id"].is_string(),
                    where, ": results line 'requests' holds ", r.dump().substr(0, 80),
                    ", not a request's {prompt_id, latency, stats}");
    for (const char* figure : {"throughput_tokens_per_s", "mean_occupancy", "rows_per_forward"})
      SPECULA_CHECK(stats.contains(figure) && stats[figure].is_number(), where, ": results line of a batched job without "
                    "a number stats.", figure);
    for (const char* figure : {"latency_s", "ttft_s", "inter_token_s"})
      SPECULA_CHECK(stats.contains(figure) && stats[figure].is_object(), where, ": results line of a batched job without "
                    "an object stats.", figure);
  }
  if (const auto it = j.at("machine").find("version"); it != j.at("machine").end())
    SPECULA_CHECK(it->is_string(), where, ": results line machine.version = ", it->dump(), " must be a string");
}

}  // namespace

ResultsRead read_results(const std::string& path, const ResultsLineVisitor& visit) {
  ResultsRead read;
  std::ifstream in(path, std::ios::binary);
  if (!in) return read;
  std::string line;
  for (long long number = 1; std::getline(in, line); ++number) {
    if (in.eof()) {  // no newline after it: cut by a crash
      read.cut_line = true;
      break;
    }
    if (line.find_first_not_of(" \t\r") != std::string::npos) {
      const std::string where = path + ":" + std::to_string(number);
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      SPECULA_CHECK(j.is_object(), where, ": not a JSON object (a corrupt results file)");
      check_line_shape(j, where);
      SPECULA_CHECK(read.lines < UINT32_MAX, where, ": more than ", UINT32_MAX, " results lines");
      try {
        visit(j, read.lines++);
      } catch (const nlohmann::json::exception& e) {  // a field of the wrong type check_line_shape does not check
        throw SpeculaError(detail::concat(where, ": a results line has a field of the wrong shape: ", e.what()));
      }
    }
    read.complete_bytes += line.size() + 1;
  }
  return read;
}

ResultsWriter::ResultsWriter(const std::string& path, std::uintmax_t complete_bytes) : path_(path) {
  if (std::filesystem::exists(path)) std::filesystem::resize_file(path, complete_bytes);
  out_.open(path, std::ios::binary | std::ios::app);
  SPECULA_CHECK(out_, "cannot open '", path, "' for writing");
}

void ResultsWriter::append(const nlohmann::json& line) {
  out_ << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n' << std::flush;
  SPECULA_CHECK(out_, "writing '", path_, "' failed");
}

}  // namespace specula
