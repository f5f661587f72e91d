// to_generation_request: the edge checks that need no model, and the mapping of the proto's
// optional fields over the engine defaults.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "core/common/config_fields.h"
#include "core/common/field_error.h"
#include "server/generation_service.h"
#include "server/proto_fields.h"
#include "tests/testing/test_util.h"

namespace frost::server {
namespace {

v1::GenerateRequest text_request(const std::string& text) {
  v1::GenerateRequest r;
  r.set_text(text);
  return r;
}

TEST(GenerationRequestTest, UnsetOptionalFieldsKeepEngineDefaults) {
  const LimitsSection limits;
  absl::StatusOr<GenerationRequest> g = to_generation_request(text_request("Once"), limits);
  ASSERT_TRUE(g.ok()) << g.status();
  const SamplingParams defaults;
  EXPECT_EQ(g->prompt, "Once");
  EXPECT_TRUE(g->add_bos);
  EXPECT_EQ(g->params.temperature, defaults.temperature);
  EXPECT_EQ(g->params.top_k, defaults.top_k);
  EXPECT_EQ(g->params.top_p, defaults.top_p);
  EXPECT_EQ(g->params.max_new_tokens, defaults.max_new_tokens);
  EXPECT_EQ(g->params.logprobs, defaults.logprobs);
  EXPECT_FALSE(g->kv_codec.has_value());
}

TEST(GenerationRequestTest, CheckpointSamplingDefaultsFillUnsetFields) {
  GenerationDefaults g;
  g.temperature = 0.7f;
  g.top_k = 40;
  const SamplingParams d = sampling_defaults(g);
  absl::StatusOr<GenerationRequest> unset = to_generation_request(text_request("Once"), LimitsSection(), d);
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FLOAT_EQ(unset->params.temperature, 0.7f);
  EXPECT_EQ(unset->params.top_k, 40);
  v1::GenerateRequest req = text_request("Once");
  req.mutable_sampling()->set_temperature(0.f);
  req.mutable_sampling()->set_top_k(0);
  absl::StatusOr<GenerationRequest> set = to_generation_request(req, LimitsSection(), d);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_FLOAT_EQ(set->params.temperature, 0.f);  // the request's value wins, greedy included
  EXPECT_EQ(set->params.top_k, 0);
}

TEST(GenerationRequestTest, SetFieldsAreCarriedOver) {
  v1::GenerateRequest r = text_request("Once");
  r.set_add_bos(false);
  v1::SamplingParams* s = r.mutable_sampling();
  s->set_temperature(0.7f);
  s->set_top_k(5);
  s->set_top_p(0.9f);
  s->set_min_p(0.05f);
  s->set_seed(42);
  s->set_max_new_tokens(7);
  s->add_stop("\n\n");
  s->add_stop_token_ids(2);
  s->set_ignore_eos(true);
  s->set_logprobs(3);
  r.mutable_kv()->set_codec("fp16");
  absl::StatusOr<GenerationRequest> g = to_generation_request(r, LimitsSection{});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(g->add_bos);
  EXPECT_FLOAT_EQ(g->params.temperature, 0.7f);
  EXPECT_EQ(g->params.top_k, 5);
  EXPECT_FLOAT_EQ(g->params.top_p, 0.9f);
  EXPECT_FLOAT_EQ(g->params.min_p, 0.05f);
  EXPECT_EQ(g->params.seed, 42u);
  EXPECT_EQ(g->params.max_new_tokens, 7);
  ASSERT_EQ(g->params.stop.size(), 1u);
  EXPECT_EQ(g->params.stop[0], "\n\n");
  ASSERT_EQ(g->params.stop_token_ids.size(), 1u);
  EXPECT_TRUE(g->params.ignore_eos);
  EXPECT_EQ(g->params.logprobs, 3);
  ASSERT_TRUE(g->kv_codec.has_value());
  EXPECT_EQ(*g->kv_codec, KvCodecKind::kF16);
}

TEST(GenerationRequestTest, KvSpliceCodecIsAccepted) {
  // Whether a KVSplice is active is the engine's check (FAILED_PRECONDITION at submit).
  v1::GenerateRequest r = text_request("Once");
  r.mutable_kv()->set_codec("kvsplice");
  absl::StatusOr<GenerationRequest> g = to_generation_request(r, LimitsSection{});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(g->kv_codec.has_value());
  EXPECT_EQ(*g->kv_codec, KvCodecKind::kKvSplice);
}

TEST(GenerationRequestTest, TokenIdPromptIsUsedAsGiven) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->add_ids(1);
  r.mutable_token_ids()->add_ids(403);
  absl::StatusOr<GenerationRequest> g = to_generation_request(r, LimitsSection{});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->prompt_ids, (std::vector<int32_t>{1, 403}));
}

