// The device-resident decoder (kernels/cuda/model.h) against the CPU: a naive CPU forward on random LLaMA
// (GQA) and GPT-2 shapes with every KV format and both weight dtypes, batched steps against sequences run
// alone, CUDA graph replays against direct launches, and stories260K against the CPU golden
// (../shared/models/stories260K/reference.json, which the CPU path's golden tests hold frost to).
//
// Tolerances (max |gpu − cpu| / max(1, max |cpu|) over the logits): fp32 weights 1e-4 with every KV format;
// bf16 weights 5e-3 (tolerance() says why); batched vs alone 1e-4.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "kernels/cuda/model.h"
#include "kernels/cuda/reference.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/hf_checkpoint.h"

namespace frost::cuda {
namespace {

using testing::random_floats;
using testing::rel_max_diff;

std::string source_dir() { return FROST_SOURCE_DIR; }

std::string stories_reference_path() {
  if (const char* p = std::getenv("FROST_STORIES_REFERENCE")) return p;
  return source_dir() + "/../shared/models/stories260K/reference.json";
}

// Random weights in host memory, the distribution of core/model/builtin_models.cc.
struct RandomWeights {
  std::vector<std::vector<float>> store;
  HostWeights w;
  const float* add(size_t n, uint64_t seed, float std, float mean = 0.f) {
    const float a = std * std::sqrt(3.f);
    store.push_back(random_floats(n, seed, mean - a, mean + a));
    return store.back().data();
  }
  RandomWeights(const ModelSpec& s, uint64_t seed) {
    store.reserve(64);
    const size_t C = s.dim, V = s.n_vocab, F = s.ffn_dim, Q = s.q_dim(), QKV = Q + 2 * s.kv_dim();
    const bool gpt2 = s.arch == Arch::kGpt2;
    const size_t FIN = gpt2 ? F : 2 * F;
    auto mat = [&](size_t o, size_t i) { return add(o * i, ++seed, 1.f / std::sqrt(static_cast<float>(i))); };
    w.tok_embed = add(V * C, ++seed, 0.05f);
    if (gpt2) w.pos_embed = add(static_cast<size_t>(s.max_pos) * C, ++seed, 0.1f);
    for (int l = 0; l < s.n_layer; ++l) {
      HostLayer L;
      L.attn_norm_w = add(C, ++seed, 0.1f, 1.f);
      L.mlp_norm_w = add(C, ++seed, 0.1f, 1.f);
      L.wqkv = mat(QKV, C);
      L.wo = mat(C, Q);
      L.w_in = mat(FIN, C);
      L.w_out = mat(C, F);
      if (gpt2) {
        L.attn_norm_b = add(C, ++seed, 0.02f);
        L.mlp_norm_b = add(C, ++seed, 0.02f);
        L.bqkv = add(QKV, ++seed, 0.02f);
        L.bo = add(C, ++seed, 0.02f);
        L.b_in = add(FIN, ++seed, 0.02f);
        L.b_out = add(C, ++seed, 0.02f);
      }
      w.layers.push_back(L);
    }
    w.final_norm_w = add(C, ++seed, 0.1f, 1.f);
    if (gpt2) w.final_norm_b = add(C, ++seed, 0.02f);
    if (!s.tie_embeddings) w.lm_head = mat(V, C);
  }
};

ModelSpec llama_gqa() {
  ModelSpec s;
  s.arch = Arch::kLlama;
  s.n_vocab = 300;
  s.dim = 128;
  s.n_layer = 2;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.head_dim = 16;
  s.ffn_dim = 200;
  s.max_pos = 64;
  s.tie_embeddings = true;
  return s;
}

ModelSpec gpt2_shape() {
  ModelSpec s;
  s.arch = Arch::kGpt2;
  s.n_vocab = 300;
  s.dim = 64;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 4;
  s.head_dim = 16;
  s.ffn_dim = 256;
  s.max_pos = 64;
  s.tie_embeddings = false;
  return s;
}

// One sequence's KV blocks, taken from an allocator as it grows.
struct Seq {
  int slot = 0;
  std::vector<int32_t> tokens, blocks;
  void reserve(Model& m, BlockAllocator& a, int n_positions) {
    const int bt = m.kv_layout().block_tokens;
    while (static_cast<int>(blocks.size()) * bt < n_positions) {
      const int b = a.alloc();
      if (b < 0) throw std::runtime_error("test pool exhausted");
      blocks.push_back(b);
    }
    m.set_blocks(slot, blocks);
  }
};

const std::vector<KvFormat> kFormats = {KvFormat::kF32, KvFormat::kF16, KvFormat::kBF16, KvFormat::kInt8,
                                        KvFormat::kInt4};

// fp32 weights: 1e-4 for every KV format (seen on an H200: ≤ 1e-5); bf16 weights: 5e-3, since the GEMM rounds
// its activations to bf16 and a last-bit difference upstream moves one of them by a bf16 unit, 2⁻⁸ relative
// (seen: up to 2.8e-3).
double tolerance(DType w, KvFormat) { return w == DType::kF32 ? 1e-4 : 5e-3; }

TEST(CudaModel, RandomLlamaAndGpt2MatchTheCpuForwardInEveryFormat) {
  FROST_REQUIRE_GPU();
  for (const ModelSpec& spec : {llama_gqa(), gpt2_shape()}) {
    const RandomWeights rw(spec, spec.arch == Arch::kLlama ? 7 : 8);
    std::mt19937 g(3);
    std::vector<int32_t> tokens(20);
    for (auto& t : tokens) t = static_cast<int32_t>(g() % static_cast<unsigned>(spec.n_vocab));
    for (DType wd : {DType::kF32, DType::kBF16})
      for (KvFormat f : kFormats) {
        SCOPED_TRACE(std::string(spec.arch == Arch::kLlama ? "llama" : "gpt2") +
                     (wd == DType::kF32 ? " fp32" : " bf16") + " kv " + kv_format_name(f));
        ModelOptions o;
        o.weights = wd;
        o.kv = f;
        o.max_seqs = 4;
        o.max_rows = 32;
        Model m(spec, rw.w, o);
        BlockAllocator alloc(m.n_blocks());
        Seq s;
        s.reserve(m, alloc, 20);
        const std::vector<float> ref = ref::forward(spec, rw.w, wd, f, tokens);
        // Prefill 12 rows (logits for each), then 8 single-row decode steps.
        Model::Step pre;
        for (int i = 0; i < 12; ++i) {
          pre.token.push_back(tokens[i]);
          pre.seq.push_back(0);
          pre.pos.push_back(i);
          pre.logit_rows.push_back(i);
        }
        std::vector<float> got = m.forward_logits(pre);
        for (int i = 12; i < 20; ++i) {
          const std::vector<float> l = m.forward_logits(Model::Step{{tokens[i]}, {0}, {i}, {0}});
          got.insert(got.end(), l.begin(), l.end());
        }
        const double d = rel_max_diff(got, ref);
        EXPECT_LT(d, tolerance(wd, f));
        std::printf("  gpu vs cpu forward: %s %s kv %-4s  max rel diff %.2e\n",
                    spec.arch == Arch::kLlama ? "llama" : "gpt2 ", wd == DType::kF32 ? "fp32" : "bf16",
                    kv_format_name(f), d);
      }
  }
}

// Runs sequences alone (prefill step, then greedy decode steps of one row), recording each step's logits.
std::vector<std::vector<float>> run_alone(Model& m, BlockAllocator& a, Seq s, int n_new) {
  std::vector<std::vector<float>> out;
  s.reserve(m, a, static_cast<int>(s.tokens.size()) + n_new);
  Model::Step pre;
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    pre.token.push_back(s.tokens[i]);
    pre.seq.push_back(s.slot);
    pre.pos.push_back(static_cast<int32_t>(i));
  }
  pre.logit_rows = {static_cast<int32_t>(s.tokens.size()) - 1};
  out.push_back(m.forward_logits(pre));
  for (int k = 1; k < n_new; ++k) {
    const int32_t t = ref::argmax(out.back().data(), m.spec().n_vocab);
    const int32_t p = static_cast<int32_t>(s.tokens.size());
    s.tokens.push_back(t);
    out.push_back(m.forward_logits(Model::Step{{t}, {s.slot}, {p}, {0}}));
  }
  return out;
}

TEST(CudaModel, BatchedStepsEqualEachSequenceRunAlone) {
  FROST_REQUIRE_GPU();
  const ModelSpec spec = llama_gqa();
  const RandomWeights rw(spec, 11);
  const std::vector<int> lens = {1, 3, 17, 30, 8};
  const int n_new = 6;
  for (KvFormat f : kFormats) {
    SCOPED_TRACE(kv_format_name(f));
    ModelOptions o;
    o.kv = f;
    o.max_seqs = 12;
    o.max_rows = 64;
    Model m(spec, rw.w, o);
    BlockAllocator alloc(m.n_blocks());
    std::mt19937 g(17);
    std::vector<Seq> alone(lens.size()), batch(lens.size());
    std::vector<std::vector<std::vector<float>>> want;
    for (size_t i = 0; i < lens.size(); ++i) {
      alone[i].slot = static_cast<int>(i);
      for (int k = 0; k < lens[i]; ++k) alone[i].tokens.push_back(static_cast<int32_t>(g() % 300));
      batch[i] = alone[i];
      batch[i].slot = static_cast<int>(i + lens.size());
      want.push_back(run_alone(m, alloc, alone[i], n_new));
    }
    // Batched: one ragged step with every prompt, then decode steps with every sequence.
    Model::Step pre;
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i].reserve(m, alloc, lens[i] + n_new);
      for (int k = 0; k < lens[i]; ++k) {
        pre.token.push_back(batch[i].tokens[static_cast<size_t>(k)]);
        pre.seq.push_back(batch[i].slot);
        pre.pos.push_back(k);
      }
      pre.logit_rows.push_back(static_cast<int32_t>(pre.token.size()) - 1);
    }
    std::vector<float> l = m.forward_logits(pre);
    const int V = spec.n_vocab;
    for (int k = 0; k < n_new; ++k) {
      Model::Step st;
      for (size_t i = 0; i < batch.size(); ++i) {
        const std::vector<float> row(l.begin() + static_cast<int64_t>(i) * V,
                                     l.begin() + static_cast<int64_t>(i + 1) * V);
        ASSERT_LT(rel_max_diff(row, want[i][static_cast<size_t>(k)]), 1e-4)
            << "sequence " << i << " step " << k;
        const int32_t t = ref::argmax(row.data(), V);
        ASSERT_EQ(t, ref::argmax(want[i][static_cast<size_t>(k)].data(), V))
            << "sequence " << i << " step " << k;
        st.token.push_back(t);
        st.seq.push_back(batch[i].slot);
        st.pos.push_back(lens[i] + k);
        st.logit_rows.push_back(static_cast<int32_t>(i));
      }
      if (k + 1 < n_new) l = m.forward_logits(st);
    }
  }
}

