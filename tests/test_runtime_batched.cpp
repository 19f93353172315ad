// Samples and beams now run side by side in batched forwards; their outputs must be exactly
// what the one-sequence-at-a-time engine gave. tests/data/pre-seam-outputs.json holds the
// output of `specula generate --json` at commit 3d264b0, before the engine seam, for beam
// search (widths 1, 2 and 4, length penalties 0.6 and 1.5, n-best lists with their scores)
// and for --num-samples with plain sampling, draft-model chains and trees, n-grams and
// dynamic trees, on two prompts: every case must give the same ids and samples, and the beam
// scores to f32 rounding.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>

#include "runtime/decoders.h"
#include "tests/test_support.h"

namespace specula {

TEST_CASE("batched samples and beams give the outputs of the one-sequence engine", "[runtime][batch]") {
  const auto recorded = nlohmann::json::parse(test::slurp(test::source_path("tests/data/pre-seam-outputs.json")));
  REQUIRE(recorded.at("cases").size() >= 20);
  std::size_t step = test::kSanitized ? 4 : 1;
  for (std::size_t i = 0; i < recorded["cases"].size(); i += step) {
    const auto& c = recorded["cases"][i];
    std::string args = "generate --json --threads 1";
    for (const auto& a : c.at("args")) {
      std::string word = a.get<std::string>();
      if (word.rfind("models/", 0) == 0) word = test::source_path(word);
      args += " '" + word + "'";
    }
    INFO(args);
    const test::Outcome o = test::run_specula(args);
    REQUIRE(o.status == 0);
    const auto got = nlohmann::json::parse(o.out);
    const auto& want = c.at("result");
    CHECK(got.at("ids") == want.at("ids"));
    CHECK(got.value("samples", nlohmann::json()) == want.at("samples"));
    // Beam scores to f32 rounding: the recording predates the matrix product's one-chain
    // reduction order (issue 19), which moves log-probabilities by ~1e-7 relative.
    const auto beam = got.at("stats").value("beam", nlohmann::json());
    REQUIRE(beam.is_null() == want.at("beam").is_null());
    if (beam.is_null()) continue;
    const auto& hyps = beam.at("hypotheses");
    REQUIRE(hyps.size() == want.at("beam").at("hypotheses").size());
    for (std::size_t h = 0; h < hyps.size(); ++h)
      for (const char* key : {"score", "sum_logprob"}) {
        const double a = hyps[h].at(key).get<double>(), b = want.at("beam").at("hypotheses")[h].at(key).get<double>();
        CHECK(std::abs(a - b) <= 1e-5 * std::abs(b));
      }
  }
}

TEST_CASE("a sample ends at any of the model's EOS ids (Llama 3 lists several)", "[runtime][batch]") {
  GenerateOptions options;
  options.max_new_tokens = 10;
  const std::vector<int> eos = {128001, 128009};
  std::vector<int> emitted;
  const TokenSink sink = [&](int, int token, const TokenLogprob*) { emitted.push_back(token); };
  std::vector<int> ids;
  CHECK_FALSE(emit_token(ids, 5, options, eos, 0, sink));
  CHECK(emit_token(ids, 128009, options, eos, 0, sink));  // the second EOS id stops too
  CHECK(emit_token(ids, 7, options, eos, 0, sink));       // complete: nothing more is appended
  CHECK(ids == std::vector<int>{5, 128009});
  CHECK(emitted == ids);
}

}  // namespace specula
