#include "server/server_config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/common/fs.h"
#include "core/common/status_macros.h"
#include "core/common/device_spec.h"

namespace frost::server {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// A schema entry: one key of a section, bound to the struct member it fills. The same table
// drives parsing, the unknown-key check and format_server_config(), so they cannot drift.
struct Field {
  std::string key;
  // `value` is the YAML node under the key; `path` is "section.key" for messages.
  std::function<absl::Status(const YAML::Node& value, const std::string& path)> parse;
  std::function<std::string()> format;  // the current value as a YAML scalar
};

struct Section {
  std::string key;
  std::vector<Field> fields;
};

absl::Status field_error(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

std::string yaml_quoted(const std::string& s) {
  return absl::StrCat("\"", absl::Utf8SafeCHexEscape(s), "\"");
}

// How a node reads in a message: a scalar's text in quotes, else its kind.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return yaml_quoted(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// A plain (unquoted, non-block) scalar: the only form numbers and booleans may take, so
// `max_running: "4"` is rejected as a string rather than silently converted.
bool is_plain_scalar(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "?"; }

// An integer member of any width (int32_t in most sections, int64_t where the core struct a section is
// declares one, e.g. jobs.checkpoint_every); [lo, hi] must fit the member.
template <typename T>
Field int_field(const char* key, T* out, int64_t lo, int64_t hi) {
  static_assert(std::is_integral_v<T>, "int_field: not an integer member");
  Field f;
  f.key = key;
  f.parse = [out, lo, hi](const YAML::Node& value, const std::string& path) {
    int64_t v = 0;
    if (!is_plain_scalar(value) || !absl::SimpleAtoi(value.Scalar(), &v)) {
      return field_error(path, absl::StrCat("expected an integer, got ", describe(value)));
    }
    if (v < lo || v > hi) {
      return field_error(path, absl::StrCat("must be in [", lo, ", ", hi, "], got ", v));
    }
    *out = static_cast<T>(v);
    return absl::OkStatus();
  };
  f.format = [out] { return absl::StrCat(*out); };
  return f;
}

// A byte size: a plain integer, optionally followed by KiB, MiB, GiB or TiB (no space), in [lo, hi].
Field bytes_field(const char* key, int64_t* out, int64_t lo, int64_t hi) {
  Field f;
  f.key = key;
  f.parse = [out, lo, hi](const YAML::Node& value, const std::string& path) {
    const std::string text = is_plain_scalar(value) ? value.Scalar() : "";
    std::string digits = text;
    int shift = 0;
    for (const auto& [suffix, sh] : {std::pair{"KiB", 10}, std::pair{"MiB", 20}, std::pair{"GiB", 30},
                                    std::pair{"TiB", 40}}) {
      if (absl::EndsWith(text, suffix)) {
        digits = text.substr(0, text.size() - 3);
        shift = sh;
      }
    }
    int64_t v = 0;
    if (digits.empty() || !absl::SimpleAtoi(digits, &v) || v < 0 || (shift > 0 && v > (hi >> shift))) {
      return field_error(path, absl::StrCat("expected a byte size (an integer, optionally with KiB, MiB, GiB or "
                                            "TiB), got ", describe(value)));
    }
    v <<= shift;
    if (v < lo || v > hi) return field_error(path, absl::StrCat("must be in [", lo, ", ", hi, "] bytes, got ", v));
    *out = v;
    return absl::OkStatus();
  };
  f.format = [out] { return absl::StrCat(*out); };
  return f;
}

// Shortest decimal form that reads back as the same double; whole numbers without exponent.
std::string format_double(double v) {
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  for (int precision = 1; precision < 17; ++precision) {
    const std::string s = absl::StrFormat("%.*g", precision, v);
    double back = 0;
    if (absl::SimpleAtod(s, &back) && back == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

Field double_field(const char* key, double* out, double lo, double hi) {
  Field f;
  f.key = key;
  f.parse = [out, lo, hi](const YAML::Node& value, const std::string& path) {
    double v = 0;
    if (!is_plain_scalar(value) || !absl::SimpleAtod(value.Scalar(), &v) || !std::isfinite(v)) {
      return field_error(path, absl::StrCat("expected a finite number, got ", describe(value)));
    }
    if (v < lo || v > hi) {
      return field_error(path, absl::StrCat("must be in [", format_double(lo), ", ", format_double(hi),
                                            "], got ", value.Scalar()));
    }
    *out = v;
    return absl::OkStatus();
  };
  f.format = [out] { return format_double(*out); };
  return f;
}

Field bool_field(const char* key, bool* out) {
  Field f;
  f.key = key;
  f.parse = [out](const YAML::Node& value, const std::string& path) {
    const std::string s = is_plain_scalar(value) ? absl::AsciiStrToLower(value.Scalar()) : "";
    if (s == "true") {
      *out = true;
    } else if (s == "false") {
      *out = false;
    } else {
      return field_error(path, absl::StrCat("expected true or false, got ", describe(value)));
    }
    return absl::OkStatus();
  };
  f.format = [out] { return std::string(*out ? "true" : "false"); };
  return f;
}

// Any scalar, quoted or not, is a string (`listen: 8080` is the string "8080").
Field string_field(const char* key, std::string* out) {
  Field f;
  f.key = key;
  f.parse = [out](const YAML::Node& value, const std::string& path) {
    if (!value.IsScalar()) {
      return field_error(path, absl::StrCat("expected a string, got ", describe(value)));
    }
    *out = value.Scalar();
    return absl::OkStatus();
  };
  f.format = [out] { return yaml_quoted(*out); };
  return f;
}

template <typename E>
Field enum_field(const char* key, E* out, std::vector<std::pair<std::string, E>> names) {
  std::vector<std::string> keys;
  for (const auto& [name, e] : names) keys.push_back(name);
  const std::string expected = absl::StrJoin(keys, "|");
  Field f;
  f.key = key;
  f.parse = [out, names, expected](const YAML::Node& value, const std::string& path) {
    if (!value.IsScalar()) {
      return field_error(path, absl::StrCat("expected one of ", expected, ", got ", describe(value)));
    }
    for (const auto& [name, e] : names) {
      if (value.Scalar() == name) {
        *out = e;
        return absl::OkStatus();
      }
    }
    return field_error(
        path, absl::StrCat("unknown value ", yaml_quoted(value.Scalar()), " (expected ", expected, ")"));
  };
  f.format = [out, names] {
    for (const auto& [name, e] : names) {
      if (*out == e) return name;
    }
    return std::string("?");
  };
  return f;
}

// model.dtype's names: every weight format the model loader knows (core/model/model_config.h).
std::vector<std::pair<std::string, WeightDtype>> weight_dtype_names() {
  std::vector<std::pair<std::string, WeightDtype>> names;
  for (WeightDtype d : kWeightDtypes) names.emplace_back(weight_dtype_name(d), d);
  return names;
}

absl::Status for_each_entry(
    const YAML::Node& node, const std::string& prefix, const std::vector<std::string>& known,
    const std::function<absl::Status(size_t, const YAML::Node&, const std::string&)>& on_entry);

// A nested mapping of fields (server.tls): parsed like a section, formatted as indented lines.
Field map_field(const char* key, std::vector<Field> fields) {
  Field f;
  f.key = key;
  f.parse = [fields](const YAML::Node& value, const std::string& path) {
    if (!value.IsMap() && !value.IsNull())
      return field_error(path, absl::StrCat("expected a mapping, got ", describe(value)));
    std::vector<std::string> keys;
    for (const Field& sub : fields) keys.push_back(sub.key);
    return for_each_entry(value, path, keys, [&](size_t j, const YAML::Node& v, const std::string& p) {
      return fields[j].parse(v, p);
    });
  };
  f.format = [fields] {
    std::string out;
    for (const Field& sub : fields) absl::StrAppend(&out, "\n    ", sub.key, ": ", sub.format());
    return out;
  };
  return f;
}

// The whole schema, bound to the members of `cfg` (which must outlive the result).
std::vector<Section> schema(ServerConfig* cfg) {
  ServerSection& s = cfg->server;
  ModelSection& m = cfg->model;
  EngineSection& e = cfg->engine;
  LimitsSection& l = cfg->limits;
  return {
      {"server",
       {string_field("listen", &s.listen), string_field("metrics_listen", &s.metrics_listen),
        bool_field("reflection", &s.reflection),
        int_field("max_receive_message_bytes", &s.max_receive_message_bytes, 1, kInt32Max),
        int_field("max_send_message_bytes", &s.max_send_message_bytes, 1, kInt32Max),
        double_field("drain_timeout_s", &s.drain_timeout_s, 0, 86400),
        int_field("max_concurrent_streams", &s.max_concurrent_streams, 1, kInt32Max),
        int_field("max_header_list_bytes", &s.max_header_list_bytes, 1024, 16 << 20),
        int_field("keepalive_time_s", &s.keepalive_time_s, 1, 86400 * 7),
        int_field("keepalive_timeout_s", &s.keepalive_timeout_s, 1, 3600),
        int_field("keepalive_min_ping_interval_s", &s.keepalive_min_ping_interval_s, 0, 86400),
        int_field("keepalive_max_ping_strikes", &s.keepalive_max_ping_strikes, 0, 1000),
        int_field("max_connection_idle_s", &s.max_connection_idle_s, 0, 86400 * 365),
        int_field("max_connection_age_s", &s.max_connection_age_s, 0, 86400 * 365),
        int_field("max_connection_age_grace_s", &s.max_connection_age_grace_s, 0, 86400),
        int_field("write_stall_timeout_s", &s.write_stall_timeout_s, 0, 86400),
        map_field("tls", {string_field("cert_file", &s.tls.cert_file), string_field("key_file", &s.tls.key_file),
                          string_field("client_ca_file", &s.tls.client_ca_file),
                          bool_field("require_client_cert", &s.tls.require_client_cert),
                          int_field("reload_interval_s", &s.tls.reload_interval_s, 1, 86400),
                          bool_field("metrics", &s.tls.metrics)}),
        map_field("http",
                  {string_field("listen", &s.http.listen),
                   int_field("max_connections", &s.http.max_connections, 1, 4096),
                   int_field("max_connections_per_address", &s.http.max_connections_per_address, 1, 4096),
                   int_field("max_body_bytes", &s.http.max_body_bytes, 1024, 1 << 30),
                   int_field("max_header_bytes", &s.http.max_header_bytes, 1024, 1 << 20),
                   int_field("head_timeout_s", &s.http.head_timeout_s, 1, 3600),
                   int_field("read_timeout_s", &s.http.read_timeout_s, 1, 3600),
                   int_field("keep_alive_timeout_s", &s.http.keep_alive_timeout_s, 1, 3600)}),
        map_field("kv_events", {bool_field("enabled", &s.kv_events.enabled),
                                string_field("endpoint", &s.kv_events.endpoint),
                                string_field("topic", &s.kv_events.topic),
                                string_field("replay_endpoint", &s.kv_events.replay_endpoint),
                                int_field("buffer_steps", &s.kv_events.buffer_steps, 1, 10000000),
                                int_field("queue_batches", &s.kv_events.queue_batches, 1, 10000000)})}},
      {"model",
       {string_field("path", &m.path),
        enum_field("dtype", &m.dtype, weight_dtype_names()),
        int_field("threads", &m.threads, 0, 1024),
        enum_field("kernels", &m.kernels,
                   {{"auto", std::string("auto")},
                    {"avx512", std::string("avx512")},
                    {"avx2", std::string("avx2")},
                    {"scalar", std::string("scalar")}}),
        string_field("device", &m.device), bool_field("cuda_graphs", &m.cuda_graphs),
        string_field("chat_template", &m.chat_template)}},
      {"engine",
       {int_field("max_running", &e.max_running, 1, 65536),
        int_field("max_waiting", &e.max_waiting, 0, kInt32Max),
        int_field("max_batch_tokens", &e.max_batch_tokens, 1, 1 << 20),
        int_field("kv_block_tokens", &e.kv_block_tokens, 1, 4096),
        bytes_field("kv_cache_bytes", &e.kv_cache_bytes, 0, int64_t{1} << 50),
        bool_field("kv_cache_prefault", &e.kv_cache_prefault),
        bool_field("prefix_caching", &e.prefix_caching),
        int_field("max_context", &e.max_context, 0, kInt32Max),
        enum_field("kv_codec", &e.kv_codec,
                   {{"fp32", KvCodecKind::kF32},
                    {"fp16", KvCodecKind::kF16},
                    {"bf16", KvCodecKind::kBF16},
                    {"int8", KvCodecKind::kInt8},
                    {"int4", KvCodecKind::kInt4},
                    {"kvsplice", KvCodecKind::kKvSplice}}),
        string_field("kv_repair", &e.kv_repair), string_field("kv_splice", &e.kv_splice),
        int_field("constraint_compile_threads", &e.constraint_compile_threads, 1, 64),
        int_field("constraint_compile_queue", &e.constraint_compile_queue, 0, 65536),
        int_field("constraint_compile_timeout_ms", &e.constraint_compile_timeout_ms, 1, 600000),
        bytes_field("constraint_cache_bytes", &e.constraint_cache_bytes, 0, int64_t{1} << 40),
        // Speculative decoding (core/generate/spec_options.h). `server` is a request's word for "the
        // default", not a default itself, so the config offers only the three methods.
        map_field(
            "speculative",
            {enum_field(
                 "method", &e.speculative.method,
                 {{"off", SpecMethod::kOff}, {"ngram", SpecMethod::kNgram}, {"suffix", SpecMethod::kSuffix}}),
             int_field("num_tokens", &e.speculative.num_tokens, 1, 32),
             int_field("max_batch", &e.speculative.max_batch, 0, 65536),
             bool_field("adaptive", &e.speculative.adaptive),
             bool_field("jump_forward", &e.speculative.jump_forward),
             int_field("jump_forward_tokens", &e.speculative.jump_forward_tokens, 0, 256),
             int_field("suffix_cache_tokens", &e.speculative.suffix_cache_tokens, 0, int64_t{1} << 30)})}},
      {"limits",
       {int_field("max_prompt_bytes", &l.max_prompt_bytes, 1, kInt32Max),
        int_field("max_prompt_tokens", &l.max_prompt_tokens, 0, kInt32Max),
        int_field("max_new_tokens", &l.max_new_tokens, 1, kInt32Max),
        int_field("max_stop_strings", &l.max_stop_strings, 0, kInt32Max),
        int_field("max_stop_bytes", &l.max_stop_bytes, 1, kInt32Max),
        int_field("max_stop_token_ids", &l.max_stop_token_ids, 0, 100000),
        int_field("max_logprobs", &l.max_logprobs, 0, kInt32Max),
        int_field("max_predict_texts", &l.max_predict_texts, 1, 100000)}},
      {"prediction",
       {int_field("threads", &cfg->prediction.threads, 1, 64),
        int_field("max_queued", &cfg->prediction.max_queued, 0, 1000000)}},
      {"jobs",
       {bool_field("enabled", &cfg->jobs.enabled), string_field("state_dir", &cfg->jobs.state_dir),
        string_field("data_root", &cfg->jobs.data_root),
        int_field("max_queued", &cfg->jobs.max_queued, 1, 1000000),
        int_field("concurrency", &cfg->jobs.concurrency, 1, 64),
        int_field("threads", &cfg->jobs.threads, 1, 1024), int_field("nice", &cfg->jobs.nice, 0, 19),
        int_field("checkpoint_every", &cfg->jobs.checkpoint_every, 1, kInt32Max),
        int_field("max_attempts", &cfg->jobs.max_attempts, 1, 1000),
        int_field("state_retry_s", &cfg->jobs.state_retry_s, 1, 3600),
        int_field("max_inline_rows", &cfg->jobs.max_inline_rows, 0, kInt32Max),
        int_field("max_inline_bytes", &cfg->jobs.max_inline_bytes, 0, kInt32Max)}},
      {"artifacts",
       {string_field("follow_state_dir", &cfg->artifacts.follow_state_dir),
        int_field("follow_interval_ms", &cfg->artifacts.follow_interval_ms, 100, 3600000)}},
      {"auth",
       {string_field("admin_token_file", &cfg->auth.admin_token_file),
        string_field("admin_token_env", &cfg->auth.admin_token_env),
        string_field("user_token_file", &cfg->auth.user_token_file),
        string_field("user_token_env", &cfg->auth.user_token_env),
        bool_field("require_for_inference", &cfg->auth.require_for_inference),
        bool_field("open_render", &cfg->auth.open_render),
        bool_field("require_tls", &cfg->auth.require_tls)}},
      {"log",
       {enum_field("level", &cfg->log.level,
                   {{"debug", LogLevel::kDebug},
                    {"info", LogLevel::kInfo},
                    {"warn", LogLevel::kWarn},
                    {"error", LogLevel::kError}})}},
  };
}

std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

// Walks the entries of mapping `node` in document order, rejecting non-string, unknown and
// duplicate keys, and hands each value to `on_entry(index_in_known, value, path)`.
// A null node (a section with every key commented out) is an empty mapping.
absl::Status for_each_entry(
    const YAML::Node& node, const std::string& prefix, const std::vector<std::string>& known,
    const std::function<absl::Status(size_t, const YAML::Node&, const std::string&)>& on_entry) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) {
    return field_error(prefix.empty() ? "config" : prefix,
                       absl::StrCat("expected a mapping, got ", describe(node)));
  }
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) {
      return field_error(prefix.empty() ? "config" : prefix,
                         absl::StrCat("keys must be strings, got ", describe(it->first)));
    }
    const std::string path = join_path(prefix, it->first.Scalar());
    size_t index = 0;
    while (index < known.size() && known[index] != it->first.Scalar()) ++index;
    if (index == known.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown key '", path, "' (expected one of ", absl::StrJoin(known, "|"), ")"));
    }
    if (!seen.insert(path).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate key '", path, "'"));
    }
    FROST_RETURN_IF_ERROR(on_entry(index, it->second, path));
  }
  return absl::OkStatus();
}

absl::Status parse_document(const YAML::Node& root, ServerConfig* cfg) {
  std::vector<Section> sections = schema(cfg);
  std::vector<std::string> section_keys;
  for (const Section& s : sections) section_keys.push_back(s.key);
  return for_each_entry(
      root, "", section_keys, [&](size_t i, const YAML::Node& section_node, const std::string& section_path) {
        const std::vector<Field>& fields = sections[i].fields;
        std::vector<std::string> field_keys;
        for (const Field& f : fields) field_keys.push_back(f.key);
        return for_each_entry(section_node, section_path, field_keys,
                              [&](size_t j, const YAML::Node& value, const std::string& path) {
                                return fields[j].parse(value, path);
                              });
      });
}

// "host:port" → port as written, or "" when the value is not HOST:PORT.
std::string split_port(const std::string& value) {
  const size_t colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == value.size()) return "";
  const std::string host = value.substr(0, colon);
  const std::string port = value.substr(colon + 1);
  for (char c : port) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return "";
  }
  if (host.front() == '[') {
    // [IPv6]: hex digits, ':' and '.' (IPv4-mapped) between the brackets.
    if (host.size() < 3 || host.back() != ']') return "";
    for (size_t i = 1; i + 1 < host.size(); ++i) {
      const char c = host[i];
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return "";
    }
    return port;
  }
  // Hostname or IPv4.
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
      return "";
    }
  }
  return port;
}

