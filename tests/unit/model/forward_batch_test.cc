// Transformer::forward_batch (the batched serving step) against the batch-1 fast path (decode_step) and
// itself: sequences with different prompts, lengths, KV codecs, a repair operator and a KVSplice set share
// steps, prompts arrive in chunks mixed with other sequences' decode tokens, storage is paged from a shared
// pool — and every sequence's logits stay within 1e-4 of decoding it alone (decode_step; they are in fact
// bit-identical, as both use the same packed GEMM), token for token, and are bit-identical to running it
// alone through forward_batch in one chunk. The independent twin of both fast paths is forward() (the
// reference path), held to them by transformer_test, variants_test and hf_reference_test.
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/kv/block_books.h"
#include "core/kv/block_storage.h"
#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"
#include "core/model/builtin_models.h"
#include "core/model/kv_dims.h"
#include "core/model/quantize.h"
#include "core/model/transformer.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

struct ModelCase {
  std::string name, base;
  bool mha = false;
  VariantConfig v;
  at::ScalarType wd = at::kFloat;
  WeightDtype quant = WeightDtype::kF32;  // int8 / int4: quantized after the random weights are made
};

VariantConfig ra_layers(std::vector<int64_t> l) {
  VariantConfig v;
  v.ra_layers = std::move(l);
  return v;
}

VariantConfig sba_and_more() {
  VariantConfig v;
  v.ra_layers = {0};
  v.sba_layers = {1};
  v.sba_alpha = 0.5;
  v.router_layers = {0, 1};
  v.router_ra_heads = 2;
  v.router_hidden = 16;
  v.mlp_ctx_layers = {0, 1};
  v.mlp_ctx_rank = 4;
  return v;
}

std::vector<ModelCase> model_cases() {
  return {{"llama_gqa", "builtin:tiny"},
          {"gpt2", "builtin:tiny-gpt2"},
          {"llama_ra", "builtin:tiny", true, ra_layers({1})},
          {"gpt2_ra_sba_router_ctx", "builtin:tiny-gpt2", false, sba_and_more()},
          {"llama_gqa_bf16", "builtin:tiny", false, {}, at::kBFloat16},
          {"llama_gqa_int8", "builtin:tiny", false, {}, at::kFloat, WeightDtype::kInt8},
          // int8 activations too: quantized per row, so still batch-invariant bit for bit
          {"gpt2_ra_sba_router_ctx_w8a8", "builtin:tiny-gpt2", false, sba_and_more(), at::kFloat,
           WeightDtype::kW8A8},
          {"gpt2_ra_sba_router_ctx_int4", "builtin:tiny-gpt2", false, sba_and_more(), at::kFloat,
           WeightDtype::kInt4}};
}

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

std::unique_ptr<Transformer> make_model(const ModelCase& mc) {
  ModelConfig c = *builtin_config(mc.base);
  if (mc.mha) c.n_head_kv = c.n_head;
  c.variants = mc.v;
  EXPECT_TRUE(validate_model_config(c).ok());
  ModelWeights w = random_weights(c, 0xBA7C4, mc.wd);
  EXPECT_TRUE(quantize_weights(w, mc.quant).ok());
  return std::make_unique<Transformer>(c, std::move(w));
}

// What one test sequence stores its KV as.
struct SeqKind {
  KvCodecKind codec;
  bool repair = false;
};

struct TestSeq {
  std::vector<int32_t> prompt;
  SeqKind kind;
  int64_t chunk;  // prompt tokens fed per step
};

std::vector<int32_t> prompt_of(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 37 + salt * 101 + 5) % vocab));
  return t;
}

class ForwardBatchTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    tf_ = make_model(GetParam());
    const ModelConfig& c = tf_->config();
    auto sp = KvSpliceSet::create(kvsplice_dims(c), KvSpliceRanks{6, 10}, 9);
    ASSERT_TRUE(sp.ok()) << sp.status();
    splice_ = *sp;
    RepairConfig rc;
    rc.rank = 4;
    auto rs = RepairSet::create(rc, {0, c.n_layer - 1}, repair_dims(c), 5);
    ASSERT_TRUE(rs.ok()) << rs.status();
    repair_ = *rs;
  }

  bool sba() const { return !tf_->config().variants.sba_layers.empty(); }

  KvSpec spec_of(const SeqKind& k, int64_t max_tokens) const {
    return tf_->kv_spec(max_tokens, k.codec, k.codec == KvCodecKind::kKvSplice ? splice_ : nullptr);
  }
  void stage(SequenceKv& kv, const SeqKind& k) const {
    if (!k.repair) return;
    kv.set_repair(repair_);
  }

  // The sequences of one test: every codec this model supports, two with the repair operator.
  std::vector<TestSeq> sequences() const {
    std::vector<SeqKind> kinds = {{KvCodecKind::kF32},  {KvCodecKind::kF16},
                                  {KvCodecKind::kInt8}, {KvCodecKind::kInt4, true},
                                  {KvCodecKind::kBF16}, {KvCodecKind::kF32, true}};
    if (!sba()) kinds.push_back({KvCodecKind::kKvSplice});  // SBA's reverse store refuses kvsplice
    if (sba())
      for (SeqKind& k : kinds) k.repair = false;  // and SBA refuses the repair stage (core/model/variants.h)
    const int64_t lens[] = {1, 9, 33, 4, 20, 13, 27};
    const int64_t chunks[] = {1, 4, 8, 3, 64, 5, 16};
    std::vector<TestSeq> out;
    for (size_t i = 0; i < kinds.size(); ++i)
      out.push_back(
          {prompt_of(lens[i], tf_->config().n_vocab, static_cast<int64_t>(i)), kinds[i], chunks[i]});
    return out;
  }

  // Reference: the batch-1 fast path, token by token; the logits after the prompt and after each greedy
  // token (n_gen of them).
  std::vector<std::vector<float>> decode_alone(const TestSeq& t, int64_t n_gen) const {
    SequenceKv kv(spec_of(t.kind, 64));
    stage(kv, t.kind);
    DecodeScratch s;
    std::vector<std::vector<float>> out;
    const float* logits = nullptr;
    for (int32_t id : t.prompt) logits = tf_->decode_step(id, kv, s);
    const int64_t V = tf_->config().n_vocab;
    for (int64_t g = 0; g < n_gen; ++g) {
      out.emplace_back(logits, logits + V);
      const int32_t next = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
      logits = tf_->decode_step(next, kv, s);
    }
    return out;
  }

  std::unique_ptr<Transformer> tf_;
  std::shared_ptr<const KvSpliceSet> splice_;
  std::shared_ptr<const RepairSet> repair_;
};

// Runs every sequence through forward_batch together (paged from one pool): prompts in chunks, decode rows
// of finished prompts in the same steps, greedy. Returns each sequence's logits per generated token.
std::vector<std::vector<std::vector<float>>> run_batched(const Transformer& tf,
                                                         const std::vector<TestSeq>& seqs,
                                                         const std::vector<std::unique_ptr<SequenceKv>>& kvs,
                                                         int64_t n_gen) {
  const int64_t V = tf.config().n_vocab;
  std::vector<std::vector<std::vector<float>>> got(seqs.size());
  std::vector<size_t> fed(seqs.size(), 0);
  std::vector<int32_t> last(seqs.size(), -1);
  BatchScratch scratch;
  for (int step = 0; step < 1000; ++step) {
    std::vector<StepSeq> batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (static_cast<int64_t>(got[i].size()) >= n_gen) continue;
      StepSeq q;
      q.kv = kvs[i].get();
      if (fed[i] < seqs[i].prompt.size()) {
        const auto n = std::min<size_t>(static_cast<size_t>(seqs[i].chunk), seqs[i].prompt.size() - fed[i]);
        q.tokens = seqs[i].prompt.data() + fed[i];
        q.n_tokens = static_cast<int64_t>(n);
        fed[i] += n;
        q.logits = fed[i] == seqs[i].prompt.size();
      } else {
        q.tokens = &last[i];
        q.n_tokens = 1;
        q.logits = true;
      }
      EXPECT_TRUE(q.kv->reserve(q.kv->n_tokens() + q.n_tokens));
      batch.push_back(q);
      who.push_back(i);
    }
    if (batch.empty()) break;
    const float* logits = tf.forward_batch(batch, scratch);
    for (size_t j = 0; j < batch.size(); ++j) {
      if (!batch[j].logits) continue;
      const size_t i = who[j];
      got[i].emplace_back(logits, logits + V);
      last[i] = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
      logits += V;
    }
  }
  return got;
}

