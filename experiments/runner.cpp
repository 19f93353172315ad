#include "experiments/runner.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "base/error.h"
#include "experiments/arrivals.h"
#include "experiments/batch_summary.h"
#include "experiments/config.h"
#include "experiments/files.h"
#include "experiments/interrupt.h"
#include "experiments/machine.h"
#include "experiments/plan.h"
#include "experiments/results.h"
#include "experiments/summary.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const char* kResults = "results.jsonl";
const char* kExperiment = "experiment.json";

// CPU seconds this process has used, all threads together.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return out;
}

// An advisory lock (flock) on the output directory, held while a run or a report writes
// there: a second run into the same directory is refused instead of interleaving lines.
class DirectoryLock {
 public:
  explicit DirectoryLock(const fs::path& dir) {
    const std::string path = (dir / ".specula.lock").string();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    SPECULA_CHECK(fd_ >= 0, path, ": cannot open the lock file of the output directory");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      throw SpeculaError(detail::concat(dir.string(), ": another specula run or report is writing there (", path,
                                        " is locked); wait for it or choose another output directory (--out)"));
    }
  }
  ~DirectoryLock() { ::close(fd_); }  // closing releases the lock
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// Notes on results that do not make one complete, single-version experiment, for the
// summary's header and the terminal: "incomplete: N of M jobs" (M as the last session
// planned it) and "mixed versions: a, b" (each line's machine.version).
std::string result_notes(const SummaryDigest& digest, const nlohmann::json& record) {
  std::string notes;
  long long planned = 0;
  if (record.is_object() && record.contains("sessions") && record["sessions"].is_array() && !record["sessions"].empty() &&
      record["sessions"].back().is_object())
    planned = record["sessions"].back().value("planned_jobs", 0LL);
  if (planned > 0 && static_cast<long long>(digest.lines) < planned)
    notes += "incomplete: " + std::to_string(digest.lines) + " of " + std::to_string(planned) + " jobs\n";
  if (digest.versions.size() > 1) {
    std::string list;
    for (const std::string& v : digest.versions) list += (list.empty() ? "" : ", ") + v;
    notes += "mixed versions: " + list + " (results.jsonl holds lines of several specula versions)\n";
  }
  return notes;
}

// What every results line of this session records about the machine and the build (the
// line adds its threads and the load average when it started). The GPU is asked for only
// where a run uses one: a CPU session never loads the CUDA module.
nlohmann::json session_machine(GenerationBackend& backend, const Plan& plan) {
  const bool uses_gpu = std::any_of(plan.runs.begin(), plan.runs.end(), [](const PlannedRun& r) {
    return request_options(r.config).backend != BackendKind::kCpu;
  });
  return {{"cpu", cpu_model()},        {"logical_cores", std::thread::hardware_concurrency()},
          {"isa", matmul_isa_name()},  {"compiler", compiler_name()},
          {"build_type", build_type()}, {"version", specula_version()},
          {"gpu", uses_gpu ? backend.device_name() : "none"}};
}

// experiment.json, with this session appended to those of earlier runs into `dir`.
void record_session(const fs::path& dir, const ExperimentConfig& config, const nlohmann::json& machine,
                    std::size_t planned_jobs) {
  nlohmann::json record = read_json_if_any(dir / kExperiment);
  if (!record.is_object()) record = nlohmann::json::object();
  record["title"] = config.base.title;
  record["config"] = fs::absolute(config.file).string();
  nlohmann::json m = machine;
  m["threads"] = config.base.point.threads;
  record["sessions"].push_back(
      {{"started", now_utc()}, {"version", machine["version"]}, {"machine", m}, {"planned_jobs", planned_jobs}});
  write_text(dir / kExperiment, record.dump(2) + "\n");
}

// The Markdown lines under the title of summary.md, from experiment.json.
std::string provenance(const nlohmann::json& record) {
  if (!record.is_object() || !record.contains("sessions") || record["sessions"].empty()) return "";
  const nlohmann::json& last = record["sessions"].back();
  const nlohmann::json& m = last["machine"];
  const int threads = m.value("threads", 0);
  return "Config `" + record.value("config", "") + "` · specula " + last.value("version", "unknown") + " (" +
         m.value("compiler", "unknown") + ", " + m.value("build_type", "unknown") + ") · " + m.value("cpu", "unknown") +
         ", " + std::to_string(m.value("logical_cores", 0)) + " logical cores, " + m.value("isa", "unknown") +
         ", threads " + (threads == 0 ? std::string("default") : std::to_string(threads)) + " · GPU " +
         m.value("gpu", "none") + " · last session started " + last.value("started", "") + "\n";
}