// Where each YAML document of a stream starts, from yaml-cpp's event parser. YAML::LoadAll() (yaml-cpp
// 0.7) never returns on a stream whose document starts with a stray flow entry ("," or " ,x" at the top
// level): its parser hands out empty documents without consuming the ',', and LoadAll collects them until
// memory runs out (found by tests/fuzz/server_config_fuzz.cc). A document that starts where the previous
// one started is that case; parse_server_config() reports it as a syntax error before calling LoadAll().
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

HostPort split_host_port(const std::string& value) {
  const size_t colon = value.rfind(':');
  HostPort hp{value.substr(0, colon), value.substr(colon + 1)};
  if (hp.host.size() >= 2 && hp.host.front() == '[') hp.host = hp.host.substr(1, hp.host.size() - 2);
  return hp;
}

absl::Status validate_host_port(const std::string& field, const std::string& value) {
  const std::string port = split_port(value);
  if (port.empty()) {
    return field_error(field, absl::StrCat("expected HOST:PORT, got ", yaml_quoted(value)));
  }
  int64_t n = -1;
  if (port.size() > 5 || !absl::SimpleAtoi(port, &n) || n > 65535) {
    return field_error(field, absl::StrCat("port must be in [0, 65535], got ", yaml_quoted(value)));
  }
  return absl::OkStatus();
}

