#pragma once
// frostd's command-line overrides of config fields (`--set engine.max_running=8` and the flags that override
// one field, e.g. --listen for server.listen): the value is read through the config's own field table
// (server/server_config.cc, core/common/config_fields.h) as the YAML would read a plain scalar, so an
// override gets the YAML's checks and messages ("log.level: unknown value \"x\" (expected
// debug|info|warn|error)", an unknown key with the keys of its level and "did you mean").
#include <string>

#include "absl/status/status.h"
#include "server/server_config.h"

namespace frost::server {

// Sets the field at `path` ("section.key", "section.map.key") of `cfg` from `value`. INVALID_ARGUMENT naming
// the path and the value when the path is no field or the value is refused; cross-field rules are
// validate_server_config()'s.
absl::Status set_server_config_field(ServerConfig* cfg, const std::string& path, const std::string& value);

}  // namespace frost::server
