// frost's transformer against an independent reference: tests/reference/hf_reference.py
// writes tiny random Hugging Face checkpoints (GPT-2 tied / old-style names with buffers,
// LLaMA GQA untied with head_dim != hidden/heads, LLaMA stored as BF16) together with the
// logits of its own PyTorch implementation of the HF math. Each model is loaded through
// load_model() (fp32 weights; llama_bf16 also with bf16 weights, which hold its values
// exactly) and checked three ways:
//   * forward() on the whole input: logits at every position,
//   * decode_step() one token at a time: logits at every position,
//   * greedy decoding: prefill with forward(), then decode_step() + argmax for 16 tokens.
// Needs Debian's /usr/bin/python3 with torch; skips visibly otherwise (the script exits 77
// when it cannot import torch).
//
// Letters: T = input tokens, V = vocab, C = hidden.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/kv/sequence_kv.h"
#include "core/model/model_loader.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

constexpr const char* kPython = "/usr/bin/python3";
constexpr double kLogitTol = 1e-4;
constexpr int64_t kMaxTokens = 32;  // >= 12 input ids and 5 prompt + 16 new ids
constexpr int kExitSkip = 77;       // hf_reference.py: torch not importable

struct Case {
  std::string name;  // test name suffix
  std::string dir;   // model directory written by the script
  WeightDtype dtype;
};
// Names the case in gtest/ctest output instead of dumping its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Runs the generator script once for the whole suite. On failure the tests either skip
// (no python/torch on this machine) or fail with the script's output (a broken script).
class HfReferenceTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kPython)) {
      skip_reason_ = new std::string(std::string(kPython) + " not found");
      return;
    }
    dir_ = new testing::TempDir("frost_hf_reference");
    const std::string log = dir_->file("generate.log");
    const std::string cmd = std::string(kPython) + " '" +
                            testing::source_path("tests/reference/hf_reference.py") + "' --out '" +
                            dir_->path() + "' >'" + log + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    if (rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == kExitSkip) {
      std::string why = testing::read_text_file(log);
      while (!why.empty() && std::isspace(static_cast<unsigned char>(why.back()))) why.pop_back();
      skip_reason_ = new std::string(why);
    } else if (rc != 0) {
      script_error_ = new std::string("hf_reference.py failed (status " + std::to_string(rc) +
                                      "):\n" + testing::read_text_file(log));
    }
  }

  static void TearDownTestSuite() {
    delete dir_;
    delete skip_reason_;
    delete script_error_;
    dir_ = nullptr;
    skip_reason_ = script_error_ = nullptr;
  }

  void SetUp() override {
    if (skip_reason_) GTEST_SKIP() << "independent HF reference unavailable: " << *skip_reason_;
    ASSERT_EQ(script_error_, nullptr) << *script_error_;
    const std::string model_dir = dir_->path() + "/" + GetParam().dir;
    expected_ = nlohmann::json::parse(testing::read_text_file(model_dir + "/expected.json"));
    LoadOptions opts;
    opts.dtype = GetParam().dtype;
    auto loaded = load_model(model_dir, opts);
    ASSERT_TRUE(loaded.ok()) << name() << ": " << loaded.status();
    loaded_ = std::move(*loaded);
    ASSERT_NE(loaded_->model, nullptr);
  }

  const std::string& name() const { return GetParam().name; }
  const Transformer& model() const { return *loaded_->model; }
  int64_t n_vocab() const { return model().config().n_vocab; }

  static at::Tensor ids_tensor(const std::vector<int64_t>& ids) {  // [T] int64
    return at::tensor(ids, at::kLong);
  }
  std::vector<int64_t> json_ids(const nlohmann::json& j) const { return j.get<std::vector<int64_t>>(); }
  // expected.json "logits" row t → [V]
  at::Tensor expected_logits(size_t t) const {
    return at::tensor(expected_["logits"][t].get<std::vector<float>>(), at::kFloat);
  }
  at::Tensor expected_hidden_last() const {  // [C]
    return at::tensor(expected_["final_hidden_last"].get<std::vector<float>>(), at::kFloat);
  }

  c10::InferenceMode inference_mode_;
  nlohmann::json expected_;
  std::unique_ptr<LoadedModel> loaded_;

  static testing::TempDir* dir_;
  static std::string* skip_reason_;
  static std::string* script_error_;
};

testing::TempDir* HfReferenceTest::dir_ = nullptr;
std::string* HfReferenceTest::skip_reason_ = nullptr;
std::string* HfReferenceTest::script_error_ = nullptr;

