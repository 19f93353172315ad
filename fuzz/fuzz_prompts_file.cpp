// Fuzz target: a prompts file (JSON lines {id, domain, prompt | messages | prompt_ids}) as
// select_prompts reads it for run.prompts_file, with and without a domain filter, and as
// `generate --prompts-file` reads it (domain optional). Seeds: configs/prompts/dev.jsonl.
#include "experiments/prompts.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  specula::RunConfig run;
  run.prompts_file = specula::fuzz::input_file("prompts.jsonl", data, size);
  FUZZ_PARSER(specula::select_prompts(run, {}, "fuzz.toml"));
  run.domains = {"python"};
  run.prompts_per_domain = 2;
  FUZZ_PARSER(specula::select_prompts(run, {}, "fuzz.toml"));
  FUZZ_PARSER(specula::read_prompts_file(run.prompts_file, "--prompts-file", specula::DomainField::kOptional));
  return 0;
}
