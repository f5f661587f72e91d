// Fuzz target: frostd's YAML configuration (server/server_config.h parse_server_config) on arbitrary text.
//
// Promises checked: a rejection is INVALID_ARGUMENT (never an escaped exception or INTERNAL); an accepted
// config passes validate_server_config(), and format_server_config() of it parses back to the same config
// ("parse_server_config() of the result gives back cfg", server_config.h).
#include <cstdint>
#include <string>

#include "server/server_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<server::ServerConfig> cfg = server::parse_server_config(text);
  if (!cfg.ok()) {
    fuzz::check_rejection(cfg.status());
    return 0;
  }
  const absl::Status valid = server::validate_server_config(*cfg);
  FROST_FUZZ_CHECK(valid.ok(), "accepted config fails validation: " + valid.ToString());
  const std::string formatted = server::format_server_config(*cfg);
  absl::StatusOr<server::ServerConfig> back = server::parse_server_config(formatted);
  FROST_FUZZ_CHECK(back.ok(), "format_server_config() output does not parse: " + back.status().ToString() +
                                  "\n--- formatted:\n" + formatted);
  const std::string again = server::format_server_config(*back);
  FROST_FUZZ_CHECK(again == formatted,
                   "config changed in a format/parse round trip:\n--- first:\n" + formatted + "--- second:\n" + again);
  return 0;
}