// GenerateRequest.speculative: unset means the server's method and k; the transport carries the values (the
// engine clamps num_tokens to engine.speculative.num_tokens), refusing only what no server could take.
TEST(GenerationRequestTest, SpeculativeIsCarriedOver) {
  const LimitsSection limits;
  absl::StatusOr<GenerationRequest> g = to_generation_request(text_request("Once"), limits);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->spec_method, SpecMethod::kServer);
  EXPECT_EQ(g->spec_num_tokens, 0);
  const std::pair<v1::SpecMethod, SpecMethod> methods[] = {{v1::SPEC_METHOD_UNSPECIFIED, SpecMethod::kServer},
                                                           {v1::SPEC_METHOD_OFF, SpecMethod::kOff},
                                                           {v1::SPEC_METHOD_NGRAM, SpecMethod::kNgram},
                                                           {v1::SPEC_METHOD_SUFFIX, SpecMethod::kSuffix}};
  for (const auto& [proto, core] : methods) {
    v1::GenerateRequest r = text_request("Once");
    r.mutable_speculative()->set_method(proto);
    r.mutable_speculative()->set_num_tokens(64);  // over any server's k: clamped by the engine, not refused
    g = to_generation_request(r, limits);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->spec_method, core) << v1::SpecMethod_Name(proto);
    EXPECT_EQ(g->spec_num_tokens, 64);
  }
  v1::GenerateRequest r = text_request("Once");
  r.mutable_speculative()->set_num_tokens(-1);
  EXPECT_INVALID(to_generation_request(r, limits).status(), "speculative.num_tokens: must be >= 0, got -1");
  r.mutable_speculative()->set_num_tokens(2);
  r.mutable_speculative()->set_method(static_cast<v1::SpecMethod>(9));  // a newer client's method
  EXPECT_INVALID(to_generation_request(r, limits).status(), "speculative.method: unknown value 9");
}

TEST(GenerationRequestTest, FinalCarriesSpeculationCounts) {
  GenerationResult res;
  EXPECT_EQ(final_message(res).final().draft_tokens(), 0);
  res.n_draft_tokens = 12;
  res.n_accepted_tokens = 7;
  const v1::Final f = final_message(res).final();
  EXPECT_EQ(f.draft_tokens(), 12);
  EXPECT_EQ(f.accepted_tokens(), 7);
}

