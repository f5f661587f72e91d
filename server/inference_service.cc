#include "server/inference_service.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/clock.h"
#include "core/common/status_macros.h"
#include "core/common/utf8.h"
#include "server/predict_exec.h"
#include "server/service_util.h"

namespace frost::server {
namespace {

constexpr char kModel[] = "prototype";

// Output tensors ModelInfer can return, in order.
const std::vector<std::string>& output_names() {
  static const std::vector<std::string> names = {"value",
                                                 "value_unrefined",
                                                 "knn_value",
                                                 "out_of_distribution",
                                                 "population_consistency",
                                                 "agreement_consistency",
                                                 "prototype_ids",
                                                 "prototype_texts",
                                                 "prototype_labels",
                                                 "prototype_weights"};
  return names;
}

// The served version of the prototype model: "3" for prototype/3, "" when none is active.
std::string active_version(Runtime* rt) {
  const std::string name = rt->registry().active_name(kModel);
  const size_t slash = name.find('/');
  return slash == std::string::npos ? "" : name.substr(slash + 1);
}

absl::Status check_model(const std::string& name, const char* field) {
  if (name != kModel)
    return absl::NotFoundError(
        absl::StrCat(field, ": model '", name, "' not found: this server serves '", kModel, "'"));
  return absl::OkStatus();
}

// The UnaryServer of the protocol (auth: the same rules as Predict); Mode::kExecutor runs on the Predict
// executor.
UnaryServer server(Runtime* rt) {
  return unary_server(rt, "inference.GRPCInferenceService", &rt->predict_executor());
}

// A handler that fills a response (`f(req, &resp) → Status`) as one that returns it.
template <class Req, class Resp, class F>
auto filling(F f) {
  return [f](const Req& req) -> absl::StatusOr<Resp> {
    Resp resp;
    if (absl::Status st = f(req, &resp); !st.ok()) return st;
    return resp;
  };
}

absl::Status too_many(const std::string& field, int64_t n, int64_t cap, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", n, " ", what, " is more than the cap of ", cap));
}

// The caps on every repeated field of the request, before anything looks at their contents.
absl::Status check_caps(const inference::ModelInferRequest& req, int64_t max_texts) {
  if (req.parameters_size() > kMaxInferParameters)
    return too_many("parameters", req.parameters_size(), kMaxInferParameters, "entries");
  if (req.inputs_size() > kMaxInferInputs)
    return too_many("inputs", req.inputs_size(), kMaxInferInputs, "tensors");
  const auto n_outputs = static_cast<int64_t>(output_names().size());
  if (req.outputs_size() > n_outputs)
    return too_many("outputs", req.outputs_size(), n_outputs, "tensors (one per output of the model)");
  if (req.raw_input_contents_size() > req.inputs_size() && req.raw_input_contents_size() > 1)
    return too_many("raw_input_contents", req.raw_input_contents_size(), std::max(1, req.inputs_size()),
                    "entries (one per input)");
  for (int i = 0; i < req.inputs_size(); ++i) {
    const auto& in = req.inputs(i);
    const std::string field = absl::StrCat("inputs[", i, "]");
    if (in.shape_size() > kMaxInferShapeDims)
      return too_many(field + ".shape", in.shape_size(), kMaxInferShapeDims, "dimensions");
    if (in.parameters_size() > kMaxInferParameters)
      return too_many(field + ".parameters", in.parameters_size(), kMaxInferParameters, "entries");
    const auto& c = in.contents();
    const int64_t elements = std::max(
        {c.bool_contents_size(), c.int_contents_size(), c.int64_contents_size(), c.uint_contents_size(),
         c.uint64_contents_size(), c.fp32_contents_size(), c.fp64_contents_size(), c.bytes_contents_size()});
    if (elements > max_texts)
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".contents: ", elements, " elements is more than limits.max_predict_texts=", max_texts));
  }
  for (int i = 0; i < req.outputs_size(); ++i) {
    if (req.outputs(i).parameters_size() > kMaxInferParameters)
      return too_many(absl::StrCat("outputs[", i, "].parameters"), req.outputs(i).parameters_size(),
                      kMaxInferParameters, "entries");
  }
  return absl::OkStatus();
}