void plot(const fs::path& dir, std::ostream& log) {
  std::vector<std::string> pythons;
  if (const char* chosen = std::getenv("SPECULA_PYTHON")) pythons.push_back(chosen);
  pythons.insert(pythons.end(), {"python3", "/usr/bin/python3"});
  std::string output;
  const auto python = std::find_if(pythons.begin(), pythons.end(), [&](const std::string& p) {
    return run_command({p, "-c", "import matplotlib"}, output) == 0;
  });
  if (python == pythons.end()) {
    log << "warning: no python3 with matplotlib (tried $SPECULA_PYTHON, python3, /usr/bin/python3): plots skipped, "
           "tables written; install python3-matplotlib or set SPECULA_PYTHON\n";
    return;
  }
  const int status = run_command({*python, std::string(SPECULA_SOURCE_DIR) + "/experiments/plot_results.py", dir.string()}, output);
  log << output;
  if (status != 0) log << "warning: experiments/plot_results.py failed (exit " << status << "): plots incomplete\n";
}

// The reports of `dir` from its results.jsonl, streamed through a SummaryDigest (neither a
// run nor a report keeps the lines in memory); read a second time only for the keys of the
// jobs above a bound.
void write_reports(const fs::path& dir, const std::vector<std::string>& formats, std::ostream& out, std::ostream& log) {
  const std::string path = (dir / kResults).string();
  SummaryDigest digest;
  const ResultsRead read =
      read_results(path, [&](const nlohmann::json& line, std::uint32_t ordinal) { digest.add(line, ordinal); });
  SPECULA_CHECK(read.lines > 0, path, ": no results to report");
  std::vector<RunSummary> summaries = summarize(digest);
  const std::vector<BatchSummary> batches = summarize_batches(digest);
  if (read.cut_line) log << path << ": ignoring a last line cut short by a crash\n";
  std::map<std::uint32_t, std::string> suspect_keys;  // line ordinal -> key
  for (const RunSummary& s : summaries)
    for (const std::uint32_t line : s.suspect_lines) suspect_keys[line];
  if (!suspect_keys.empty()) {
    read_results(path, [&](const nlohmann::json& line, std::uint32_t ordinal) {
      if (const auto it = suspect_keys.find(ordinal); it != suspect_keys.end()) it->second = line.at("key").get<std::string>();
    });
  }
  name_suspect_jobs(summaries, [&](std::uint32_t line) { return suspect_keys.at(line); });
  const nlohmann::json record = read_json_if_any(dir / kExperiment);
  const std::string notes = result_notes(digest, record);
  auto wanted = [&](const char* f) { return std::find(formats.begin(), formats.end(), f) != formats.end(); };
  if (wanted("csv")) {
    std::ofstream csv(dir / "summary.csv");
    write_summary_csv(summaries, csv);
    SPECULA_CHECK(csv, "cannot write '", (dir / "summary.csv").string(), "'");
    std::error_code ignored;
    fs::remove(dir / "batch_summary.csv", ignored);  // of an earlier report
    if (!batches.empty()) {
      std::ofstream batch_csv(dir / "batch_summary.csv");
      write_batch_csv(batches, batch_csv);
      SPECULA_CHECK(batch_csv, "cannot write '", (dir / "batch_summary.csv").string(), "'");
    }
  }
  if (wanted("md")) {
    std::ofstream md(dir / "summary.md");
    std::string header = provenance(record);
    if (!notes.empty()) header += "\n**" + notes.substr(0, notes.size() - 1) + "**\n";
    const std::string title = record.is_object() ? record.value("title", "") : "";
    if (!summaries.empty()) {
      write_summary_markdown(summaries, title, header, md);
      md << "\n";
    } else {
      md << "# " << (title.empty() ? "Experiment results" : title) << "\n\n" << header << "\n";
    }
    md << batch_markdown(batches);
    SPECULA_CHECK(md, "cannot write '", (dir / "summary.md").string(), "'");
  }
  if (wanted("png")) plot(dir, log);  // from summary.csv, which load_config requires with png
  out << notes << (summaries.empty() ? "" : terminal_tables(summaries))
      << (summaries.empty() || batches.empty() ? "" : "\n") << batch_terminal_table(batches) << "\nResults in "
      << dir.string() << "\n";
  log << sanity_warnings(summaries);
}