TEST(GenerationRequestTest, EdgeChecksNameTheFieldAndValue) {
  LimitsSection limits;
  limits.max_prompt_bytes = 8;
  limits.max_stop_strings = 2;
  limits.max_logprobs = 4;
  auto check = [&](const v1::GenerateRequest& r, const std::string& substr) {
    EXPECT_INVALID(to_generation_request(r, limits).status(), substr);
  };
  check(v1::GenerateRequest(), "prompt: one of text, token_ids or messages must be set");
  {
    v1::GenerateRequest r = text_request("a");
    r.add_messages()->set_role("user");
    check(r, "text and messages: mutually exclusive");
    r.mutable_token_ids()->add_ids(1);
    check(r, "token_ids and messages: mutually exclusive");
  }
  {
    v1::GenerateRequest r = text_request("a");
    r.add_tools()->mutable_function()->set_name("f");
    check(r, "tools: only with messages");
  }
  check(text_request(""), "text: must not be empty");
  check(text_request("123456789"), "9 bytes is over limits.max_prompt_bytes = 8");
  check(text_request(std::string("ab\xff\xfe", 4)), "text: not valid UTF-8 (invalid byte at offset 2 of 4)");
  {
    v1::GenerateRequest r;
    r.mutable_token_ids();
    check(r, "token_ids.ids: must not be empty");
  }
  {
    v1::GenerateRequest r = text_request("a");
    r.set_request_id(std::string(kMaxRequestIdBytes + 1, 'x'));
    check(r, "request_id");
  }
  {
    v1::GenerateRequest r = text_request("a");
    r.mutable_sampling()->set_logprobs(5);
    check(r, "sampling.logprobs must be in [0, 4], got 5");
    r.mutable_sampling()->set_logprobs(-1);
    check(r, "got -1");
  }
  {
    v1::GenerateRequest r = text_request("a");
    for (int i = 0; i < 3; ++i) r.mutable_sampling()->add_stop("x");
    check(r, "sampling.stop: at most 2 strings, got 3");
  }
  {
    LimitsSection capped = limits;
    capped.max_stop_token_ids = 3;
    capped.max_prompt_tokens = 4;
    v1::GenerateRequest r = text_request("a");
    for (int i = 0; i < 3; ++i) r.mutable_sampling()->add_stop_token_ids(i);
    EXPECT_TRUE(to_generation_request(r, capped).ok());  // at the cap
    r.mutable_sampling()->add_stop_token_ids(3);
    EXPECT_INVALID(to_generation_request(r, capped).status(),
                   "sampling.stop_token_ids: at most 3 ids (limits.max_stop_token_ids), got 4");
    v1::GenerateRequest ids;
    for (int i = 0; i < 4; ++i) ids.mutable_token_ids()->add_ids(i);
    EXPECT_TRUE(to_generation_request(ids, capped).ok());  // at the cap
    ids.mutable_token_ids()->add_ids(4);
    EXPECT_INVALID(to_generation_request(ids, capped).status(),
                   "token_ids.ids: 5 ids is more than limits.max_prompt_tokens=4");
    v1::GenerateRequest huge;
    huge.mutable_token_ids()->mutable_ids()->Resize(kMaxPromptTokenIds + 1, 0);
    EXPECT_INVALID(to_generation_request(huge, LimitsSection{}).status(),
                   "token_ids.ids: 1048577 ids is more than the cap of 1048576");
  }
  {
    v1::GenerateRequest r = text_request("a");
    r.mutable_kv()->set_codec("int3");
    check(r, "kv.codec: unknown value \"int3\"");
    check(r, "kvsplice");  // the message lists every codec
  }
}