// The texts of the "text" input, from its typed contents or the protocol's raw BYTES encoding (per element a
// 4-byte little-endian length, then the bytes).
absl::StatusOr<std::vector<std::string>> input_texts(const inference::ModelInferRequest& req,
                                                     int64_t max_texts) {
  if (req.inputs_size() != 1 || req.inputs(0).name() != "text") {
    std::vector<std::string> got;
    for (const auto& in : req.inputs()) got.push_back("'" + in.name().substr(0, 64) + "'");
    return absl::InvalidArgumentError(
        absl::StrCat("inputs: expected one input named 'text', got [", absl::StrJoin(got, ", "), "]"));
  }
  const auto& in = req.inputs(0);
  if (in.datatype() != "BYTES")
    return absl::InvalidArgumentError(
        absl::StrCat("inputs[text].datatype: expected BYTES, got '", in.datatype().substr(0, 64), "'"));
  if (in.shape_size() < 1 || in.shape_size() > 2 || (in.shape_size() == 2 && in.shape(1) != 1) ||
      in.shape(0) < 0)
    return absl::InvalidArgumentError(absl::StrCat("inputs[text].shape: expected [N] or [N, 1], got [",
                                                   absl::StrJoin(in.shape(), ", "), "]"));
  const int64_t n = in.shape(0);
  std::vector<std::string> texts;
  const auto& c = in.contents();
  const bool typed_other = c.bool_contents_size() || c.int_contents_size() || c.int64_contents_size() ||
                           c.uint_contents_size() || c.uint64_contents_size() || c.fp32_contents_size() ||
                           c.fp64_contents_size();
  if (typed_other)
    return absl::InvalidArgumentError("inputs[text].contents: only bytes_contents belongs to a BYTES tensor");
  if (req.raw_input_contents_size() > 0) {
    if (c.bytes_contents_size() > 0)
      return absl::InvalidArgumentError("inputs[text]: give contents or raw_input_contents, not both");
    if (req.raw_input_contents_size() != 1)
      return absl::InvalidArgumentError(
          absl::StrCat("raw_input_contents: ", req.raw_input_contents_size(), " entries for 1 input"));
    const std::string& raw = req.raw_input_contents(0);
    size_t pos = 0;
    while (pos < raw.size()) {
      if (raw.size() - pos < 4)
        return absl::InvalidArgumentError("raw_input_contents[0]: truncated BYTES element length");
      uint32_t len = 0;
      for (int b = 3; b >= 0; --b) len = (len << 8) | static_cast<uint8_t>(raw[pos + static_cast<size_t>(b)]);
      pos += 4;
      if (raw.size() - pos < len)
        return absl::InvalidArgumentError(absl::StrCat("raw_input_contents[0]: element ", texts.size(),
                                                       " claims ", len, " bytes, ", raw.size() - pos,
                                                       " remain"));
      if (static_cast<int64_t>(texts.size()) >= max_texts)
        return absl::InvalidArgumentError(absl::StrCat(
            "raw_input_contents[0]: more than limits.max_predict_texts=", max_texts, " elements"));
      texts.emplace_back(raw.substr(pos, len));
      pos += len;
    }
  } else {
    texts.assign(c.bytes_contents().begin(), c.bytes_contents().end());
  }
  if (static_cast<int64_t>(texts.size()) != n)
    return absl::InvalidArgumentError(absl::StrCat("inputs[text]: shape [", absl::StrJoin(in.shape(), ", "),
                                                   "] holds ", n, " elements, the data has ", texts.size()));
  for (size_t i = 0; i < texts.size(); ++i)
    if (!is_valid_utf8(texts[i]))
      return absl::InvalidArgumentError(absl::StrCat("inputs[text][", i, "]: not valid UTF-8"));
  return texts;
}

// The outputs the request asked for (all when none).
absl::StatusOr<std::vector<std::string>> requested_outputs(const inference::ModelInferRequest& req) {
  if (req.outputs_size() == 0) return output_names();
  std::vector<std::string> out;
  for (int i = 0; i < req.outputs_size(); ++i) {
    const std::string& name = req.outputs(i).name();
    if (std::find(output_names().begin(), output_names().end(), name) == output_names().end())
      return absl::InvalidArgumentError(absl::StrCat("outputs[", i, "]: unknown output '", name,
                                                     "' (known: ", absl::StrJoin(output_names(), ", "), ")"));
    out.push_back(name);
  }
  return out;
}

absl::StatusOr<std::optional<int>> top_k_parameter(const inference::ModelInferRequest& req) {
  auto it = req.parameters().find("top_k");
  if (it == req.parameters().end()) return std::optional<int>();
  if (it->second.parameter_choice_case() != inference::InferParameter::kInt64Param)
    return absl::InvalidArgumentError("parameters[top_k]: expected an int64_param");
  const int64_t k = it->second.int64_param();
  if (k < 0 || k > 1 << 20)
    return absl::InvalidArgumentError(absl::StrCat("parameters[top_k]: ", k, " is out of range"));
  return std::optional<int>(static_cast<int>(k));
}