std::string duration(double seconds) {
  const long s = std::lround(seconds);
  char out[32];
  std::snprintf(out, sizeof out, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return out;
}

void print_plan(const ExperimentConfig& config, const Plan& plan, const fs::path& dir, std::size_t jobs, std::size_t done,
                std::ostream& out) {
  out << "config " << config.file << " -> " << dir.string() << "\n";
  std::string axes;
  for (const SweepAxis& a : config.sweep.axes) {
    axes += (axes.empty() ? "" : " × ") + a.key + " (" + std::to_string(a.values.size()) + ")";
  }
  out << "sweep: " << (axes.empty() ? "none" : axes);
  if (!config.sweep.exclusions.empty()) out << ", " << config.sweep.exclusions.size() << " exclusions";
  out << " = " << config.grid.size() << " points, " << plan.runs.size() << " distinct runs with baselines\n";
  std::map<std::string, int> per_domain;
  for (const Prompt& p : config.prompts) ++per_domain[p.domain];
  out << "prompts: " << config.prompts.size() << " (";
  for (auto it = per_domain.begin(); it != per_domain.end(); ++it) out << (it == per_domain.begin() ? "" : ", ") << it->first << " " << it->second;
  out << "), seeds " << nlohmann::json(config.base.run.seeds).dump() << ", repetitions " << config.base.run.repetitions << "\n";
  for (const PlannedRun& r : plan.runs) {
    out << "  #" << r.info.index << " " << r.info.role << " " << r.info.label << "  [" << r.info.id << "]";
    if (!r.info.baseline.empty()) out << " vs " << r.info.baseline;
    out << "\n      " << r.settings.dump() << "\n";
  }
  out << "jobs: " << jobs;
  if (jobs != plan.jobs.size()) out << " of the plan's " << plan.jobs.size() << " (this shard's)";
  out << ", " << done << " already in results.jsonl, " << jobs - done << " to run\n";
}

}  // namespace