TEST_P(HfReferenceTest, ForwardMatchesEveryPosition) {
  const std::vector<int64_t> ids = json_ids(expected_["input_ids"]);
  ASSERT_EQ(expected_["logits"].size(), ids.size());
  SequenceKv kv(model().kv_spec(kMaxTokens, KvCodecKind::kF32));
  at::Tensor hidden;
  const at::Tensor logits = model().forward(ids_tensor(ids), kv, /*last_only=*/false, &hidden);
  ASSERT_EQ(logits.dim(), 2);
  ASSERT_EQ(logits.size(0), static_cast<int64_t>(ids.size()));
  ASSERT_EQ(logits.size(1), n_vocab());
  EXPECT_EQ(kv.n_tokens(), static_cast<int64_t>(ids.size()));
  for (size_t t = 0; t < ids.size(); ++t) {
    const double d = testing::max_abs_diff(logits[static_cast<int64_t>(t)], expected_logits(t));
    EXPECT_LE(d, kLogitTol) << name() << ": forward logits at position " << t;
  }
  ASSERT_TRUE(hidden.defined());
  EXPECT_TENSOR_NEAR(hidden[static_cast<int64_t>(ids.size()) - 1], expected_hidden_last(), kLogitTol);
}

TEST_P(HfReferenceTest, DecodeStepMatchesEveryPosition) {
  const std::vector<int64_t> ids = json_ids(expected_["input_ids"]);
  SequenceKv kv(model().kv_spec(kMaxTokens, KvCodecKind::kF32));
  DecodeScratch scratch;
  const int64_t n_embd = model().config().dim;
  for (size_t t = 0; t < ids.size(); ++t) {
    const float* logits = model().decode_step(static_cast<int32_t>(ids[t]), kv, scratch);
    ASSERT_NE(logits, nullptr);
    const at::Tensor got = at::from_blob(const_cast<float*>(logits), {n_vocab()}, at::kFloat);
    const double d = testing::max_abs_diff(got, expected_logits(t));
    EXPECT_LE(d, kLogitTol) << name() << ": decode_step logits at position " << t;
  }
  EXPECT_EQ(kv.n_tokens(), static_cast<int64_t>(ids.size()));
  const at::Tensor hidden = at::from_blob(const_cast<float*>(scratch.hidden()), {n_embd}, at::kFloat);
  EXPECT_TENSOR_NEAR(hidden, expected_hidden_last(), kLogitTol);
}

TEST_P(HfReferenceTest, GreedyPrefillThenDecodeMatches) {
  const std::vector<int64_t> prompt = json_ids(expected_["greedy"]["prompt_ids"]);
  const std::vector<int64_t> want = json_ids(expected_["greedy"]["new_ids"]);
  ASSERT_FALSE(prompt.empty());
  SequenceKv kv(model().kv_spec(kMaxTokens, KvCodecKind::kF32));
  DecodeScratch scratch;

  // Prefill with the reference path, then argmax over the fast path's logits.
  const at::Tensor last = model().forward(ids_tensor(prompt), kv, /*last_only=*/true);
  std::vector<int64_t> got = {last.reshape({-1}).argmax().item<int64_t>()};
  while (got.size() < want.size()) {
    const float* logits = model().decode_step(static_cast<int32_t>(got.back()), kv, scratch);
    got.push_back(std::max_element(logits, logits + n_vocab()) - logits);
  }
  std::ostringstream ws, gs;
  for (int64_t id : want) ws << id << ' ';
  for (int64_t id : got) gs << id << ' ';
  EXPECT_EQ(got, want) << name() << ": greedy ids\n  want " << ws.str() << "\n  got  " << gs.str();
}

// llama_bf16's weights are bf16 values, so loading them as bf16 changes no weight: the same
// expected logits hold for the bf16 weight path (fp32 activations and accumulation).
INSTANTIATE_TEST_SUITE_P(Models, HfReferenceTest,
                         ::testing::Values(Case{"gpt2_tied", "gpt2_tied", WeightDtype::kF32},
                                           Case{"gpt2_noprefix", "gpt2_noprefix", WeightDtype::kF32},
                                           Case{"llama_gqa_untied", "llama_gqa_untied", WeightDtype::kF32},
                                           Case{"llama_bf16", "llama_bf16", WeightDtype::kF32},
                                           Case{"llama_bf16_as_bf16", "llama_bf16", WeightDtype::kBF16}),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

}  // namespace
}  // namespace frost
