#include "server/server_config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
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
#include <variant>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/common/config_fields.h"
#include "core/common/device_spec.h"
#include "core/common/fs.h"
#include "core/common/status_macros.h"
#include "server/config_overrides.h"

namespace frost::server {
namespace {

constexpr double kInt32Max = std::numeric_limits<int32_t>::max();

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

// A plain (unquoted, non-block) scalar is the only form numbers and booleans may take, so `max_running: "4"`
// is rejected as a string rather than silently converted: a quoted scalar is FieldInput::Form::kString.
FieldInput yaml_input(const YAML::Node& node) {
  FieldInput in;
  if (node.IsScalar()) {
    in.text = node.Scalar();
    in.form = node.Tag() == "?" ? FieldInput::Form::kText : FieldInput::Form::kString;
  } else {
    in.form = FieldInput::Form::kOther;
  }
  in.shown = describe(node);
  return in;
}

// model.dtype's names: every weight format the model loader knows (core/model/model_config.h).
std::vector<std::pair<std::string, WeightDtype>> weight_dtype_names() {
  std::vector<std::pair<std::string, WeightDtype>> names;
  for (WeightDtype d : kWeightDtypes) names.emplace_back(weight_dtype_name(d), d);
  return names;
}

// The whole schema, one ConfigField per key (core/common/config_fields.h), "section.key" or
// "section.map.key": the same table drives parsing, the unknown-key check (with "did you mean") and
// format_server_config(), so they cannot drift. The engine section's EngineOptions fields are the core's own
// declaration (core/generate/engine_options.cc).
std::vector<ConfigField<ServerSection>> server_fields() {
  using S = ServerSection;
  using R = ConfigRange;
  return fields_of<S>({
      {string_field<S>("listen", &S::listen), string_field<S>("metrics_listen", &S::metrics_listen),
       bool_field<S>("reflection", &S::reflection),
       int_field<S>("max_receive_message_bytes", &S::max_receive_message_bytes, R::in(1, kInt32Max)),
       int_field<S>("max_send_message_bytes", &S::max_send_message_bytes, R::in(1, kInt32Max)),
       number_field<S>("drain_timeout_s", &S::drain_timeout_s, R::in(0, 86400)),
       int_field<S>("max_concurrent_streams", &S::max_concurrent_streams, R::in(1, kInt32Max)),
       int_field<S>("max_header_list_bytes", &S::max_header_list_bytes, R::in(1024, 16 << 20)),
       int_field<S>("keepalive_time_s", &S::keepalive_time_s, R::in(1, 86400 * 7)),
       int_field<S>("keepalive_timeout_s", &S::keepalive_timeout_s, R::in(1, 3600)),
       int_field<S>("keepalive_min_ping_interval_s", &S::keepalive_min_ping_interval_s, R::in(0, 86400)),
       int_field<S>("keepalive_max_ping_strikes", &S::keepalive_max_ping_strikes, R::in(0, 1000)),
       int_field<S>("max_connection_idle_s", &S::max_connection_idle_s, R::in(0, 86400 * 365)),
       int_field<S>("max_connection_age_s", &S::max_connection_age_s, R::in(0, 86400 * 365)),
       int_field<S>("max_connection_age_grace_s", &S::max_connection_age_grace_s, R::in(0, 86400)),
       int_field<S>("write_stall_timeout_s", &S::write_stall_timeout_s, R::in(0, 86400))},
      group<S, TlsSection>(
          "tls", &S::tls,
          {string_field<TlsSection>("cert_file", &TlsSection::cert_file),
           string_field<TlsSection>("key_file", &TlsSection::key_file),
           string_field<TlsSection>("client_ca_file", &TlsSection::client_ca_file),
           bool_field<TlsSection>("require_client_cert", &TlsSection::require_client_cert),
           int_field<TlsSection>("reload_interval_s", &TlsSection::reload_interval_s, R::in(1, 86400)),
           bool_field<TlsSection>("metrics", &TlsSection::metrics)}),
      group<S, HttpSection>(
          "http", &S::http,
          {string_field<HttpSection>("listen", &HttpSection::listen),
           int_field<HttpSection>("max_connections", &HttpSection::max_connections, R::in(1, 4096)),
           int_field<HttpSection>("max_connections_per_address", &HttpSection::max_connections_per_address,
                                  R::in(1, 4096)),
           int_field<HttpSection>("max_body_bytes", &HttpSection::max_body_bytes, R::in(1024, 1 << 30)),
           int_field<HttpSection>("max_header_bytes", &HttpSection::max_header_bytes, R::in(1024, 1 << 20)),
           int_field<HttpSection>("head_timeout_s", &HttpSection::head_timeout_s, R::in(1, 3600)),
           int_field<HttpSection>("read_timeout_s", &HttpSection::read_timeout_s, R::in(1, 3600)),
           int_field<HttpSection>("keep_alive_timeout_s", &HttpSection::keep_alive_timeout_s,
                                  R::in(1, 3600))}),
      group<S, KvEventsSection>(
          "kv_events", &S::kv_events,
          {bool_field<KvEventsSection>("enabled", &KvEventsSection::enabled),
           string_field<KvEventsSection>("endpoint", &KvEventsSection::endpoint),
           string_field<KvEventsSection>("topic", &KvEventsSection::topic),
           string_field<KvEventsSection>("replay_endpoint", &KvEventsSection::replay_endpoint),
           int_field<KvEventsSection>("buffer_steps", &KvEventsSection::buffer_steps, R::in(1, 10000000)),
           int_field<KvEventsSection>("queue_batches", &KvEventsSection::queue_batches, R::in(1, 10000000))}),
  });
}

std::vector<ConfigField<ServerConfig>> schema() {
  using C = ServerConfig;
  using R = ConfigRange;
  using M = ModelSection;
  using E = EngineSection;
  using L = LimitsSection;
  using J = JobsSection;
  using A = AuthSection;
  return fields_of<C>({
      group<C, ServerSection>("server", &C::server, server_fields()),
      group<C, M>(
          "model", &C::model,
          {string_field<M>("path", &M::path), enum_field<M>("dtype", &M::dtype, weight_dtype_names()),
           int_field<M>("threads", &M::threads, R::in(0, 1024)),
           enum_field<M>("kernels", &M::kernels,
                         std::vector<std::pair<std::string, std::string>>{
                             {"auto", "auto"}, {"avx512", "avx512"}, {"avx2", "avx2"}, {"scalar", "scalar"}}),
           string_field<M>("device", &M::device), bool_field<M>("cuda_graphs", &M::cuda_graphs),
           string_field<M>("chat_template", &M::chat_template)}),
      group<C, E>("engine", &C::engine,
                  fields_of<E>({group<E, EngineOptions>("", base_of<EngineOptions>(), engine_option_fields()),
                                {int_field<E>("max_context", &E::max_context, R::in(0, kInt32Max)),
                                 enum_field<E>("kv_codec", &E::kv_codec,
                                               std::vector<std::pair<std::string, KvCodecKind>>{
                                                   {"fp32", KvCodecKind::kF32},
                                                   {"fp16", KvCodecKind::kF16},
                                                   {"bf16", KvCodecKind::kBF16},
                                                   {"int8", KvCodecKind::kInt8},
                                                   {"int4", KvCodecKind::kInt4},
                                                   {"kvsplice", KvCodecKind::kKvSplice}}),
                                 string_field<E>("kv_repair", &E::kv_repair),
                                 string_field<E>("kv_splice", &E::kv_splice)}})),
      group<C, L>("limits", &C::limits,
                  {int_field<L>("max_prompt_bytes", &L::max_prompt_bytes, R::in(1, kInt32Max)),
                   int_field<L>("max_prompt_tokens", &L::max_prompt_tokens, R::in(0, kInt32Max)),
                   int_field<L>("max_new_tokens", &L::max_new_tokens, R::in(1, kInt32Max)),
                   int_field<L>("max_stop_strings", &L::max_stop_strings, R::in(0, kInt32Max)),
                   int_field<L>("max_stop_bytes", &L::max_stop_bytes, R::in(1, kInt32Max)),
                   int_field<L>("max_stop_token_ids", &L::max_stop_token_ids, R::in(0, 100000)),
                   int_field<L>("max_logprobs", &L::max_logprobs, R::in(0, kInt32Max)),
                   int_field<L>("max_predict_texts", &L::max_predict_texts, R::in(1, 100000))}),
      group<C, PredictionSection>(
          "prediction", &C::prediction,
          {int_field<PredictionSection>("threads", &PredictionSection::threads, R::in(1, 64)),
           int_field<PredictionSection>("max_queued", &PredictionSection::max_queued, R::in(0, 1000000))}),
      group<C, J>("jobs", &C::jobs,
                  {bool_field<J>("enabled", &J::enabled), string_field<J>("state_dir", &J::state_dir),
                   string_field<J>("data_root", &J::data_root),
                   int_field<J>("max_queued", &J::max_queued, R::in(1, 1000000)),
                   int_field<J>("concurrency", &J::concurrency, R::in(1, 64)),
                   int_field<J>("threads", &J::threads, R::in(1, 1024)),
                   int_field<J>("nice", &J::nice, R::in(0, 19)),
                   int_field<J>("checkpoint_every", &J::checkpoint_every, R::in(1, kInt32Max)),
                   int_field<J>("max_attempts", &J::max_attempts, R::in(1, 1000)),
                   int_field<J>("state_retry_s", &J::state_retry_s, R::in(1, 3600)),
                   int_field<J>("max_inline_rows", &J::max_inline_rows, R::in(0, kInt32Max)),
                   int_field<J>("max_inline_bytes", &J::max_inline_bytes, R::in(0, kInt32Max))}),
      group<C, ArtifactsSection>(
          "artifacts", &C::artifacts,
          {string_field<ArtifactsSection>("follow_state_dir", &ArtifactsSection::follow_state_dir),
           int_field<ArtifactsSection>("follow_interval_ms", &ArtifactsSection::follow_interval_ms,
                                       R::in(100, 3600000))}),
      group<C, A>("auth", &C::auth,
                  {string_field<A>("admin_token_file", &A::admin_token_file),
                   string_field<A>("admin_token_env", &A::admin_token_env),
                   string_field<A>("user_token_file", &A::user_token_file),
                   string_field<A>("user_token_env", &A::user_token_env),
                   bool_field<A>("require_for_inference", &A::require_for_inference),
                   bool_field<A>("open_render", &A::open_render),
                   bool_field<A>("require_tls", &A::require_tls)}),
      group<C, LogSection>("log", &C::log,
                           {enum_field<LogSection>(
                               "level", &LogSection::level,
                               std::vector<std::pair<std::string, LogLevel>>{{"debug", LogLevel::kDebug},
                                                                             {"info", LogLevel::kInfo},
                                                                             {"warn", LogLevel::kWarn},
                                                                             {"error", LogLevel::kError}})}),
  });
}

const ConfigTable<ServerConfig>& table() {
  static const ConfigTable<ServerConfig> t("", schema(), FieldStyle::kPath);
  return t;
}

std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

// Reads mapping `node` (the keys under `prefix`; "" = the document) in document order, rejecting non-string,
// unknown and duplicate keys; a group's value is read as a mapping, a field's through the table. A null node
// (a section with every key commented out) is an empty mapping.
absl::Status read_mapping(const YAML::Node& node, const std::string& prefix, ServerConfig* cfg) {
  if (node.IsNull()) return absl::OkStatus();
  const std::string where = prefix.empty() ? "config" : prefix;
  if (!node.IsMap()) return field_error(where, absl::StrCat("expected a mapping, got ", describe(node)));
  const std::vector<std::string> known = table().children(prefix);
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar())
      return field_error(where, absl::StrCat("keys must be strings, got ", describe(it->first)));
    const std::string path = join_path(prefix, it->first.Scalar());
    if (std::find(known.begin(), known.end(), it->first.Scalar()) == known.end())
      return table().unknown_key(path, known);
    if (!seen.insert(path).second)
      return absl::InvalidArgumentError(absl::StrCat("duplicate key '", path, "'"));
    FROST_RETURN_IF_ERROR(table().is_group(path) ? read_mapping(it->second, path, cfg)
                                                 : table().apply(*cfg, path, yaml_input(it->second)));
  }
  return absl::OkStatus();
}

