// Stop strings (text/stop_strings.h): a table of cases (a stop split over three pieces, a stop
// in the first piece, overlapping stops, a false start); on random pieces and stops the rule
// equals a plain search of each prefix of the text, and what a stream shows is always a prefix
// of the final text that holds no complete stop; generation stops where plain greedy decoding's
// text first holds the stop, with the same ids and text under every drafter (a stop inside an
// accepted run included), every block freed; beam search ends a hypothesis at the token that
// completes a stop, speculative beam search alike; the CLI streams exactly the JSON's text;
// invalid stop strings are refused naming the flag or key.
#include <catch2/catch.hpp>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "runtime/batch_run.h"
#include "runtime/generate.h"
#include "tests/test_runtime_support.h"
#include "tests/test_support.h"
#include "text/stop_strings.h"

namespace specula {
namespace {

struct Fed {
  std::vector<std::size_t> released;  // after each piece
  bool stopped = false;
  std::string text;
  std::string matched;
};

Fed feed_all(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopStrings rule(stops);
  Fed out;
  for (const std::string& piece : pieces) {
    out.stopped = rule.feed(piece);
    out.released.push_back(rule.released());
    if (out.stopped) break;
  }
  out.text = rule.text();
  out.matched = rule.matched().value_or("");
  return out;
}

// The rule by its definition: the first prefix of pieces whose text holds a stop; the cut where
// the earliest-beginning (then shortest) stop begins.
Fed reference(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  Fed out;
  std::string text;
  for (const std::string& piece : pieces) {
    text += piece;
    std::size_t best = std::string::npos;
    std::string winner;
    for (const std::string& stop : stops) {
      const std::size_t at = text.find(stop);
      if (at != std::string::npos && (at < best || (at == best && stop.size() < winner.size()))) best = at, winner = stop;
    }
    if (best != std::string::npos) {
      out.stopped = true;
      out.text = text.substr(0, best);
      out.matched = winner;
      return out;
    }
  }
  out.text = text;
  return out;
}

GenerateOptions greedy_options(const std::vector<int>& prompt) {
  GenerateOptions o;
  o.model_dir = test::model_dir("target-16m");
  o.prompt_ids = prompt;
  o.max_new_tokens = 32;
  o.threads = 1;
  return o;
}

DraftOptions ngram_draft() {
  DraftOptions d;
  d.method = DraftMethod::kNgram;
  d.gamma = 4;
  return d;
}

}  // namespace

TEST_CASE("stop strings: the table of cases", "[text]") {
  SECTION("a stop split over three pieces: held back until decided, then cut") {
    const Fed f = feed_all({"XYZ"}, {"aX", "Y", "Zb"});
    CHECK(f.stopped);
    CHECK(f.text == "a");
    CHECK(f.matched == "XYZ");
    CHECK(f.released == std::vector<std::size_t>{1, 1, 1});
  }
  SECTION("a stop in the first piece leaves no text") {
    const Fed f = feed_all({"END"}, {"END of it", "more"});
    CHECK(f.stopped);
    CHECK(f.text.empty());
    CHECK(f.released == std::vector<std::size_t>{0});
  }
  SECTION("overlapping stops: the one beginning first, then the shortest") {
    CHECK(feed_all({"bcd", "abc"}, {"xab", "cd"}).matched == "abc");
    CHECK(feed_all({"bcd", "abc"}, {"xab", "cd"}).text == "x");
    CHECK(feed_all({"bc", "abcd"}, {"abcd"}).matched == "abcd");
    CHECK(feed_all({"abc", "ab"}, {"abc"}).matched == "ab");
  }
  SECTION("a false start is released once it cannot begin a stop") {
    const Fed f = feed_all({"abc"}, {"xa", "b", "d", "a"});
    CHECK_FALSE(f.stopped);
    CHECK(f.text == "xabda");
    CHECK(f.released == std::vector<std::size_t>{1, 1, 4, 4});
  }
  SECTION("no stop strings: everything is released at once") {
    CHECK(feed_all({}, {"ab", "c"}).released == std::vector<std::size_t>{2, 3});
  }
  SECTION("end() releases the held tail") {
    StopStrings rule({"abc"});
    rule.feed("xab");
    CHECK(rule.released() == 1);
    rule.end();
    CHECK(rule.released() == 3);
  }
  CHECK_THROWS_WITH(StopStrings({"a", ""}), Catch::Contains("a stop string is empty"));
}

TEST_CASE("stop strings: the rule equals its definition, and a stream shows only final text", "[text]") {
  Philox rng(7, 0);
  const auto below = [&](int n) { return static_cast<int>(rng.uniform() * n); };
  const auto word = [&](int max_len) {
    std::string s(static_cast<std::size_t>(1 + below(max_len)), 'a');
    for (char& c : s) c = static_cast<char>('a' + below(3));
    return s;
  };
  int stopped = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops, pieces;
    for (int i = below(3) + 1; i > 0; --i) stops.push_back(word(4));
    for (int i = below(8) + 1; i > 0; --i) pieces.push_back(below(6) == 0 ? std::string() : word(3));
    const Fed got = feed_all(stops, pieces), want = reference(stops, pieces);
    INFO("trial " << trial);
    REQUIRE(got.stopped == want.stopped);
    REQUIRE(got.text == want.text);
    REQUIRE(got.matched == want.matched);
    stopped += got.stopped;
    // Shown text never shrinks, is always a prefix of the final text and holds no stop.
    std::size_t shown = 0;
    StopStrings rule(stops);
    for (const std::string& piece : pieces) {
      if (rule.feed(piece)) break;
      REQUIRE(rule.released() >= shown);
      shown = rule.released();
      REQUIRE(got.text.substr(0, shown) == std::string(rule.text().substr(0, shown)));
      // The held tail could still begin a stop: every held position is a proper prefix of one.
      if (shown < rule.text().size()) {
        const std::string tail(rule.text().substr(shown));
        CHECK(std::any_of(stops.begin(), stops.end(), [&](const std::string& s) { return s.starts_with(tail) && s != tail; }));
      }
    }
  }
  CHECK(stopped > 500);  // both outcomes are exercised
  CHECK(stopped < 2900);
}