int run_experiment(const std::string& config_path, GenerationBackend& backend, const RunOptions& options,
                   std::ostream& out, std::ostream& log) {
  const ExperimentConfig config = load_config(config_path);
  const Plan plan = make_plan(config);
  const fs::path base_dir = options.out_dir.empty() ? fs::path(config.base.output.directory) : fs::absolute(options.out_dir);
  const fs::path dir = options.shard ? base_dir / shard_directory(*options.shard) : base_dir;
  std::vector<const Job*> jobs;  // this run's: the plan's, or the shard's part of it
  const std::vector<int> shard_of = job_shards(plan, options.shard ? options.shard->count : 1);
  for (std::size_t j = 0; j < plan.jobs.size(); ++j)
    if (!options.shard || shard_of[j] == options.shard->index) jobs.push_back(&plan.jobs[j]);

  std::map<std::string, std::vector<std::vector<int>>> prompt_ids;  // target -> ids of each prompt
  for (const PlannedRun& r : plan.runs) {
    std::vector<std::vector<int>>& ids = prompt_ids[r.config.target];
    if (ids.empty()) {
      for (const Prompt& p : config.prompts) {
        try {
          ids.push_back(backend.tokenize(r.config.target, p));
        } catch (const SpeculaError& e) {
          throw SpeculaError(config.file + ": prompt '" + p.id + "': " + e.what());
        }
      }
    }
    const auto longest = std::max_element(ids.begin(), ids.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
    OptionNames names;  // the keys, in the run's config; "prompt" is its longest prompt
    names.name = [](std::string_view key) { return key == "prompt" ? std::string("its longest prompt") : std::string(key); };
    try {
      backend.validate(generate_options(r, *longest, config.base.run.seeds.front()), names);
    } catch (const SpeculaError& e) {
      throw SpeculaError(config.file + ": run '" + r.info.label + "' cannot run: " + e.what());
    }
  }

  std::optional<DirectoryLock> lock;  // held until the reports are written
  if (!options.dry_run) {
    fs::create_directories(dir);
    lock.emplace(dir);
  }
  std::set<std::string> planned, done;
  for (const Job* j : jobs) planned.insert(j->key);
  std::optional<std::string> refused;  // the first line of another config or a repeated key, once every line is checked
  const ResultsRead existing = read_results((dir / kResults).string(), [&](const nlohmann::json& line, std::uint32_t) {
    if (refused) return;
    const std::string key = line.at("key").get<std::string>();
    if (!planned.count(key))
      refused = detail::concat((dir / kResults).string(), " holds results of another config (key '", key,
                               "'); choose another output directory (--out)");
    else if (!done.insert(key).second)
      refused = detail::concat((dir / kResults).string(), " holds key '", key, "' twice");
  });
  if (refused) throw SpeculaError(*refused);
  if (options.dry_run) {
    print_plan(config, plan, dir, jobs.size(), done.size(), out);
    return 0;
  }

  if (!fs::exists(dir / "config.toml") || !fs::equivalent(config.file, dir / "config.toml")) {
    fs::copy_file(config.file, dir / "config.toml", fs::copy_options::overwrite_existing);
  }
  write_text(dir / "config.resolved.toml", config.resolved_toml);
  const nlohmann::json machine = session_machine(backend, plan);
  record_session(dir, config, machine, jobs.size());
  if (existing.cut_line) log << "results.jsonl: dropped a last line cut short by a crash; it is redone\n";

  ResultsWriter writer((dir / kResults).string(), existing.complete_bytes);
  const std::size_t todo = jobs.size() - done.size();
  std::size_t finished = 0;
  std::set<int> warm;  // runs with a warm-up generation in this session
  const auto start = Clock::now();
  for (const Job* next : jobs) {
    const Job& job = *next;
    if (done.count(job.key)) continue;
    if (interrupted()) {
      log << "interrupted after " << done.size() + finished << " of " << jobs.size()
          << " jobs; rerun the same command to resume\n";
      return kInterruptedExit;
    }
    const PlannedRun& run = plan.runs[job.run];
    const std::vector<std::vector<int>>& ids = prompt_ids[run.config.target];
    const bool batched = job.prompt == kAllPrompts;
    std::vector<GenerateOptions> requests;  // [1], or every prompt of a batched job
    for (std::size_t p = 0; p < config.prompts.size(); ++p)
      if (batched || static_cast<int>(p) == job.prompt) requests.push_back(generate_options(run, ids[p], job.seed));
    // Before a run's first timed job: one unrecorded generation (caches, pools, page faults).
    if (warm.insert(job.run).second) backend.generate(requests.front());
    nlohmann::json line = to_json(run.info);
    nlohmann::json where = machine;
    where["threads"] = backend.threads(requests.front());
    const std::array<double, 3> load = load_average();
    where["load_average"] = load;
    const std::vector<double> arrivals =
        batched ? poisson_arrivals(static_cast<int>(requests.size()), run.config.request_rate, job.seed) : std::vector<double>{};
    const double cpu_start = process_cpu_seconds();
    const auto wall_start = Clock::now();
    const nlohmann::json result = batched ? backend.generate_batch(requests, run.config.batch_size,
                                                                   run.config.request_rate > 0 ? arrivals : std::vector<double>{})
                                          : backend.generate(requests.front());
    // How much of the job's wall time the process had a CPU: below 1 per thread, others took it.
    where["wall_s"] = std::chrono::duration<double>(Clock::now() - wall_start).count();
    where["cpu_s"] = process_cpu_seconds() - cpu_start;
    line.update({{"key", job.key}, {"seed", job.seed}, {"repetition", job.repetition}, {"settings", run.settings},
                 {"machine", where}});
    if (batched) {
      // One line for the whole batch: its summary as the stats, each request's object in prompt order.
      line.update({{"prompt_id", "*"}, {"prompt_index", kAllPrompts}, {"domain", "all"}, {"stats", result.at("summary")}});
      nlohmann::json& out = line["requests"] = nlohmann::json::array();
      for (std::size_t p = 0; p < config.prompts.size(); ++p) {
        nlohmann::json r = result.at("results").at(p);
        r.update({{"prompt_id", config.prompts[p].id}, {"prompt_index", p}, {"domain", config.prompts[p].domain},
                  {"arrival_s", arrivals[p]}});
        out.push_back(std::move(r));
      }
    } else {
      const Prompt& prompt = config.prompts[static_cast<std::size_t>(job.prompt)];
      line.update({{"prompt_id", prompt.id}, {"prompt_index", job.prompt}, {"domain", prompt.domain}});
      line.update(result);
    }
    writer.append(line);
    ++finished;
    if (!options.quiet) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const double tps = line["stats"].value(batched ? "throughput_tokens_per_s" : "decode_tokens_per_s", 0.0);
      char rate[32];
      std::snprintf(rate, sizeof rate, "%.1f", tps);
      log << "[" << finished << "/" << todo << "] " << run.info.label << " | "
          << (batched ? std::to_string(requests.size()) + " prompts" : config.prompts[static_cast<std::size_t>(job.prompt)].id)
          << " seed " << job.seed << " rep " << job.repetition << " | " << rate << " tok/s | load " << load[0] << " | ETA "
          << duration(elapsed / finished * (todo - finished)) << "\n";
    }
  }
  if (options.shard) {
    out << "shard " << options.shard->index << " of " << options.shard->count << ": " << jobs.size() << " jobs in "
        << dir.string() << "; once every shard has finished, `specula report " << base_dir.string()
        << "` joins them and writes the summaries\n";
    return 0;
  }
  write_reports(dir, config.base.output.formats, out, log);
  return 0;
}

int report_experiment(const std::string& dir, std::ostream& out, std::ostream& log) {
  const fs::path path = fs::path(dir) / kResults;
  const DirectoryLock lock(dir);
  if (const std::vector<fs::path> shards = shard_directories(dir); !shards.empty()) {
    std::vector<std::unique_ptr<DirectoryLock>> shard_locks;  // no shard may be running
    for (const fs::path& shard : shards) shard_locks.push_back(std::make_unique<DirectoryLock>(shard));
    join_shards(dir, log);
  }
  SPECULA_CHECK(fs::is_regular_file(path), path.string(), ": no results to report");
  write_reports(dir, {"csv", "md", "png"}, out, log);
  return 0;
}

}  // namespace specula
