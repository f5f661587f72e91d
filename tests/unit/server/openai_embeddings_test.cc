// POST /v1/embeddings' bodies (server/openai_embeddings.h) and the request checks both protocols share
// (server/embed_exec.h): what is accepted, what is refused naming the field, and the base64 encoding.
#include "server/openai_embeddings.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <variant>

#include "absl/strings/escaping.h"
#include "server/embed_exec.h"

namespace frost::server::openai {
namespace {

using json = nlohmann::json;

EmbeddingsRequest ok(const std::string& body) {
  auto r = parse_embeddings_request(body);
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << body << " -> " << e->message;
    return {};
  }
  return std::get<EmbeddingsRequest>(r);
}

ApiError err(const std::string& body) {
  auto r = parse_embeddings_request(body);
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << body << " was accepted";
  return {};
}

TEST(OpenAiEmbeddings, AcceptsEveryInputShape) {
  EmbeddingsRequest r = ok(R"({"model":"m","input":"hello"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.texts, std::vector<std::string>{"hello"});
  EXPECT_TRUE(r.ids.empty());
  EXPECT_FALSE(r.base64);
  EXPECT_FALSE(r.dimensions);

  r = ok(R"({"model":"m","input":["a","b","c"],"encoding_format":"base64","user":"u","dimensions":64})");
  EXPECT_EQ(r.texts, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(r.base64);
  EXPECT_EQ(r.dimensions, 64);

  r = ok(R"({"model":"m","input":[1,2,3],"encoding_format":"float"})");
  EXPECT_TRUE(r.texts.empty());
  ASSERT_EQ(r.ids.size(), 1u);  // a list of ids is one input
  EXPECT_EQ(r.ids[0], (std::vector<int32_t>{1, 2, 3}));

  r = ok(R"({"model":"m","input":[[1,2],[3]],"encoding_format":null,"dimensions":null,"user":null})");
  ASSERT_EQ(r.ids.size(), 2u);
  EXPECT_EQ(r.ids[1], std::vector<int32_t>{3});
}

TEST(OpenAiEmbeddings, RefusesNamingTheField) {
  auto field = [](const std::string& body) { return err(body).param; };
  EXPECT_EQ(field(R"({"model":"m","input":"x","foo":1})"), "foo");
  EXPECT_EQ(err(R"({"model":"m","input":"x","foo":1})").http, 400);
  EXPECT_EQ(field(R"({"input":"x"})"), "model");
  EXPECT_EQ(field(R"({"model":3,"input":"x"})"), "model");
  EXPECT_EQ(field(R"({"model":"m"})"), "input");
  EXPECT_EQ(field(R"({"model":"m","input":[]})"), "input");
  EXPECT_EQ(field(R"({"model":"m","input":{}})"), "input");
  EXPECT_EQ(field(R"({"model":"m","input":["a",1]})"), "input");
  EXPECT_EQ(field(R"({"model":"m","input":[1,"a"]})"), "input");
  EXPECT_EQ(field(R"({"model":"m","input":[[1],2]})"), "input");
  EXPECT_EQ(field(R"({"model":"m","input":[[1,"a"]]})"), "input");
  EXPECT_EQ(field(R"({"model":"m","input":[1.5]})"), "input");
  EXPECT_EQ(field(R"({"model":"m","input":[4294967296]})"), "input");
  EXPECT_EQ(field(R"({"model":"m","input":[true]})"), "input");
  EXPECT_EQ(field(R"({"model":"m","input":"x","encoding_format":"int8"})"), "encoding_format");
  EXPECT_EQ(field(R"({"model":"m","input":"x","encoding_format":1})"), "encoding_format");
  EXPECT_EQ(field(R"({"model":"m","input":"x","dimensions":0})"), "dimensions");
  EXPECT_EQ(field(R"({"model":"m","input":"x","dimensions":"64"})"), "dimensions");
  EXPECT_EQ(field(R"({"model":"m","input":"x","user":5})"), "user");
  EXPECT_EQ(err("not json").http, 400);
  EXPECT_EQ(err("[1]").http, 400);
  EXPECT_NE(err(R"({"model":"m","input":[[1,"a"]]})").message.find("input[0][1]"), std::string::npos);

  json many = {{"model", "m"}, {"input", json::array()}};
  for (int i = 0; i <= kMaxEmbedInputs; ++i) many["input"].push_back("t");
  EXPECT_EQ(err(many.dump()).param, "input");
}

TEST(OpenAiEmbeddings, DimensionsOnlyWhenTheModelsOwn) {
  EmbeddingsRequest r;
  EXPECT_FALSE(check_dimensions(r, 64));
  r.dimensions = 64;
  EXPECT_FALSE(check_dimensions(r, 64));
  r.dimensions = 32;
  std::optional<ApiError> e = check_dimensions(r, 64);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->http, 400);
  EXPECT_EQ(e->param, "dimensions");
  EXPECT_NE(e->message.find("64"), std::string::npos);
}

std::vector<float> decode(const std::string& b64) {
  std::string bytes;
  EXPECT_TRUE(absl::Base64Unescape(b64, &bytes));
  EXPECT_EQ(bytes.size() % 4, 0u);
  std::vector<float> v(bytes.size() / 4);
  for (size_t i = 0; i < v.size(); ++i) {  // little-endian float32, as numpy's frombuffer(dtype="<f4")
    uint32_t u = 0;
    for (int b = 0; b < 4; ++b)
      u |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i * 4 + b])) << (8 * b);
    std::memcpy(&v[i], &u, 4);
  }
  return v;
}

