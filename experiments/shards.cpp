#include "experiments/shards.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <regex>
#include <tuple>

#include "base/error.h"
#include "experiments/config.h"
#include "experiments/files.h"
#include "experiments/results.h"

namespace specula {
namespace fs = std::filesystem;

namespace {

constexpr int kMaxShards = 1 << 20;

struct ShardEntry {
  int index = 0;  // I of shard-I-of-N
  int count = 1;  // N
  fs::path path;
  auto operator<=>(const ShardEntry&) const = default;
};

// The shard directories of `dir`, by (index, count, path).
std::vector<ShardEntry> shard_entries(const fs::path& dir) {
  static const std::regex name("shard-([0-9]{1,7})-of-([0-9]{1,7})");
  std::vector<ShardEntry> out;
  std::error_code error;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, error)) {
    std::smatch m;
    const std::string file = e.path().filename().string();
    if (e.is_directory() && std::regex_match(file, m, name)) out.push_back({std::stoi(m[1]), std::stoi(m[2]), e.path()});
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Shard parse_shard(std::string_view text) {
  const auto refuse = [&] {
    return SpeculaError(detail::concat("--shard: expected I/N with 0 <= I < N <= ", kMaxShards, ", got '", text, "'"));
  };
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos) throw refuse();
  Shard s;
  const auto whole = [](std::string_view part, int& value) {
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), value);
    return !part.empty() && error == std::errc() && end == part.data() + part.size();
  };
  if (!whole(text.substr(0, slash), s.index) || !whole(text.substr(slash + 1), s.count)) throw refuse();
  if (s.count < 1 || s.count > kMaxShards || s.index < 0 || s.index >= s.count) throw refuse();
  return s;
}

std::string shard_directory(const Shard& shard) {
  return "shard-" + std::to_string(shard.index) + "-of-" + std::to_string(shard.count);
}

std::vector<int> job_shards(const Plan& plan, int count) {
  std::map<std::tuple<int, uint64_t, int>, int> units;  // (prompt, seed, repetition) -> ordinal
  std::vector<int> out;
  out.reserve(plan.jobs.size());
  for (const Job& j : plan.jobs) {
    const auto [it, added] = units.try_emplace({j.prompt, j.seed, j.repetition}, static_cast<int>(units.size()));
    out.push_back(it->second % count);
  }
  return out;
}

std::vector<fs::path> shard_directories(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const ShardEntry& shard : shard_entries(dir)) out.push_back(shard.path);
  return out;
}

void join_shards(const fs::path& dir, std::ostream& log) {
  const auto shards = shard_entries(dir);
  SPECULA_CHECK(!shards.empty(), dir.string(), ": no shard directories (shard-I-of-N) to join");
  const int count = shards.front().count;
  for (const ShardEntry& shard : shards)
    SPECULA_CHECK(shard.count == count, dir.string(), ": shards of different counts (", shards.front().path.filename().string(),
                  " and ", shard.path.filename().string(), "); keep the shards of one run");
  const fs::path first = shards.front().path;
  const nlohmann::json record = read_json_if_any(first / "experiment.json");
  const std::string config = record.is_object() ? record.value("config", std::string("CONFIG")) : "CONFIG";
  for (int i = 0; i < count; ++i)
    SPECULA_CHECK(i < static_cast<int>(shards.size()) && shards[static_cast<std::size_t>(i)].index == i,
                  dir.string(), ": shard ", i, " of ", count, " is missing (", (dir / shard_directory({i, count})).string(),
                  "): run `specula run ", config, " --shard ", i, "/", count, "`");

  const fs::path resolved = first / "config.resolved.toml";
  const std::string resolved_text = read_text(resolved);
  for (const ShardEntry& shard : shards)
    SPECULA_CHECK(read_text(shard.path / "config.resolved.toml") == resolved_text, shard.path.string(),
                  ": another config than ", first.string(), "'s (config.resolved.toml differs)");
  const Plan plan = make_plan(load_config(resolved.string()));
  const std::vector<int> shard_of = job_shards(plan, count);
  std::map<std::string, std::size_t> job_of;
  for (std::size_t j = 0; j < plan.jobs.size(); ++j) job_of.emplace(plan.jobs[j].key, j);

  std::vector<std::string> lines(plan.jobs.size());  // each job's line, in plan order
  for (const ShardEntry& shard : shards) {
    const int index = shard.index;
    const std::string results = (shard.path / "results.jsonl").string();
    std::size_t held = 0;
    const ResultsRead read = read_results(results, [&](const nlohmann::json& line, std::uint32_t) {
      const std::string key = line.at("key").get<std::string>();
      const auto it = job_of.find(key);
      SPECULA_CHECK(it != job_of.end() && shard_of[it->second] == index, results, ": key '", key,
                    "' is not a job of shard ", index, " of ", count);
      SPECULA_CHECK(lines[it->second].empty(), results, ": key '", key, "' twice");
      lines[it->second] = line.dump();
      ++held;
    });
    if (read.cut_line) log << results << ": ignoring a last line cut short by a crash\n";
    const auto wanted = static_cast<std::size_t>(std::count(shard_of.begin(), shard_of.end(), index));
    SPECULA_CHECK(held == wanted, shard.path.string(), ": shard ", index, " of ", count, " holds ", held, " of its ", wanted,
                  " jobs; finish it with `specula run ", config, " --shard ", index, "/", count, "`");
  }

  const fs::path joined = dir / "results.jsonl";
  const nlohmann::json existing = read_json_if_any(dir / "experiment.json");
  SPECULA_CHECK(!fs::exists(joined) || (existing.is_object() && existing.contains("joined_shards")), joined.string(),
                " holds results no join of shards wrote; join the shards in a directory of their own");
  {
    const fs::path partial = dir / "results.jsonl.joining";
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    for (const std::string& line : lines) out << line << '\n';
    SPECULA_CHECK(out.flush(), "cannot write '", partial.string(), "'");
    out.close();
    fs::rename(partial, joined);
  }
  fs::copy_file(first / "config.toml", dir / "config.toml", fs::copy_options::overwrite_existing);
  fs::copy_file(resolved, dir / "config.resolved.toml", fs::copy_options::overwrite_existing);
  // Every shard's sessions, then the join's: the last shard's machine and the plan's job count.
  nlohmann::json joined_record = record.is_object() ? record : nlohmann::json::object();
  joined_record["joined_shards"] = count;
  joined_record["sessions"] = nlohmann::json::array();
  for (const ShardEntry& shard : shards) {
    const nlohmann::json shard_record = read_json_if_any(shard.path / "experiment.json");
    if (!shard_record.is_object() || !shard_record.contains("sessions")) continue;
    for (nlohmann::json session : shard_record["sessions"]) {
      session["shard"] = shard_directory({shard.index, count});
      joined_record["sessions"].push_back(std::move(session));
    }
  }
  if (!joined_record["sessions"].empty()) {
    nlohmann::json join = joined_record["sessions"].back();  // the last shard's last session: the machine shown
    join.erase("shard");
    join["planned_jobs"] = plan.jobs.size();
    join["joined_shards"] = count;
    joined_record["sessions"].push_back(std::move(join));
  }
  write_text(dir / "experiment.json", joined_record.dump(2) + "\n");
  log << "joined " << count << " shards: " << plan.jobs.size() << " jobs in " << joined.string() << "\n";
}

}  // namespace specula