// Engine errors name GenerateRequest's fields from the field they carry (core/common/field_error.h), never
// from their text.
TEST(GenerationRequestTest, EngineErrorsNameTheProtoField) {
  v1::GenerateRequest r = text_request("a");
  RequestFields f = request_fields(r);
  EXPECT_EQ(name_request_field(invalid_field("top_p", "must be in (0, 1], got 2"), f).message(),
            "sampling.top_p: must be in (0, 1], got 2");
  EXPECT_EQ(name_request_field(invalid_field("stop", "must not be empty", "[0]"), f).message(),
            "sampling.stop[0]: must not be empty");
  const absl::Status ctx = with_field(absl::InvalidArgumentError("prompt tokens (3) + ..."),
                                      {"prompt", "", "prompt tokens (3) + ..."});
  EXPECT_EQ(name_request_field(ctx, f).message(), "text: prompt tokens (3) + ...");
  const absl::Status schema = prefix_field(absl::InvalidArgumentError("at /a: bad"), "constraint");
  r.mutable_sampling()->set_json_schema("{}");
  EXPECT_EQ(name_request_field(schema, request_fields(r)).message(), "sampling.json_schema: at /a: bad");
  EXPECT_EQ(name_request_field(schema, request_fields(r, "tools")).message(), "tools: at /a: bad");
  r.mutable_token_ids()->add_ids(1);
  EXPECT_EQ(name_request_field(with_field(absl::InvalidArgumentError("x"), {"prompt_ids", "[1]", "9 is out"}),
                               request_fields(r))
                .message(),
            "token_ids.ids[1]: 9 is out");
  const absl::Status kv = prefix_field(absl::FailedPreconditionError("ON but none"), "kv.repair");
  EXPECT_EQ(name_request_field(kv, f).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(name_request_field(kv, f).message(), "kv.repair: ON but none");
  // No field carried: unchanged, whatever the text looks like.
  const absl::Status plain = absl::InvalidArgumentError("constraint: looks like one");
  EXPECT_EQ(name_request_field(plain, f), plain);
}

// The codec reads sampling_params_table()'s rows by name (server/proto_fields.h): the mapping is complete
// both ways, so a row without its proto field, or a proto field nobody reads, fails here and not in a client.
TEST(GenerationRequestTest, EverySamplingRowIsAProtoFieldAndEveryProtoFieldIsRead) {
  const google::protobuf::Descriptor& d = *v1::SamplingParams::descriptor();
  const std::vector<std::string>& by_hand = sampling_fields_by_hand();
  for (const ConfigField<SamplingParams>& row : sampling_params_table().fields()) {
    const google::protobuf::FieldDescriptor* fd = d.FindFieldByName(row.name);
    ASSERT_NE(fd, nullptr) << "frost.v1.SamplingParams has no field " << row.name;
    EXPECT_TRUE(proto_carries(*fd, row.kind)) << row.name << " is a " << fd->cpp_type_name();
    EXPECT_TRUE(fd->has_presence()) << row.name << ": unset must keep the default (proto3 optional)";
  }
  for (int i = 0; i < d.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& fd = *d.field(i);
    const bool row = sampling_params_table().find(fd.name()) != nullptr;
    const bool hand = std::find(by_hand.begin(), by_hand.end(), fd.name()) != by_hand.end();
    if (!fd.is_repeated() && fd.cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      EXPECT_TRUE(row || hand) << fd.name() << " is neither a row nor read by hand";
    }
  }
  for (const std::string& name : by_hand) EXPECT_NE(d.FindFieldByName(name), nullptr) << name;
}

// Each float arrives with its own bits (the row reads the shortest text of the float back as that float):
// random finite floats in range, and a value set on the wire wins over the defaults.
TEST(GenerationRequestTest, SamplingFloatsArriveBitForBit) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) {
    v1::GenerateRequest r = text_request("a");
    const float x = std::max(unit(rng), 1e-30f);
    r.mutable_sampling()->set_top_p(x);
    r.mutable_sampling()->set_temperature(x * 1e6f);
    r.mutable_sampling()->set_presence_penalty(-2 * x);
    absl::StatusOr<GenerationRequest> g = to_generation_request(r, LimitsSection{});
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_EQ(std::memcmp(&g->params.top_p, &x, sizeof x), 0) << x;
    ASSERT_EQ(g->params.temperature, x * 1e6f);
    ASSERT_EQ(g->params.presence_penalty, -2 * x);
  }
  v1::GenerateRequest r = text_request("a");
  r.mutable_sampling()->set_seed(UINT64_MAX);
  r.mutable_sampling()->set_repetition_penalty(1.25f);
  SamplingParams defaults;
  defaults.repetition_penalty = 2.0f;
  absl::StatusOr<GenerationRequest> g = to_generation_request(r, LimitsSection{}, defaults);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->params.seed, UINT64_MAX);
  EXPECT_EQ(g->params.repetition_penalty, 1.25f);
}

// A value out of its row's range is refused at the edge, in the table's words under the proto path.
TEST(GenerationRequestTest, SamplingRowsAreRefusedInTheTablesWords) {
  auto refused = [](void (*set)(v1::SamplingParams*)) {
    v1::GenerateRequest r = text_request("a");
    set(r.mutable_sampling());
    return to_generation_request(r, LimitsSection{}).status();
  };
  const absl::Status top_p = refused([](v1::SamplingParams* s) { s->set_top_p(1.5f); });
  EXPECT_EQ(top_p.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(top_p.message(), "sampling.top_p: must be in (0, 1], got 1.5");
  EXPECT_EQ(refused([](v1::SamplingParams* s) { s->set_temperature(std::nanf("")); }).message(),
            "sampling.temperature: expected a finite number, got nan");
  EXPECT_EQ(refused([](v1::SamplingParams* s) { s->set_top_k(-1); }).message(),
            "sampling.top_k: must be >= 0, got -1");
  EXPECT_EQ(refused([](v1::SamplingParams* s) { s->set_max_new_tokens(0); }).message(),
            "sampling.max_new_tokens: must be >= 1, got 0");
}

}  // namespace
}  // namespace frost::server