TEST(OpenAiEmbeddings, Base64RoundTrips) {
  const std::vector<float> v = {1.0f, -0.5f, 0.1f, 3.4028235e38f, 1e-45f, 0.0f, -0.0f};
  EXPECT_EQ(embedding_base64({1.0f}), "AACAPw==");  // 0x3f800000 little-endian
  const std::vector<float> back = decode(embedding_base64(v));
  ASSERT_EQ(back.size(), v.size());
  EXPECT_EQ(std::memcmp(back.data(), v.data(), v.size() * 4), 0);
}

TEST(OpenAiEmbeddings, ResponseShape) {
  const std::vector<std::vector<float>> vs = {{0.1f, -0.2f, 1e-7f}, {0.6f, 0.8f, 0.0f}};
  json f = json::parse(embeddings_response_body("stories\"260K", vs, false, 7));
  EXPECT_EQ(f["object"], "list");
  EXPECT_EQ(f["model"], "stories\"260K");
  EXPECT_EQ(f["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(f["usage"]["total_tokens"], 7);
  ASSERT_EQ(f["data"].size(), 2u);
  for (size_t i = 0; i < vs.size(); ++i) {
    EXPECT_EQ(f["data"][i]["object"], "embedding");
    EXPECT_EQ(f["data"][i]["index"], i);
    ASSERT_EQ(f["data"][i]["embedding"].size(), vs[i].size());
    for (size_t j = 0; j < vs[i].size(); ++j)  // the shortest text that reads back as the same float
      EXPECT_EQ(static_cast<float>(f["data"][i]["embedding"][j].get<double>()), vs[i][j]);
  }
  json b = json::parse(embeddings_response_body("m", vs, true, 7));
  for (size_t i = 0; i < vs.size(); ++i)
    EXPECT_EQ(decode(b["data"][i]["embedding"].get<std::string>()), vs[i]);
}

const LoadedModel& tiny() {
  static const LoadedModel* m = load_model("builtin:tiny")->release();
  return *m;
}

TEST(EmbedInputs, ChecksNameTheField) {
  const LoadedModel& m = tiny();
  LimitsSection lim;
  EmbedInputs in;
  EXPECT_EQ(check_embed_inputs(m, in, lim).code(), absl::StatusCode::kInvalidArgument);  // neither
  in.texts = {"a"};
  in.ids = {{1}};
  EXPECT_EQ(check_embed_inputs(m, in, lim).code(), absl::StatusCode::kInvalidArgument);  // both
  in.ids.clear();
  EXPECT_TRUE(check_embed_inputs(m, in, lim).ok());
  in.texts = {"a", "b", ""};
  absl::Status st = check_embed_inputs(m, in, lim);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("texts[2]"), std::string::npos) << st;
  in.texts = {"a", "\xff"};
  EXPECT_NE(check_embed_inputs(m, in, lim).message().find("texts[1]"), std::string::npos);
  in.texts.assign(static_cast<size_t>(kMaxEmbedInputs) + 1, "a");
  EXPECT_EQ(check_embed_inputs(m, in, lim).code(), absl::StatusCode::kInvalidArgument);

  in.texts.clear();
  in.ids = {{1, 2}, {}};
  EXPECT_NE(check_embed_inputs(m, in, lim).message().find("token_ids[1]"), std::string::npos);
  in.ids = {{1, 2}, std::vector<int32_t>(static_cast<size_t>(m.config.max_pos) + 1, 3)};
  st = check_embed_inputs(m, in, lim);
  EXPECT_NE(st.message().find("token_ids[1]"), std::string::npos) << st;
  in.ids = {{1, -1}};
  EXPECT_NE(check_embed_inputs(m, in, lim).message().find("out of range"), std::string::npos);
  in.ids.assign(static_cast<size_t>(kMaxEmbedInputs), std::vector<int32_t>(200, 3));  // 409600 tokens
  st = check_embed_inputs(m, in, lim);
  EXPECT_NE(st.message().find("in all"), std::string::npos) << st;
}

TEST(EmbedInputs, TextsLongerThanTheContextAreRefusedAfterTokenizing) {
  const LoadedModel& m = tiny();
  EmbedInputs in;
  in.texts = {"short", std::string(static_cast<size_t>(m.config.max_pos), 'x')};  // + BOS: one over
  in.texts_field = "input";
  ASSERT_TRUE(check_embed_inputs(m, in, LimitsSection()).ok());
  absl::Status st = run_embed(m, in).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("input[1]"), std::string::npos) << st;
  EXPECT_NE(st.message().find(std::to_string(m.config.max_pos + 1) + " tokens"), std::string::npos) << st;

  in.texts = {"one", "two"};
  auto out = run_embed(m, in);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->vectors.size(), 2u);
  EXPECT_EQ(out->n_tokens, (std::vector<int32_t>{4, 4}));  // BOS + 3 bytes
  EXPECT_EQ(out->prompt_tokens, 8);
  EXPECT_EQ(run_embed(m, in, [] { return true; }).status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace frost::server::openai