TEST(CudaModel, CudaGraphReplaysGiveTheDirectLaunchesTokens) {
  FROST_REQUIRE_GPU();
  const ModelSpec spec = llama_gqa();
  const RandomWeights rw(spec, 13);
  std::vector<std::vector<int32_t>> outs;
  for (bool graphs : {false, true}) {
    ModelOptions o;
    o.cuda_graphs = graphs;
    o.max_seqs = 3;
    o.max_rows = 16;
    o.kv = KvFormat::kInt8;
    Model m(spec, rw.w, o);
    BlockAllocator alloc(m.n_blocks());
    std::vector<Seq> seqs(3);
    Model::Step st;
    for (int i = 0; i < 3; ++i) {
      seqs[i].slot = i;
      seqs[i].reserve(m, alloc, 40);
      st.token.push_back(10 + i);
      st.seq.push_back(i);
      st.pos.push_back(0);
      st.logit_rows.push_back(i);
    }
    std::vector<int32_t> all;
    for (int k = 0; k < 30; ++k) {
      std::vector<RowSampling> smp(3);
      for (int i = 0; i < 3; ++i)
        smp[i] =
            RowSampling{i == 2 ? 0.8f : 0.f, 0.f, (k * 0.37 + i * 0.11) - std::floor(k * 0.37 + i * 0.11)};
      const std::vector<int32_t> ids = m.forward_sample(st, smp);
      all.insert(all.end(), ids.begin(), ids.end());
      for (int i = 0; i < 3; ++i) st.token[i] = ids[i], st.pos[i] = k + 1;
    }
    if (graphs) {  // one graph per attention split the growing context passed through, not one per step
      int sms = 0;
      FROST_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
      std::set<std::pair<int, int>> splits;
      for (int k = 0; k < 30; ++k) {
        const AttentionSplit a = attention_split(k + 1, 3, spec.n_head_kv, 4 * sms);
        splits.insert({a.split_len, a.n_splits});
      }
      EXPECT_EQ(m.graphs_captured(), static_cast<int>(splits.size()));
      EXPECT_LT(m.graphs_captured(), 30);
    }
    outs.push_back(all);
  }
  EXPECT_EQ(outs[0], outs[1]);
}