TEST_CASE("stop strings: generation ends where plain decoding's text first holds the stop, under every drafter",
          "[runtime][speculative]") {
  const std::vector<int> prompt = test::reference_prompts().at(0);
  const nlohmann::json free = generate(test::store(), greedy_options(prompt));
  const std::vector<int> ids = free["ids"].get<std::vector<int>>();
  const Tokenizer& tokenizer = test::store().model(test::model_dir("target-16m")).tokenizer();
  // ends[t]: bytes of text after tokens 0..t, as the pieces stream it.
  std::vector<std::size_t> ends;
  std::string text;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    text += tokenizer.decode_piece(std::vector<int>(ids.begin(), ids.begin() + static_cast<long>(t)), ids[t]);
    ends.push_back(text.size());
  }
  REQUIRE(text == free["text"].get<std::string>());
  // A stop beginning inside token k's text and ending inside token k + 2's, whose first
  // occurrence is there; and the first token's text.
  std::vector<std::string> stops;
  for (std::size_t k = 1; k + 2 < ids.size() && stops.empty(); ++k) {
    const std::size_t begin = ends[k - 1] + 1, end = ends[k + 1] + 1;
    if (begin >= ends[k] || end >= ends[k + 2]) continue;
    const std::string stop = text.substr(begin, end - begin);
    if (text.find(stop) == begin) stops.push_back(stop);
  }
  REQUIRE(stops.size() == 1);
  stops.push_back(text.substr(0, std::min<std::size_t>(ends[0], 3)));
  REQUIRE_FALSE(stops.back().empty());

  bool cut_inside_a_run = false;
  for (const std::string& stop : stops) {
    const std::size_t at = text.find(stop);
    const std::size_t last = static_cast<std::size_t>(
        std::lower_bound(ends.begin(), ends.end(), at + stop.size()) - ends.begin());  // the token completing it
    const std::vector<int> want(ids.begin(), ids.begin() + static_cast<long>(last) + 1);
    GenerateOptions plain = greedy_options(prompt);
    plain.stop_strings = {stop, "never in this text \x01"};
    for (const DraftOptions& d : {DraftOptions{}, test::model_draft("draft-1m", 4, {}, 0),
                                  test::model_draft("draft-1m", 4, {2, 2}, 0), test::model_draft("draft-1m", 4, {}, 6),
                                  ngram_draft()}) {
      GenerateOptions o = plain;
      o.draft = d;
      const nlohmann::json got = generate(test::store(), o);
      INFO("stop '" << stop << "' drafter " << name_of(d.method) << " tree " << d.tree.size() << " budget " << d.tree_budget);
      CHECK(got["ids"].get<std::vector<int>>() == want);
      CHECK(got["text"] == text.substr(0, at));
      CHECK(got["finish_reason"] == "stop_string");
      CHECK(got["stop_string"] == stop);
      CHECK(got["stats"]["kv"]["blocks_in_use_at_end"] == 0);
      if (d.method == DraftMethod::kNone) continue;
      // Each step commits its accepted tokens and one more; more than were emitted: the stop
      // fell inside the last step's accepted run.
      const long committed = got["stats"]["accepted"].get<long>() + got["stats"]["steps"].get<long>();
      cut_inside_a_run = cut_inside_a_run || committed > static_cast<long>(want.size());
      if (d.method == DraftMethod::kModel) CHECK(got["stats"]["draft"]["kv_blocks_in_use_at_end"] == 0);
    }
  }
  CHECK(cut_inside_a_run);

  // In a batch, each request stops as it does alone; samples carry their own texts and reasons.
  std::vector<GenerateOptions> batch;
  for (int i = 0; i < 4; ++i) {
    batch.push_back(greedy_options(prompt));
    batch.back().stop_strings = {stops[static_cast<std::size_t>(i % 2)]};
    batch.back().draft = i < 2 ? ngram_draft() : test::model_draft("draft-1m", 4, {}, 0);
  }
  const BatchRun run = run_requests(test::store(), batch, 4);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    GenerateOptions alone = batch[i];
    alone.draft = {};
    CHECK(run.results[i]["ids"] == generate(test::store(), alone)["ids"]);
    CHECK(run.results[i]["finish_reason"] == "stop_string");
  }
  GenerateOptions sampled = greedy_options(prompt);
  sampled.sampling = SamplingOptions::sample(1.0f);
  sampled.num_samples = 3;
  sampled.stop_strings = {" "};
  const nlohmann::json samples = generate(test::store(), sampled);
  REQUIRE(samples["sample_texts"].size() == 3);
  for (std::size_t s = 0; s < 3; ++s) {
    const std::string reason = samples["finish_reasons"][s];
    CHECK((reason == "stop_string") == samples["stop_strings"][s].is_string());
    CHECK(samples["sample_texts"][s].get<std::string>().find(' ') == std::string::npos);
  }
}