// A field's value as a YAML scalar: strings quoted, enum names bare, numbers in their shortest form.
std::string yaml_value(const ConfigField<ServerConfig>& f, const ServerConfig& cfg) {
  return std::visit(
      [&f](const auto& v) -> std::string {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) {
          return f.kind == FieldKind::kEnum ? v : yaml_quoted(v);
        } else if constexpr (std::is_same_v<V, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<V, double>) {
          return shortest_number_text(v);
        } else {
          return absl::StrCat(v);
        }
      },
      f.get(cfg));
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
  // The engine's ranges and rules: the one check Engine::create makes too (core/generate/engine_options.h).
  FROST_RETURN_IF_ERROR(check_engine_options(cfg.engine));
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
    if (!docs.empty()) FROST_RETURN_IF_ERROR(read_mapping(docs[0], "", &cfg));
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

absl::Status set_server_config_field(ServerConfig* cfg, const std::string& path, const std::string& value) {
  const ConfigTable<ServerConfig>& t = table();
  if (t.is_group(path))
    return field_error(path,
                       absl::StrCat("a mapping: set one of its keys (", absl::StrJoin(t.children(path), "|"),
                                    "), got ", yaml_quoted(value)));
  if (t.find(path) == nullptr) {
    // The keys of the deepest level that exists ("engine.max_runing" lists engine's keys).
    std::string parent = path.substr(0, path.rfind('.') == std::string::npos ? 0 : path.rfind('.'));
    while (!parent.empty() && !t.is_group(parent))
      parent = parent.substr(0, parent.rfind('.') == std::string::npos ? 0 : parent.rfind('.'));
    return t.unknown_key(path, t.children(parent));
  }
  FieldInput in = FieldInput::of(value);
  in.shown = yaml_quoted(value);
  return t.apply(*cfg, path, in);
}

std::string format_server_config(const ServerConfig& cfg) {
  // "section:", "  key: value", a nested mapping as "  map: " and its keys indented below it.
  std::string out;
  std::vector<std::string> open;  // the groups the previous field was in
  for (const ConfigField<ServerConfig>& f : table().fields()) {
    const std::vector<std::string> parts = absl::StrSplit(f.name, '.');
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    open.resize(common);
    for (size_t d = common; d + 1 < parts.size(); ++d) {
      absl::StrAppend(&out, std::string(2 * d, ' '), parts[d], d == 0 ? ":\n" : ": \n");
      open.push_back(parts[d]);
    }
    absl::StrAppend(&out, std::string(2 * (parts.size() - 1), ' '), parts.back(), ": ", yaml_value(f, cfg),
                    "\n");
  }
  return out;
}

}  // namespace frost::server
