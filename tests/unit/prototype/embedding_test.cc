// Embeddings from the frozen backbone (core/prototype/embedding.h) on builtin:tiny: the mean of
// backbone_hidden's rows, L2-normalized; deterministic; independent of what else is embedded; refusals name
// the input.
#include "core/prototype/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/prototype/features.h"

namespace frost::prototype {
namespace {

const LoadedModel& tiny() {
  static const LoadedModel* m = [] {
    auto r = load_model("builtin:tiny");
    EXPECT_TRUE(r.ok()) << r.status();
    return r->release();
  }();
  return *m;
}

std::vector<float> embed_text(const std::string& text) {
  auto ids = embedding_tokens(tiny(), text, "input[0]");
  EXPECT_TRUE(ids.ok()) << ids.status();
  auto v = embed_tokens(tiny(), *ids);
  EXPECT_TRUE(v.ok()) << v.status();
  return *v;
}

TEST(Embedding, IsTheNormalizedMeanOfTheHiddenRows) {
  const std::string text = "Once upon a time there was a cat.";
  auto ids = embedding_tokens(tiny(), text, "input[0]");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ((*ids)[0], tiny().tokenizer->bos_id());  // BOS prepended, as for Predict's features
  auto h = backbone_hidden(tiny(), *ids);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->size(0), static_cast<int64_t>(ids->size()));
  const int64_t n = h->size(0), d = h->size(1);
  at::Tensor hd = h->to(at::kDouble).contiguous();
  std::vector<double> mean(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j)
      mean[static_cast<size_t>(j)] += hd[i][j].item<double>() / static_cast<double>(n);
  double norm = 0;
  for (double x : mean) norm += x * x;
  norm = std::sqrt(norm);

  const std::vector<float> v = embed_text(text);
  ASSERT_EQ(static_cast<int64_t>(v.size()), d);
  ASSERT_EQ(d, tiny().config.dim);
  double vn = 0;
  for (size_t j = 0; j < v.size(); ++j) {
    EXPECT_NEAR(v[j], mean[j] / norm, 1e-6) << j;
    vn += static_cast<double>(v[j]) * v[j];
  }
  EXPECT_NEAR(std::sqrt(vn), 1.0, 1e-6);
}

TEST(Embedding, SameTextTwiceIsIdentical) {
  EXPECT_EQ(embed_text("The little dog ran."), embed_text("The little dog ran."));
  EXPECT_NE(embed_text("The little dog ran."), embed_text("A big ship sailed."));
}

TEST(Embedding, ABatchEqualsTheInputsAlone) {
  // Each input is computed alone: embedding three after one another (interleaved with others, as a
  // request of three does) gives exactly what each gives on its own.
  const std::vector<std::string> texts = {"a", "The sun was warm and the sky was blue.",
                                          "Tom had a red ball"};
  std::vector<std::vector<float>> singles;
  for (const std::string& t : texts) singles.push_back(embed_text(t));
  std::vector<std::vector<float>> batch;
  embed_text("something else first");
  for (const std::string& t : texts) batch.push_back(embed_text(t));
  EXPECT_EQ(batch, singles);
}

TEST(Embedding, PoolingIsInDoubleAndNormalized) {
  at::Tensor h = at::tensor({3.0f, 0.0f, 1.0f, 4.0f}).reshape({2, 2});  // mean (2, 2) → (1/√2, 1/√2)
  auto v = pool_embedding(h);
  ASSERT_TRUE(v.ok());
  EXPECT_FLOAT_EQ((*v)[0], static_cast<float>(1 / std::sqrt(2.0)));
  EXPECT_FLOAT_EQ((*v)[1], static_cast<float>(1 / std::sqrt(2.0)));
  auto zero = pool_embedding(at::zeros({3, 4}));
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, std::vector<float>(4, 0.f));
  at::Tensor bad = at::zeros({2, 2});
  bad[0][0] = std::nanf("");
  EXPECT_EQ(pool_embedding(bad).status().code(), absl::StatusCode::kInternal);
}

TEST(Embedding, RefusalsNameTheInput) {
  const LoadedModel& m = tiny();
  absl::Status st = embedding_tokens(m, "", "input[3]").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("input[3]"), std::string::npos) << st;

  const std::string long_text(static_cast<size_t>(m.config.max_pos) + 10, 'x');
  st = embedding_tokens(m, long_text, "texts[1]").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("texts[1]"), std::string::npos) << st;
  EXPECT_NE(st.message().find(std::to_string(m.config.max_pos)), std::string::npos) << st;  // the limit

  st = check_embedding_ids(m, {}, "token_ids[0]");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token_ids[0]"), std::string::npos) << st;
  st = check_embedding_ids(m, std::vector<int32_t>(static_cast<size_t>(m.config.max_pos) + 1, 5),
                           "token_ids[2]");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(absl::StrCat(m.config.max_pos + 1, " tokens")), std::string::npos) << st;
  st = check_embedding_ids(m, {1, static_cast<int32_t>(m.config.n_vocab)}, "token_ids[0]");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("out of range"), std::string::npos) << st;
  EXPECT_TRUE(
      check_embedding_ids(m, std::vector<int32_t>(static_cast<size_t>(m.config.max_pos), 5), "t").ok());
}

TEST(Embedding, TokenIdsEqualTheTextTheyCameFrom) {
  auto ids = embedding_tokens(tiny(), "Lily liked flowers.", "input[0]");
  ASSERT_TRUE(ids.ok());
  auto v = embed_tokens(tiny(), *ids);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, embed_text("Lily liked flowers."));
}

}  // namespace
}  // namespace frost::prototype