TEST_CASE("stop strings under beam search: a hypothesis ends at the token completing one, speculative = plain",
          "[runtime][beam]") {
  GenerateOptions o = greedy_options(test::reference_prompts().at(0));
  o.sampling = SamplingOptions::beam(3, 0.0f);  // scores are sums: a hypothesis cut short by a stop ranks high
  o.num_samples = 3;
  o.max_new_tokens = 16;
  const nlohmann::json free = generate(test::store(), o);
  const std::string best = free["text"];
  const Tokenizer& tokenizer = test::store().model(test::model_dir("target-16m")).tokenizer();
  o.stop_strings = {best.substr(best.size() / 2, 2)};
  const nlohmann::json got = generate(test::store(), o);
  INFO("stop '" << o.stop_strings[0] << "'");
  REQUIRE(got["samples"].size() == 3);
  CHECK(got["samples"] != free["samples"]);
  int stopped = 0;
  for (std::size_t s = 0; s < 3; ++s) {
    const std::vector<int> ids = got["samples"][s];
    const StopStrings text = stop_text(tokenizer, o.stop_strings, ids);
    if (got["finish_reasons"][s] == "stop_string") {
      ++stopped;
      // The stop completes at the last token, not before it.
      CHECK(text.matched() == o.stop_strings[0]);
      CHECK(!stop_text(tokenizer, o.stop_strings, std::span(ids).first(ids.size() - 1)).matched());
    } else {
      CHECK(!text.matched());
    }
    CHECK(got["sample_texts"][s] == std::string(text.text()));
  }
  CHECK(stopped > 0);
  for (const DraftOptions& d : {test::model_draft("draft-1m", 4, {}, 0), ngram_draft()}) {
    GenerateOptions spec = o;
    spec.draft = d;
    const nlohmann::json speculative = generate(test::store(), spec);
    INFO(name_of(d.method));
    CHECK(speculative["samples"] == got["samples"]);
    CHECK(speculative["sample_texts"] == got["sample_texts"]);
    CHECK(speculative["stats"]["beam"]["hypotheses"] == got["stats"]["beam"]["hypotheses"]);
  }
}

TEST_CASE("stop strings: the CLI streams the JSON's text and refuses invalid stops", "[cli]") {
  const std::string gen = "generate --model '" + test::model_dir("target-16m") + "' --prompt 'def main():' --max-new-tokens 40 ";
  const test::Outcome json = test::run_specula(gen + "--stop 'self' --stop ')\n' --json");
  REQUIRE(json.status == 0);
  const nlohmann::json result = nlohmann::json::parse(json.out);
  REQUIRE(result["finish_reason"] == "stop_string");
  const test::Outcome streamed = test::run_specula(gen + "--stop 'self' --stop ')\n'");
  REQUIRE(streamed.status == 0);
  CHECK(streamed.out == result["text"].get<std::string>() + "\n");
  const test::Outcome unstopped = test::run_specula(gen + "--stop 'no such text'");
  const test::Outcome plain = test::run_specula(gen);
  CHECK(unstopped.out == plain.out);

  CHECK_THAT(test::run_specula(gen + "--stop ''").err, Catch::Contains("--stop: a stop string must hold 1 to 1024 bytes, got 0"));
  std::string many;
  for (int i = 0; i <= kMaxStopStrings; ++i) many += "--stop s" + std::to_string(i) + " ";
  CHECK_THAT(test::run_specula(gen + many).err, Catch::Contains("--stop: 17 stop strings, more than 16"));
}

}  // namespace specula
