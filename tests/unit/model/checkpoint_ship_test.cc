// Checkpoints as they ship (issue 50, item 3), through load_model() on small checkpoints written here:
// sharded safetensors with model.safetensors.index.json, fp16 / bf16 stored weights, generation_config.json, and
// a tokenizer with more entries than the embedding has rows.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/kv/sequence_kv.h"
#include "core/model/model_loader.h"
#include "tests/testing/st_writer.h"
#include "tests/testing/test_util.h"
#include "tests/testing/tiny_checkpoint.h"

namespace frost {
namespace {

using ::frost::testing::NamedTensors;
using ::frost::testing::safetensors_bytes;
using ::frost::testing::TempDir;
using ::frost::testing::tiny_llama_config_json;
using ::frost::testing::tiny_llama_tensors;
using ::frost::testing::write_model_dir;
using ::frost::testing::write_text_file;
using ojson = nlohmann::ordered_json;

constexpr const char* kIndex = "model.safetensors.index.json";

std::unique_ptr<LoadedModel> must_load(const std::string& dir, WeightDtype dtype = WeightDtype::kF32) {
  LoadOptions o;
  o.dtype = dtype;
  auto m = load_model(dir, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Logits [T, V] of a fixed prompt through the reference forward.
at::Tensor logits(const LoadedModel& m) {
  const std::vector<int64_t> toks = {1, 5, 9, 33, 7, 60, 2, 11};
  SequenceKv kv(m.model->kv_spec(static_cast<int64_t>(toks.size()), KvCodecKind::kF32));
  return m.model->forward(at::tensor(toks, at::kLong), kv);
}

// Writes `tensors` as shards named model-0000k-of-0000n.safetensors, tensor i in shard i % n, and the index
// (returned, for edits) unless `write_index` is false.
ojson write_sharded(const TempDir& dir, const NamedTensors& tensors, int n, bool write_index = true) {
  std::vector<NamedTensors> parts(static_cast<size_t>(n));
  ojson wm = ojson::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t k = i % static_cast<size_t>(n);
    parts[k].push_back(tensors[i]);
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05d.safetensors", k + 1, n);
    wm[tensors[i].first] = name;
  }
  for (int k = 0; k < n; ++k) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1, n);
    write_text_file(dir.file(name), safetensors_bytes(parts[static_cast<size_t>(k)]));
  }
  write_text_file(dir.file("config.json"), tiny_llama_config_json());
  ojson index{{"metadata", {{"total_size", 0}}}, {"weight_map", wm}};
  if (write_index) write_text_file(dir.file(kIndex), index.dump(2));
  return index;
}

absl::Status load_status(const std::string& dir) { return load_model(dir).status(); }

bool has(const absl::Status& s, const std::string& what) {
  return std::string(s.message()).find(what) != std::string::npos;
}

// --- sharded checkpoints ---------------------------------------------------------------------------------

TEST(ShardedCheckpointTest, SameLogitsAsTheUnshardedCheckpointBitForBit) {
  TempDir one, sharded;
  write_model_dir(one.path(), tiny_llama_config_json(), tiny_llama_tensors());
  write_sharded(sharded, tiny_llama_tensors(), 3);
  // A consolidated copy some repositories ship next to the shards: not named by the index, so not read (it
  // would otherwise collide with every tensor).
  write_text_file(sharded.file("consolidated.safetensors"), safetensors_bytes(tiny_llama_tensors()));
  auto a = must_load(one.path());
  auto b = must_load(sharded.path());
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(at::equal(logits(*a), logits(*b)));
}

TEST(ShardedCheckpointTest, MissingShardIsNotFoundNamingTheShardAndATensor) {
  TempDir d;
  write_sharded(d, tiny_llama_tensors(), 3);
  std::remove(d.file("model-00002-of-00003.safetensors").c_str());
  const absl::Status s = load_status(d.path());
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(has(s, "model-00002-of-00003.safetensors")) << s;
  EXPECT_TRUE(has(s, "model.layers.0.input_layernorm.weight")) << s;  // tensor 1: the first in shard 2
  EXPECT_TRUE(has(s, kIndex)) << s;
}

TEST(ShardedCheckpointTest, TensorListedTwiceInTheIndexIsRefused) {
  TempDir d;
  write_sharded(d, tiny_llama_tensors(), 2, /*write_index=*/false);
  // JSON keeps the last of two equal keys silently; the index must not.
  const std::string text =
      R"({"metadata": {}, "weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors",)"
      R"( "model.norm.weight": "model-00002-of-00002.safetensors"}})";
  write_text_file(d.file(kIndex), text);
  const absl::Status s = load_status(d.path());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(has(s, "weight_map lists tensor 'model.norm.weight' twice")) << s;
  EXPECT_TRUE(has(s, kIndex)) << s;
}

TEST(ShardedCheckpointTest, IndexNamingATensorNoShardHoldsIsRefused) {
  TempDir d;
  ojson index = write_sharded(d, tiny_llama_tensors(), 2, false);
  index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors";
  write_text_file(d.file(kIndex), index.dump());
  const absl::Status s = load_status(d.path());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(has(s, "tensor 'model.layers.9.mlp.up_proj.weight' is mapped to model-00001-of-00002.safetensors, "
                     "which does not hold it"))
      << s;
}

TEST(ShardedCheckpointTest, IndexMappingATensorToTheWrongShardIsRefused) {
  TempDir d;
  ojson index = write_sharded(d, tiny_llama_tensors(), 2, false);
  // Tensor 0 lives in shard 1; the index says shard 2.
  index["weight_map"]["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors";
  write_text_file(d.file(kIndex), index.dump());
  const absl::Status s = load_status(d.path());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(has(s, "model.embed_tokens.weight")) << s;
  EXPECT_TRUE(has(s, "model-00002-of-00002.safetensors")) << s;
}

TEST(ShardedCheckpointTest, ShardHoldingATensorTheIndexDoesNotListIsRefused) {
  TempDir d;
  ojson index = write_sharded(d, tiny_llama_tensors(), 2, false);
  index["weight_map"].erase("model.norm.weight");
  write_text_file(d.file(kIndex), index.dump());
  const absl::Status s = load_status(d.path());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(has(s, "tensor 'model.norm.weight' is not listed in model.safetensors.index.json")) << s;
}

TEST(ShardedCheckpointTest, TensorInTwoShardsIsRefused) {
  TempDir d;
  NamedTensors ts = tiny_llama_tensors();
  write_sharded(d, ts, 2);
  // Shard 2 also carries the embedding (which the index maps to shard 1).
  NamedTensors second;
  for (size_t i = 1; i < ts.size(); i += 2) second.push_back(ts[i]);
  second.push_back(ts[0]);
  write_text_file(d.file("model-00002-of-00002.safetensors"), safetensors_bytes(second));
  const absl::Status s = load_status(d.path());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(has(s, "model-00002-of-00002.safetensors: holds tensor 'model.embed_tokens.weight'")) << s;
}

TEST(ShardedCheckpointTest, ShardOutsideTheDirectoryOrNotSafetensorsIsRefused) {
  for (const char* bad : {"../model-00001-of-00002.safetensors", "pytorch_model-00001-of-00002.bin", ""}) {
    TempDir d;
    ojson index = write_sharded(d, tiny_llama_tensors(), 2, false);
    index["weight_map"]["model.norm.weight"] = bad;
    write_text_file(d.file(kIndex), index.dump());
    const absl::Status s = load_status(d.path());
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad << ": " << s;
    EXPECT_TRUE(has(s, std::string("weight_map['model.norm.weight'] = \"") + bad)) << s;
  }
}

TEST(ShardedCheckpointTest, MalformedIndexIsRefusedNamingIt) {
  for (const char* text : {"[]", "{\"weight_map\": []}", "{\"weight_map\": {\"a\": 3}}", "{not json"}) {
    TempDir d;
    write_sharded(d, tiny_llama_tensors(), 2, false);
    write_text_file(d.file(kIndex), text);
    const absl::Status s = load_status(d.path());
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << text << ": " << s;
    EXPECT_TRUE(has(s, kIndex)) << s;
  }
}

// --- fp16 / bf16 stored weights ----------------------------------------------------------------------------

// A checkpoint stored in fp16 serves exactly what an fp32 checkpoint holding the same (fp16-representable)
// values serves: the conversion at load is exact to fp32, and to bf16 the same rounding either way.
TEST(StoredDtypeTest, Fp16AndBf16StoredWeightsServeAsFp32AndBf16) {
  for (at::ScalarType stored : {at::kHalf, at::kBFloat16}) {
    TempDir half, widened;
    NamedTensors h = tiny_llama_tensors(64, stored);
    NamedTensors f;
    for (const auto& [n, t] : h) f.emplace_back(n, t.to(at::kFloat));
    write_model_dir(half.path(), tiny_llama_config_json(), h);
    write_model_dir(widened.path(), tiny_llama_config_json(), f);
    for (WeightDtype served : {WeightDtype::kF32, WeightDtype::kBF16}) {
      SCOPED_TRACE(std::string(c10::toString(stored)) + " served as " + weight_dtype_name(served));
      auto a = must_load(half.path(), served);
      auto b = must_load(widened.path(), served);
      ASSERT_TRUE(a && b);
      EXPECT_EQ(a->model->weight_format(), served);
      EXPECT_TRUE(at::equal(logits(*a), logits(*b)));
      // And the values are the stored ones, not a reinterpretation of the bytes.
      EXPECT_TRUE(at::equal(a->model->weights().tok_embed.to(at::kFloat),
                            h[0].second.to(served == WeightDtype::kF32 ? at::kFloat : at::kBFloat16).to(at::kFloat)));
    }
  }
}

// --- generation_config.json --------------------------------------------------------------------------------

TEST(GenerationConfigTest, EosListJoinsConfigEosAndSamplingDefaultsAreKept) {
  TempDir d;
  write_model_dir(d.path(), tiny_llama_config_json(), tiny_llama_tensors());
  write_text_file(d.file("generation_config.json"),
                  R"({"bos_token_id": 1, "eos_token_id": [2, 40, 41], "do_sample": true, "temperature": 0.6,
                      "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.1, "max_length": 4096,
                      "transformers_version": "4.45.0"})");
  auto m = must_load(d.path());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->config.eos_ids, (std::vector<int32_t>{2, 40, 41}));
  EXPECT_EQ(m->generation.eos_ids, (std::vector<int32_t>{2, 40, 41}));
  EXPECT_EQ(m->generation.do_sample, std::optional<bool>(true));
  EXPECT_EQ(m->generation.temperature, std::optional<float>(0.6f));
  EXPECT_EQ(m->generation.top_p, std::optional<float>(0.9f));
  EXPECT_EQ(m->generation.top_k, std::optional<int32_t>(20));
  EXPECT_EQ(m->generation.repetition_penalty, std::optional<float>(1.1f));
}

