// What a shipped checkpoint's side files change in generation, on small checkpoints written here:
// generation_config.json's EOS list stops generation and its sampling defaults (do_sample false = greedy) are
// what sampling_defaults() starts a request from; a tokenizer with more entries than embedding rows serves,
// refuses a prompt that encodes to an id past the rows (naming it), and never samples such an id.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/generate/generator.h"
#include "core/model/model_loader.h"
#include "tests/testing/st_writer.h"
#include "tests/testing/test_util.h"
#include "tests/testing/tiny_checkpoint.h"

namespace frost {
namespace {

using ::frost::testing::TempDir;
using ::frost::testing::write_model_dir;
using ::frost::testing::write_text_file;
using ojson = nlohmann::ordered_json;

std::unique_ptr<LoadedModel> must_load(const std::string& dir) {
  auto m = load_model(dir);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(m).value() : nullptr;
}

GenerationRequest ids_request(const SamplingParams& p, int32_t n) {
  GenerationRequest r;
  r.prompt_ids = {1, 5, 9, 33};
  r.params = p;
  r.params.max_new_tokens = n;
  return r;
}

absl::StatusOr<GenerationResult> run(const LoadedModel& m, const GenerationRequest& r) {
  Generator gen(m, GeneratorConfig{});
  CancelToken cancel;
  return gen.generate(r, nullptr, cancel);
}

TEST(CheckpointGenerationTest, GenerationConfigEosListStopsGeneration) {
  TempDir d;
  write_model_dir(d.path(), testing::tiny_llama_config_json(), testing::tiny_llama_tensors());
  auto plain = must_load(d.path());
  ASSERT_TRUE(plain);
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.ignore_eos = true;
  auto full = run(*plain, ids_request(greedy, 24));
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_EQ(full->ids.size(), 24u);
  // The first generated token (after at least one other) that appeared nowhere before it: with it listed as an
  // EOS in generation_config.json, the same greedy run ends right there.
  size_t k = 1;
  while (k < full->ids.size() && (std::count(full->ids.begin(), full->ids.begin() + static_cast<long>(k),
                                             full->ids[k]) > 0 ||
                                  full->ids[k] == 2))
    ++k;
  ASSERT_LT(k, full->ids.size()) << "the greedy run repeats one token: pick another prompt";
  const int32_t stop = full->ids[k];
  write_text_file(d.file("generation_config.json"), ojson{{"eos_token_id", {2, stop}}}.dump());
  auto m = must_load(d.path());
  ASSERT_TRUE(m);
  SamplingParams p;
  p.temperature = 0;
  auto r = run(*m, ids_request(p, 24));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish_reason, FinishReason::kStop);
  EXPECT_EQ(r->stop_reason, "token:" + std::to_string(stop));
  EXPECT_EQ(r->ids, std::vector<int32_t>(full->ids.begin(), full->ids.begin() + static_cast<long>(k)));
  // ignore_eos still overrides it.
  p.ignore_eos = true;
  auto all = run(*m, ids_request(p, 24));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->ids, full->ids);
}

TEST(CheckpointGenerationTest, SamplingDefaultsFromGenerationConfig) {
  GenerationDefaults g;
  const SamplingParams none = sampling_defaults(g);
  EXPECT_EQ(none.temperature, SamplingParams().temperature);
  EXPECT_EQ(none.top_p, SamplingParams().top_p);
  EXPECT_EQ(none.top_k, SamplingParams().top_k);
  g.temperature = 0.6f;
  g.top_p = 0.9f;
  g.top_k = 20;
  g.repetition_penalty = 1.1f;
  SamplingParams p = sampling_defaults(g);
  EXPECT_EQ(p.temperature, 0.6f);
  EXPECT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_EQ(p.repetition_penalty, 1.1f);
  g.do_sample = true;
  EXPECT_EQ(sampling_defaults(g).temperature, 0.6f);
  g.do_sample = false;  // transformers: greedy, whatever temperature says
  EXPECT_EQ(sampling_defaults(g).temperature, 0.0f);
  EXPECT_EQ(sampling_defaults(g).repetition_penalty, 1.1f);
}

TEST(CheckpointGenerationTest, DoSampleFalseDefaultsGenerateGreedily) {
  TempDir d;
  write_model_dir(d.path(), testing::tiny_llama_config_json(), testing::tiny_llama_tensors());
  write_text_file(d.file("generation_config.json"), R"({"do_sample": false, "temperature": 1.5, "top_p": 0.95})");
  auto m = must_load(d.path());
  ASSERT_TRUE(m);
  SamplingParams p = sampling_defaults(m->generation);
  p.ignore_eos = true;
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.ignore_eos = true;
  auto a = run(*m, ids_request(p, 16));
  auto b = run(*m, ids_request(greedy, 16));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ids, b->ids);
}

// 94 tokenizer entries (printable ASCII, '!' = 0 ... '~' = 93) over a 64-row embedding.
void write_long_tokenizer(const TempDir& d) {
  write_text_file(d.file("tokenizer.json"), ::frost::testing::ascii_tokenizer_json());
}

TEST(CheckpointGenerationTest, TokenizerLongerThanEmbeddingServesAndRefusesIdsPastTheRows) {
  TempDir d;
  write_model_dir(d.path(), testing::tiny_llama_config_json(64), testing::tiny_llama_tensors(64));
  write_long_tokenizer(d);
  auto m = must_load(d.path());
  ASSERT_TRUE(m);
  ASSERT_EQ(m->tokenizer->vocab_size(), 94);
  // "!0A" = ids 0, 15, 32: inside the rows.
  GenerationRequest ok;
  ok.prompt = "!0A";
  ok.params.max_new_tokens = 4;
  ok.params.temperature = 0;
  auto r = run(*m, ok);
  ASSERT_TRUE(r.ok()) << r.status();
  // "!~" = ids 0, 93: '~' has no embedding row.
  GenerationRequest bad = ok;
  bad.prompt = "!~";
  auto refused = run(*m, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  const std::string want = "prompt (as tokenized)[1] = token id 93 is out of range [0, 64)";
  EXPECT_NE(std::string(refused.status().message()).find(want), std::string::npos) << refused.status();
  // As token ids too.
  GenerationRequest ids;
  ids.prompt_ids = {0, 64};
  ids.params.max_new_tokens = 1;
  EXPECT_TRUE(absl::IsInvalidArgument(run(*m, ids).status()));
  // Sampling never produces an id past the rows, even flattened far toward uniform over many draws.
  GenerationRequest hot;
  hot.prompt_ids = {1, 5};
  hot.params.max_new_tokens = 60;
  hot.params.temperature = 50;
  hot.params.seed = 7;
  hot.params.ignore_eos = true;
  auto h = run(*m, hot);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->ids.size(), 60u);
  for (int32_t id : h->ids) EXPECT_LT(id, 64);
}

}  // namespace
}  // namespace frost
