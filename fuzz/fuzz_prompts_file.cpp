// Fuzz target: a run.prompts_file (JSON lines {id, domain, prompt}) as select_prompts reads
// it, with and without a domain filter. Seeds: configs/prompts/dev.jsonl.
#include "experiments/prompts.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  specula::RunConfig run;
  run.prompts_file = specula::fuzz::input_file("prompts.jsonl", data, size);
  FUZZ_PARSER(specula::select_prompts(run, {}, "fuzz.toml"));
  run.domains = {"python"};
  run.prompts_per_domain = 2;
  FUZZ_PARSER(specula::select_prompts(run, {}, "fuzz.toml"));
  return 0;
}