void fill_outputs(const PredictJob& job, const std::vector<prototype::Prediction>& ps,
                  const std::vector<std::string>& wanted, inference::ModelInferResponse* resp) {
  const auto n = static_cast<int64_t>(ps.size());
  const int64_t k = job.top_k;
  for (const std::string& name : wanted) {
    auto* t = resp->add_outputs();
    t->set_name(name);
    auto* c = t->mutable_contents();
    const bool per_prototype = name.rfind("prototype_", 0) == 0;
    t->add_shape(n);
    if (per_prototype) t->add_shape(k);
    auto scalar = [&](auto get) {
      t->set_datatype("FP32");
      for (const prototype::Prediction& p : ps) c->add_fp32_contents(static_cast<float>(get(p)));
    };
    if (name == "value") scalar([](const prototype::Prediction& p) { return p.value; });
    if (name == "value_unrefined") scalar([](const prototype::Prediction& p) { return p.value_unrefined; });
    if (name == "knn_value") scalar([](const prototype::Prediction& p) { return p.knn_value; });
    if (name == "population_consistency")
      scalar([](const prototype::Prediction& p) { return p.population_consistency; });
    if (name == "agreement_consistency")
      scalar([](const prototype::Prediction& p) { return p.agreement_consistency; });
    if (name == "out_of_distribution") {
      t->set_datatype("BOOL");
      for (const prototype::Prediction& p : ps) c->add_bool_contents(p.out_of_distribution);
    }
    if (per_prototype) {
      const bool bytes = name == "prototype_ids" || name == "prototype_texts";
      t->set_datatype(bytes ? "BYTES" : "FP32");
      for (const prototype::Prediction& p : ps)
        for (int64_t j = 0; j < k; ++j) {  // padded when a prediction has fewer than k prototypes
          const bool have = j < static_cast<int64_t>(p.top.size());
          const prototype::Attribution* a = have ? &p.top[static_cast<size_t>(j)] : nullptr;
          if (name == "prototype_ids") c->add_bytes_contents(a ? a->id : "");
          if (name == "prototype_texts") c->add_bytes_contents(a ? a->text : "");
          if (name == "prototype_labels") c->add_fp32_contents(a ? static_cast<float>(a->label) : 0.f);
          if (name == "prototype_weights") c->add_fp32_contents(a ? static_cast<float>(a->weight) : 0.f);
        }
    }
  }
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return serve_unary<inference::ServerLiveRequest, inference::ServerLiveResponse>(
      server(rt_), ctx, in, out, {"ServerLive", Mode::kInline, false},
      filling<inference::ServerLiveRequest, inference::ServerLiveResponse>(
          [](const inference::ServerLiveRequest&, inference::ServerLiveResponse* resp) {
            resp->set_live(true);
            return absl::OkStatus();
          }));
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return serve_unary<inference::ServerReadyRequest, inference::ServerReadyResponse>(
      server(rt_), ctx, in, out, {"ServerReady", Mode::kInline, false},
      filling<inference::ServerReadyRequest, inference::ServerReadyResponse>(
          [&](const inference::ServerReadyRequest&, inference::ServerReadyResponse* resp) {
            resp->set_ready(rt_->model() != nullptr && !rt_->draining());
            return absl::OkStatus();
          }));
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return serve_unary<inference::ModelReadyRequest, inference::ModelReadyResponse>(
      server(rt_), ctx, in, out, {"ModelReady", Mode::kInline, false},
      filling<inference::ModelReadyRequest, inference::ModelReadyResponse>(
          [&](const inference::ModelReadyRequest& req, inference::ModelReadyResponse* resp) -> absl::Status {
            if (absl::Status st = check_model(req.name(), "name"); !st.ok()) return st;
            const std::string active = active_version(rt_);
            resp->set_ready(rt_->model() != nullptr && !rt_->draining() && !active.empty() &&
                            (req.version().empty() || req.version() == active));
            return absl::OkStatus();
          }));
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* in,
                                                           grpc::ByteBuffer* out) {
  return serve_unary<inference::ServerMetadataRequest, inference::ServerMetadataResponse>(
      server(rt_), ctx, in, out, {"ServerMetadata", Mode::kInline, false},
      filling<inference::ServerMetadataRequest, inference::ServerMetadataResponse>(
          [](const inference::ServerMetadataRequest&, inference::ServerMetadataResponse* resp) {
            resp->set_name("frost");
            resp->set_version(FROST_VERSION);
            return absl::OkStatus();
          }));
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return serve_unary<inference::ModelMetadataRequest, inference::ModelMetadataResponse>(
      server(rt_), ctx, in, out, {"ModelMetadata", Mode::kExecutor, false},
      filling<inference::ModelMetadataRequest, inference::ModelMetadataResponse>(
          [rt = rt_](const inference::ModelMetadataRequest& req,
                     inference::ModelMetadataResponse* resp) -> absl::Status {
            if (absl::Status st = check_model(req.name(), "name"); !st.ok()) return st;
            std::vector<std::string> versions;
            if (rt->store()) {
              absl::StatusOr<std::vector<serving::ArtifactInfo>> all = rt->store()->list(kModel);
              if (!all.ok()) return all.status();
              for (const serving::ArtifactInfo& a : *all) versions.push_back(std::to_string(a.version));
            } else if (const std::string v = active_version(rt); !v.empty()) {
              versions.push_back(v);
            }
            if (!req.version().empty() &&
                std::find(versions.begin(), versions.end(), req.version()) == versions.end())
              return absl::NotFoundError(
                  absl::StrCat("version: model '", kModel, "' has no version '", req.version(), "'"));
            resp->set_name(kModel);
            for (const std::string& v : versions) resp->add_versions(v);
            resp->set_platform("frost_prototype");
            auto tensor = [](auto* t, const char* name, const char* dtype, std::vector<int64_t> shape) {
              t->set_name(name);
              t->set_datatype(dtype);
              for (int64_t d : shape) t->add_shape(d);
            };
            tensor(resp->add_inputs(), "text", "BYTES", {-1});
            for (const std::string& name : output_names()) {
              const bool per_prototype = name.rfind("prototype_", 0) == 0;
              const char* dtype = name == "out_of_distribution"                          ? "BOOL"
                                  : name == "prototype_ids" || name == "prototype_texts" ? "BYTES"
                                                                                         : "FP32";
              tensor(resp->add_outputs(), name.c_str(), dtype,
                     per_prototype ? std::vector<int64_t>{-1, -1} : std::vector<int64_t>{-1});
            }
            return absl::OkStatus();
          }));
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  // A validated request: the outputs wanted and the Predict job (which owns the served version).
  struct Infer {
    std::string id;
    std::vector<std::string> wanted;
    PredictJob job;
  };
  // Everything but the model work, on the callback thread.
  auto validate = [rt = rt_](inference::ModelInferRequest&& req) -> absl::StatusOr<Infer> {
    const int64_t max_texts = rt->cfg().limits.max_predict_texts;
    FROST_RETURN_IF_ERROR(check_caps(req, max_texts));
    FROST_RETURN_IF_ERROR(check_model(req.model_name(), "model_name"));
    const std::string active = active_version(rt);
    if (!req.model_version().empty() && req.model_version() != active)
      return absl::NotFoundError(
          absl::StrCat("model_version: version '", req.model_version(), "' of model '", kModel,
                       "' is not served (active: ", active.empty() ? "none" : active, ")"));
    FROST_ASSIGN_OR_RETURN(std::vector<std::string> texts, input_texts(req, max_texts));
    Infer inf;
    FROST_ASSIGN_OR_RETURN(inf.wanted, requested_outputs(req));
    FROST_ASSIGN_OR_RETURN(std::optional<int> top_k, top_k_parameter(req));
    FROST_ASSIGN_OR_RETURN(inf.job,
                           prepare_predict(rt, std::move(texts), top_k, "inputs[text]", "parameters[top_k]"));
    inf.id = req.id();
    return inf;
  };
  auto infer = [rt = rt_](const Infer& inf) -> absl::StatusOr<inference::ModelInferResponse> {
    FROST_ASSIGN_OR_RETURN(std::vector<prototype::Prediction> ps, run_predict(rt, inf.job));
    inference::ModelInferResponse resp;
    resp.set_model_name(kModel);
    const std::string& name = inf.job.served->name;
    resp.set_model_version(name.substr(name.find('/') + 1));
    resp.set_id(inf.id);
    fill_outputs(inf.job, ps, inf.wanted, &resp);
    return resp;
  };
  return serve_unary<inference::ModelInferRequest, inference::ModelInferResponse>(
      server(rt_), ctx, in, out, {"ModelInfer", Mode::kExecutor}, validate, infer);
}

}  // namespace frost::server
