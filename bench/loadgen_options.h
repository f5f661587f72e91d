#pragma once
// frost-loadgen's options and its flag table (core/flags/flags.h): the table parses the command line and
// prints --help and the usage after an error (exit 2).
#include <cstdint>
#include <optional>
#include <string>

namespace frost::loadgen {

struct Options {
  std::string addr = "localhost:50051";
  int concurrency = 1;
  int connections = 0;  // 0: one per lane
  int requests = 64;
  int warmup = 0;
  int max_tokens = 128;
  std::string prompt = "Once upon a time";
  std::optional<double> temperature;  // unset: the server's default
  std::optional<uint64_t> seed;       // unset: nondeterministic seeds
  double timeout_s = 300;             // deadline of each call, so a stuck server cannot hang the run
  double wait_ready_s = 0;
  int prompt_ids = 0;         // > 0: synthetic token-id prompts of this length
  int shared_prefix = 0;      // ids shared by every prompt, in front
  int background_prompt = 0;  // > 0: one extra client prefilling prompts of this length
  std::string metrics_addr;   // frostd's /metrics, scraped during the measured phase
  std::string http_addr;      // the OpenAI API: measured (and warm-up) requests go through /v1/completions
  // Speculative decoding per request (GenerateRequest.speculative, the OpenAI "speculative" object):
  // "" leaves it to the server; spec_tokens 0 = the server's k.
  std::string spec_method;
  int spec_tokens = 0;
};

// Parses argv[1..]: --help prints the help and exits 0; a bad flag or argument prints the error and the help
// to stderr and exits 2. --connections defaults to --concurrency.
Options parse_loadgen_flags(int argc, char** argv);

}  // namespace frost::loadgen