// server.kv_events: ZeroMQ endpoints of the transports frost's publisher is meant for (ZeroMQ itself reports
// the rest of an address at bind/connect, naming the field: server/kv_events_publisher.cc).
static absl::Status validate_kv_events(const ServerConfig& cfg) {
  const KvEventsSection& k = cfg.server.kv_events;
  if (!k.enabled) return absl::OkStatus();
  auto transport_ok = [](const std::string& ep) {
    for (const char* t : {"tcp://", "ipc://", "inproc://"})
      if (absl::StartsWith(ep, t) && ep.size() > std::string(t).size()) return true;
    return false;
  };
  if (!transport_ok(k.endpoint))
    return field_error("server.kv_events.endpoint",
                       absl::StrCat("expected a ZeroMQ endpoint tcp://HOST:PORT, ipc://PATH or "
                                    "inproc://NAME, got ", yaml_quoted(k.endpoint)));
  if (!k.replay_endpoint.empty() && !transport_ok(k.replay_endpoint))
    return field_error("server.kv_events.replay_endpoint",
                       absl::StrCat("expected \"\" (off) or a ZeroMQ endpoint tcp://HOST:PORT, ipc://PATH or "
                                    "inproc://NAME, got ", yaml_quoted(k.replay_endpoint)));
  if (!cfg.engine.prefix_caching)
    return field_error("server.kv_events.enabled",
                       "true needs engine.prefix_caching: true (without the prefix cache no block is "
                       "ever stored)");
  return absl::OkStatus();
}