TEST(GenerationConfigTest, SingleEosAndAbsentFile) {
  TempDir d;
  write_model_dir(d.path(), tiny_llama_config_json(), tiny_llama_tensors());
  auto plain = must_load(d.path());
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->config.eos_ids, (std::vector<int32_t>{2}));
  EXPECT_FALSE(plain->generation.any_sampling());
  write_text_file(d.file("generation_config.json"), R"({"eos_token_id": 7, "temperature": null})");
  auto m = must_load(d.path());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->config.eos_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_FALSE(m->generation.temperature.has_value());
}

TEST(GenerationConfigTest, BadFieldsAreRefusedNamingTheFieldAndValue) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"eos_token_id": 64})", "eos_token_id 64 is beyond the model's 64 embedding rows"},
      {R"({"eos_token_id": [2, "x"]})", "eos_token_id must be a non-negative integer or a list of them"},
      {R"({"temperature": -1})", "temperature must be a number >= 0, got -1"},
      {R"({"top_p": 0})", "top_p must be a number in (0, 1], got 0"},
      {R"({"top_k": -5})", "top_k must be a non-negative integer (0 = off), got -5"},
      {R"({"repetition_penalty": 0})", "repetition_penalty must be a number > 0, got 0"},
      {R"({"do_sample": "no"})", "do_sample must be true or false, got \"no\""},
      {R"([1])", "top level must be a JSON object"},
  };
  for (const auto& [text, want] : cases) {
    TempDir d;
    write_model_dir(d.path(), tiny_llama_config_json(), tiny_llama_tensors());
    write_text_file(d.file("generation_config.json"), text);
    const absl::Status s = load_status(d.path());
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << text << ": " << s;
    EXPECT_TRUE(has(s, want)) << s;
    EXPECT_TRUE(has(s, "generation_config.json")) << s;
  }
}

// --- tokenizer entries vs embedding rows --------------------------------------------------------------------

TEST(VocabMismatchTest, TokenizerLongerThanTheEmbeddingLoadsAndItsExtraIdsAreRefusedAsInput) {
  TempDir d;
  write_model_dir(d.path(), tiny_llama_config_json(64), tiny_llama_tensors(64));
  // 94 entries (the printable ASCII characters) over a 64-row embedding: Gemma 3 ships one entry more than rows.
  write_text_file(d.file("tokenizer.json"), ::frost::testing::ascii_tokenizer_json());
  auto m = must_load(d.path());
  ASSERT_TRUE(m);
  ASSERT_NE(m->tokenizer, nullptr);
  EXPECT_EQ(m->tokenizer->vocab_size(), 94);
  EXPECT_EQ(m->config.n_vocab, 64);
  EXPECT_TRUE(check_token_ids({0, 63}, m->config.n_vocab, "prompt").ok());
  const absl::Status s = check_token_ids({5, 64}, m->config.n_vocab, "prompt");
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_TRUE(has(s, "prompt[1] = token id 64 is out of range [0, 64)")) << s;
}

}  // namespace
}  // namespace frost