std::string read_text(const std::string& p) {
  std::ifstream f(p);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The CPU twin itself on the real checkpoint: no GPU needed, so it runs everywhere and proves that the
// reference the GPU is held to is the model (the CPU golden), not just self-consistent.
TEST(CudaReference, Stories260KForwardMatchesTheCpuGolden) {
  const std::string refp = stories_reference_path();
  if (!std::ifstream(refp)) GTEST_SKIP() << "no golden at " << refp << " (set FROST_STORIES_REFERENCE)";
  const auto ck = testing::load_hf_llama(source_dir() + "/models/stories260K");
  const nlohmann::json golden = nlohmann::json::parse(read_text(refp));
  const auto& c = golden.at("cases").at(0);
  std::vector<int32_t> tokens = c.at("input_ids").get<std::vector<int32_t>>();
  const std::vector<float> l = ref::forward(ck.spec, ck.weights, DType::kF32, KvFormat::kF32, tokens);
  const float* last = l.data() + (tokens.size() - 1) * static_cast<size_t>(ck.spec.n_vocab);
  for (const auto& e : c.at("top20_last_position"))
    EXPECT_NEAR(last[e[0].get<int>()], e[1].get<float>(), 1e-4);
  const std::vector<int32_t> greedy = c.at("greedy_new_ids").get<std::vector<int32_t>>();
  for (size_t k = 0; k < 8; ++k) {  // 8 tokens by full recomputation (the twin has no cache)
    const std::vector<float> lk = ref::forward(ck.spec, ck.weights, DType::kF32, KvFormat::kF32, tokens);
    const int32_t t =
        ref::argmax(lk.data() + (tokens.size() - 1) * static_cast<size_t>(ck.spec.n_vocab), ck.spec.n_vocab);
    ASSERT_EQ(t, greedy[k]) << "token " << k;
    tokens.push_back(t);
  }
}

TEST(CudaModel, Stories260KGreedyEqualsTheCpuGoldenTokenForToken) {
  FROST_REQUIRE_GPU();
  const std::string refp = stories_reference_path();
  if (!std::ifstream(refp)) GTEST_SKIP() << "no golden at " << refp << " (set FROST_STORIES_REFERENCE)";
  const auto ck = testing::load_hf_llama(source_dir() + "/models/stories260K");
  const nlohmann::json golden = nlohmann::json::parse(read_text(refp));
  for (bool graphs : {false, true}) {
    ModelOptions o;
    o.max_seqs = 4;
    o.max_rows = 64;
    o.cuda_graphs = graphs;
    Model m(ck.spec, ck.weights, o);
    BlockAllocator alloc(m.n_blocks());
    int slot = 0;
    for (const auto& c : golden.at("cases")) {
      const std::vector<int32_t> ids = c.at("input_ids").get<std::vector<int32_t>>();
      const std::vector<int32_t> want = c.at("greedy_new_ids").get<std::vector<int32_t>>();
      Seq s;
      s.slot = slot++;
      s.reserve(m, alloc, static_cast<int>(ids.size() + want.size()));
      Model::Step pre;
      for (size_t i = 0; i < ids.size(); ++i) {
        pre.token.push_back(ids[i]);
        pre.seq.push_back(s.slot);
        pre.pos.push_back(static_cast<int32_t>(i));
      }
      pre.logit_rows = {static_cast<int32_t>(ids.size()) - 1};
      const std::vector<float> l = m.forward_logits(pre);
      double worst = 0;
      for (const auto& e : c.at("top20_last_position"))
        worst = std::max(worst, std::fabs(static_cast<double>(l[e[0].get<size_t>()]) - e[1].get<double>()));
      EXPECT_LT(worst, 1e-4) << c.at("prompt");
      std::vector<int32_t> got = {ref::argmax(l.data(), ck.spec.n_vocab)};
      for (size_t k = 1; k < want.size(); ++k) {
        const int32_t p = static_cast<int32_t>(ids.size() + k - 1);
        got.push_back(m.forward_greedy(Model::Step{{got.back()}, {s.slot}, {p}, {0}})[0]);
      }
      EXPECT_EQ(got, want) << c.at("prompt") << (graphs ? " (CUDA graphs)" : "");
      std::printf("  stories260K '%s': top-20 logits max |diff| %.2e, %zu greedy tokens %s%s\n",
                  c.at("prompt").get<std::string>().c_str(), worst, want.size(),
                  got == want ? "equal" : "DIFFER", graphs ? " (graphs)" : "");
    }
  }
}

TEST(CudaModel, RefusesWhatItCannotServeWithTheReason) {
  FROST_REQUIRE_GPU();
  const ModelSpec spec = llama_gqa();
  const RandomWeights rw(spec, 5);
  auto message = [&](ModelSpec s, ModelOptions o) -> std::string {
    try {
      Model m(s, rw.w, o);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  ModelOptions o;
  o.device = 99;
  EXPECT_NE(message(spec, o).find("no CUDA device 99"), std::string::npos) << message(spec, o);
  ModelSpec g3 = spec;
  g3.n_head = 6;
  g3.n_head_kv = 2;
  EXPECT_NE(message(g3, ModelOptions{}).find("got 3"), std::string::npos) << message(g3, ModelOptions{});
  ModelOptions huge;
  huge.n_blocks = 2000000000;
  const std::string oom = message(spec, huge);
  EXPECT_NE(oom.find("out of device memory allocating"), std::string::npos) << oom;
  EXPECT_NE(oom.find("KV block pool"), std::string::npos) << oom;

  ModelOptions ok;
  ok.max_seqs = 2;
  ok.max_rows = 4;
  Model m(spec, rw.w, ok);
  auto step_error = [&](const Model::Step& st) -> std::string {
    try {
      m.forward_logits(st);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(step_error(Model::Step{{300}, {0}, {0}, {0}}).find("token 300 out of [0, 300)"),
            std::string::npos);
  EXPECT_NE(step_error(Model::Step{{1}, {0}, {64}, {0}}).find("position 64"), std::string::npos);
  EXPECT_NE(step_error(Model::Step{{1, 2, 3, 4, 5}, {0, 0, 0, 0, 0}, {0, 1, 2, 3, 4}, {4}}).find("1..4 rows"),
            std::string::npos);
  // After refusals the model still serves.
  BlockAllocator alloc(m.n_blocks());
  Seq s;
  s.reserve(m, alloc, 4);
  EXPECT_EQ(m.forward_logits(Model::Step{{1}, {0}, {0}, {0}}).size(), 300u);
}

}  // namespace
}  // namespace frost::cuda