TEST_P(ForwardBatchTest, EverySequenceMatchesDecodingItAlone) {
  c10::InferenceMode im;
  const std::vector<TestSeq> seqs = sequences();
  const int64_t n_gen = 6, V = tf_->config().n_vocab;
  auto pool = HostKvStorage::create(256, kv_pool_block_bytes(tf_->kv_spec(64, KvCodecKind::kF32), 4));
  ASSERT_TRUE(pool.ok()) << pool.status();
  KvBlockBooks books((*pool)->n_blocks(), (*pool)->block_bytes());
  std::vector<std::unique_ptr<SequenceKv>> kvs;
  for (const TestSeq& t : seqs) {
    kvs.push_back(std::make_unique<SequenceKv>(spec_of(t.kind, 64), &books, pool->get()));
    stage(*kvs.back(), t.kind);
  }
  const auto got = run_batched(*tf_, seqs, kvs, n_gen);
  for (size_t i = 0; i < seqs.size(); ++i) {
    SCOPED_TRACE(std::string(kv_codec_name(seqs[i].kind.codec)) + (seqs[i].kind.repair ? "+repair" : "") +
                 " prompt " + std::to_string(seqs[i].prompt.size()));
    // paged: it holds exactly the blocks its positions need, at its codec's positions per block
    EXPECT_EQ(static_cast<int64_t>(kvs[i]->block_table().size()), kvs[i]->blocks_for(kvs[i]->n_tokens()));
    const auto want = decode_alone(seqs[i], n_gen);
    ASSERT_EQ(got[i].size(), want.size());
    for (int64_t g = 0; g < n_gen; ++g) {
      float worst = 0;
      for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(got[i][g][v] - want[g][v]));
      EXPECT_LE(worst, 1e-4) << "generated token " << g;
      EXPECT_EQ(std::max_element(got[i][g].begin(), got[i][g].end()) - got[i][g].begin(),
                std::max_element(want[g].begin(), want[g].end()) - want[g].begin())
          << "greedy token " << g;
    }
  }
}

TEST_P(ForwardBatchTest, ARowsLogitsDoNotDependOnItsBatchOrChunking) {
  c10::InferenceMode im;
  std::vector<TestSeq> seqs = sequences();
  const int64_t n_gen = 4;
  auto pool = HostKvStorage::create(512, kv_pool_block_bytes(tf_->kv_spec(64, KvCodecKind::kF32), 8));
  ASSERT_TRUE(pool.ok());
  KvBlockBooks books((*pool)->n_blocks(), (*pool)->block_bytes());
  std::vector<std::unique_ptr<SequenceKv>> kvs;
  for (const TestSeq& t : seqs) {
    kvs.push_back(std::make_unique<SequenceKv>(spec_of(t.kind, 64), &books, pool->get()));
    stage(*kvs.back(), t.kind);
  }
  const auto together = run_batched(*tf_, seqs, kvs, n_gen);
  for (size_t i = 0; i < seqs.size(); ++i) {
    TestSeq alone = seqs[i];
    alone.chunk = 1000;  // the whole prompt in one step, and no other sequence in the batch
    std::vector<std::unique_ptr<SequenceKv>> kv1;
    kv1.push_back(std::make_unique<SequenceKv>(spec_of(alone.kind, 64), &books, pool->get()));
    stage(*kv1.back(), alone.kind);
    const auto solo = run_batched(*tf_, {alone}, kv1, n_gen);
    for (int64_t g = 0; g < n_gen; ++g)
      EXPECT_EQ(std::memcmp(solo[0][g].data(), together[i][g].data(), solo[0][g].size() * sizeof(float)), 0)
          << kv_codec_name(seqs[i].kind.codec) << " token " << g;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ForwardBatchTest, ::testing::ValuesIn(model_cases()),
                         [](const ::testing::TestParamInfo<ModelCase>& i) { return i.param.name; });

TEST(ForwardBatchTest2, RefusesBrokenInvariants) {
  c10::InferenceMode im;
  const auto tf = make_model({"llama", "builtin:tiny"});
  BatchScratch s;
  SequenceKv small(tf->kv_spec(2, KvCodecKind::kF32));
  const int32_t three[] = {1, 2, 3};
  EXPECT_THROW(tf->forward_batch({StepSeq{&small, three, 3, true}}, s), c10::Error);  // over capacity
  const int32_t bad = 100000;
  EXPECT_THROW(tf->forward_batch({StepSeq{&small, &bad, 1, true}}, s), c10::Error);  // token out of range
}

}  // namespace
}  // namespace frost