absl::Status validate_server_config(const ServerConfig& cfg) {
  FROST_RETURN_IF_ERROR(validate_host_port("server.listen", cfg.server.listen));
  FROST_RETURN_IF_ERROR(validate_host_port("server.metrics_listen", cfg.server.metrics_listen));
  const std::string grpc_port = split_port(cfg.server.listen);
  if (grpc_port != "0" && grpc_port == split_port(cfg.server.metrics_listen)) {
    return field_error("server.metrics_listen",
                       absl::StrCat("port ", grpc_port, " is also server.listen's port, got ",
                                    yaml_quoted(cfg.server.metrics_listen)));
  }
  if (!cfg.server.http.listen.empty()) {
    FROST_RETURN_IF_ERROR(validate_host_port("server.http.listen", cfg.server.http.listen));
    const std::string http_port = split_port(cfg.server.http.listen);
    if (http_port != "0" && (http_port == grpc_port || http_port == split_port(cfg.server.metrics_listen))) {
      return field_error("server.http.listen", absl::StrCat("port ", http_port, " is also server.listen's or "
                                                            "server.metrics_listen's port, got ",
                                                            yaml_quoted(cfg.server.http.listen)));
    }
  }
  FROST_RETURN_IF_ERROR(validate_kv_events(cfg));
  if (cfg.model.path.empty()) return field_error("model.path", "must not be empty");
  // model.device: what a device executor does not run is refused here, naming the field that asks for it.
  absl::StatusOr<DeviceSpec> device = parse_device(cfg.model.device);
  if (!device.ok()) return device.status();
  const char* dtype = weight_dtype_name(cfg.model.dtype);
  if (device->kind == DeviceKind::kCpu && !weight_dtype_on_cpu(cfg.model.dtype))
    return field_error("model.dtype", absl::StrCat(dtype, " weights: ", dtype,
                                                   " is a device format (model.device cuda or reference; "
                                                   "model.device is ", yaml_quoted(cfg.model.device),
                                                   "); the CPU serves ", weight_dtype_choices(false)));
  if (device->kind != DeviceKind::kCpu) {
    const std::string on = absl::StrCat(" runs only on model.device cpu (model.device is ", yaml_quoted(cfg.model.device), ")");
    if (!weight_dtype_on_device(cfg.model.dtype))
      return field_error("model.dtype", absl::StrCat(dtype, " weights: a device serves ",
                                                     weight_dtype_choices(true), "; ", dtype, on));
    if (cfg.engine.kv_codec == KvCodecKind::kKvSplice) return field_error("engine.kv_codec", absl::StrCat("kvsplice", on));
    if (!cfg.engine.kv_repair.empty())
      return field_error("engine.kv_repair", absl::StrCat("a KV repair operator", on));
    if (!cfg.engine.kv_splice.empty()) return field_error("engine.kv_splice", absl::StrCat("a KVSplice set", on));
  }
  const TlsSection& tls = cfg.server.tls;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return field_error(tls.cert_file.empty() ? "server.tls.cert_file" : "server.tls.key_file",
                       "must be set together with server.tls.key_file / cert_file");
  }
  if (tls.cert_file.empty()) {
    if (!tls.client_ca_file.empty())
      return field_error("server.tls.client_ca_file", "needs server.tls.cert_file and key_file");
    if (tls.metrics) return field_error("server.tls.metrics", "needs server.tls.cert_file and key_file");
    if (cfg.auth.require_tls)
      return field_error("auth.require_tls", "needs server.tls.cert_file and key_file (the server would be plaintext)");
  }
  if (tls.require_client_cert && tls.client_ca_file.empty())
    return field_error("server.tls.require_client_cert", "needs server.tls.client_ca_file");
  if (cfg.jobs.enabled && cfg.jobs.state_dir.empty())
    return field_error("jobs.state_dir", "must not be empty");
  if (cfg.jobs.enabled && cfg.jobs.data_root.empty())
    return field_error("jobs.data_root", "must not be empty");
  if (cfg.jobs.enabled && !cfg.artifacts.follow_state_dir.empty()) {
    return field_error("artifacts.follow_state_dir",
                       absl::StrCat("needs jobs.enabled: false (a frostd that trains writes its own store; a "
                                    "follower only reads another's), got ",
                                    yaml_quoted(cfg.artifacts.follow_state_dir)));
  }
  if (cfg.engine.max_batch_tokens < cfg.engine.max_running) {
    return field_error("engine.max_batch_tokens",
                       absl::StrCat("must be >= engine.max_running (", cfg.engine.max_running,
                                    ": every running sequence decodes one token per step), got ",
                                    cfg.engine.max_batch_tokens));
  }
  if (cfg.engine.max_context > 0 && cfg.limits.max_prompt_tokens > cfg.engine.max_context) {
    return field_error("limits.max_prompt_tokens",
                       absl::StrCat("must be <= engine.max_context (", cfg.engine.max_context, "), got ",
                                    cfg.limits.max_prompt_tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerConfig> parse_server_config(const std::string& yaml_text) {
  ServerConfig cfg;
  try {
    std::istringstream stream(yaml_text);
    YAML::Parser parser(stream);
    DocumentStarts events;
    while (parser.HandleNextDocument(events)) {
      const std::vector<YAML::Mark>& at = events.starts;
      if (at.size() >= 2 && at[at.size() - 1].pos == at[at.size() - 2].pos) {
        return absl::InvalidArgumentError(absl::StrCat("config: YAML syntax error at line ", at.back().line + 1,
                                                       ", column ", at.back().column + 1,
                                                       ": a document cannot start here (a ',' outside [ ] or { }?)"));
      }
    }
    const std::vector<YAML::Node> docs = YAML::LoadAll(yaml_text);
    if (docs.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: expected one YAML document, got ", docs.size()));
    }
    if (!docs.empty()) FROST_RETURN_IF_ERROR(parse_document(docs[0], &cfg));
  } catch (const YAML::ParserException& e) {
    // yaml-cpp marks are 0-based.
    return absl::InvalidArgumentError(absl::StrCat("config: YAML syntax error at line ", e.mark.line + 1,
                                                   ", column ", e.mark.column + 1, ": ", e.msg));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("config: ", e.what()));
  }
  FROST_RETURN_IF_ERROR(validate_server_config(cfg));
  return cfg;
}

absl::Status check_config_paths(const ServerConfig& cfg) {
  struct Item {
    const char* field;
    const std::string& path;
    PathKind kind;
    bool applies;
  };
  const bool builtin = absl::StartsWith(cfg.model.path, "builtin:");
  const Item items[] = {
      {"model.path", cfg.model.path, PathKind::kDirectory, !builtin},
      {"model.chat_template", cfg.model.chat_template, PathKind::kRegularFile, true},
      {"server.tls.cert_file", cfg.server.tls.cert_file, PathKind::kRegularFile, true},
      {"server.tls.key_file", cfg.server.tls.key_file, PathKind::kRegularFile, true},
      {"server.tls.client_ca_file", cfg.server.tls.client_ca_file, PathKind::kRegularFile, true},
      {"auth.admin_token_file", cfg.auth.admin_token_file, PathKind::kRegularFile, true},
      {"auth.user_token_file", cfg.auth.user_token_file, PathKind::kRegularFile, true},
      {"engine.kv_repair", cfg.engine.kv_repair, PathKind::kRegularFile, true},
      {"engine.kv_splice", cfg.engine.kv_splice, PathKind::kRegularFile, true},
      {"jobs.state_dir", cfg.jobs.state_dir, PathKind::kDirectoryOrAbsent, cfg.jobs.enabled},
      {"jobs.data_root", cfg.jobs.data_root, PathKind::kDirectoryOrAbsent, cfg.jobs.enabled},
      {"artifacts.follow_state_dir", cfg.artifacts.follow_state_dir, PathKind::kDirectoryOrAbsent, true},
  };
  for (const Item& it : items) {
    if (!it.applies || it.path.empty()) continue;
    FROST_RETURN_IF_ERROR(check_path(it.field, it.path, it.kind));
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerConfig> load_server_config(const std::string& path) {
  // A directory, FIFO or device is refused naming it (a FIFO is opened non-blocking: no hang).
  constexpr int64_t kMaxConfigBytes = 4 << 20;
  absl::StatusOr<std::string> text = read_file(path, kMaxConfigBytes, "4 MiB");
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("cannot read config file '", path, "': ", text.status().message()));
  }
  absl::StatusOr<ServerConfig> cfg = parse_server_config(*text);
  if (!cfg.ok()) {
    return absl::Status(cfg.status().code(), absl::StrCat(path, ": ", cfg.status().message()));
  }
  return cfg;
}

std::string format_server_config(const ServerConfig& cfg) {
  ServerConfig copy = cfg;  // schema() binds mutable members; format only reads them
  std::string out;
  for (const Section& section : schema(&copy)) {
    absl::StrAppend(&out, section.key, ":\n");
    for (const Field& f : section.fields) {
      absl::StrAppend(&out, "  ", f.key, ": ", f.format(), "\n");
    }
  }
  return out;
}

}  // namespace frost::server
