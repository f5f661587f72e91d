// Malformed checkpoint directories through load_model(): every one is refused with a clear
// status (code + a message naming the file / tensor / field), never a crash. The positive
// controls load the same tiny checkpoint unmodified, so each negative test fails for the one
// defect it introduces.
#include "core/model/model_loader.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/testing/st_writer.h"
#include "tests/testing/test_util.h"
#include "tests/testing/tiny_checkpoint.h"

namespace frost {
namespace {

using ::frost::testing::NamedTensors;
using ::frost::testing::safetensors_bytes;
using ::frost::testing::TempDir;
using ::frost::testing::write_model_dir;
using ::frost::testing::write_text_file;
using ojson = nlohmann::ordered_json;

// Tiny LLaMA: V = 64, C = 16, H = 4, Hkv = 2, D = 4, F = 24, 2 layers.
constexpr int64_t V = 64, C = 16, H = 4, Hkv = 2, D = 4, F = 24, L = 2;

// The shared tiny checkpoint (tests/testing/tiny_checkpoint.h), with this file's values: 32 positions, an
// explicit rope_scaling null, weights scaled by 0.1.
ojson tiny_config() {
  ojson j = ::frost::testing::tiny_llama_config(V, /*max_pos=*/32);
  j["rope_scaling"] = nullptr;
  return j;
}

at::Tensor param(std::vector<int64_t> shape, int64_t salt) { return ::frost::testing::tiny_param(shape, salt, 0.1); }

NamedTensors tiny_tensors(bool with_lm_head = false) {
  return ::frost::testing::tiny_llama_tensors(V, at::kFloat, 0.1, with_lm_head);
}

// A safetensors file split into its header JSON and data section, for surgery.
struct StParts {
  ojson header;
  std::string data;
};

StParts split(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {ojson::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

std::string join(const std::string& header_text, const std::string& data) {
  std::string h = header_text;
  while (h.size() % 8) h.push_back(' ');
  std::string out(8, '\0');
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  return out + h + data;
}

std::string join(const StParts& p) { return join(p.header.dump(), p.data); }

class BadCheckpointTest : public ::testing::Test {
 protected:
  std::string st_path() const { return dir_.file("model.safetensors"); }
  std::string cfg_path() const { return dir_.file("config.json"); }

  // The valid tiny checkpoint.
  void write_good(bool with_lm_head = false) {
    write_model_dir(dir_.path(), tiny_config().dump(2), tiny_tensors(with_lm_head));
  }
  void write_config(const ojson& cfg) { write_text_file(cfg_path(), cfg.dump(2)); }
  void write_weights(const std::string& bytes) { write_text_file(st_path(), bytes); }
  // Config + weights, with `edit` applied to the header of the valid file.
  void write_with_header_edit(const std::function<void(StParts&)>& edit) {
    write_config(tiny_config());
    StParts p = split(safetensors_bytes(tiny_tensors()));
    edit(p);
    write_weights(join(p));
  }

  absl::Status load() { return load_model(dir_.path()).status(); }

  void expect_error(absl::StatusCode code, const std::vector<std::string>& substrs) {
    const absl::Status s = load();
    EXPECT_EQ(s.code(), code) << s;
    for (const std::string& sub : substrs) EXPECT_MSG_HAS(s, sub);
  }
  void expect_invalid(const std::vector<std::string>& substrs) {
    expect_error(absl::StatusCode::kInvalidArgument, substrs);
  }

  TempDir dir_{"frost_bad_ckpt"};
};

// ---- positive controls ----------------------------------------------------------------------

TEST_F(BadCheckpointTest, ControlTinyCheckpointLoads) {
  write_good();
  auto m = load_model(dir_.path());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config.arch, Arch::kLlama);
  EXPECT_EQ((*m)->config.dim, C);
  EXPECT_EQ((*m)->config.n_head_kv, Hkv);
  ASSERT_NE((*m)->model, nullptr);
  EXPECT_EQ((*m)->model->config().n_layer, L);
  EXPECT_EQ((*m)->source.empty(), false);
  // The weights are copies, not views of the (now unmapped) file.
  EXPECT_TRUE(at::equal((*m)->model->weights().final_norm_w, param({C}, 2 + 9 * L)));
}

TEST_F(BadCheckpointTest, ControlUntiedBf16CheckpointLoads) {
  ojson cfg = tiny_config();
  cfg["tie_word_embeddings"] = false;
  NamedTensors ts = tiny_tensors(/*with_lm_head=*/true);
  for (auto& [name, t] : ts) t = t.to(at::kBFloat16);
  write_model_dir(dir_.path(), cfg.dump(), ts);
  auto m = load_model(dir_.path());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->config.tie_embeddings);
}

// ---- damaged safetensors files --------------------------------------------------------------

TEST_F(BadCheckpointTest, TruncatedData) {
  write_config(tiny_config());
  const std::string good = safetensors_bytes(tiny_tensors());
  write_weights(good.substr(0, good.size() - 10));
  // The last tensor in the file is model.norm.weight.
  expect_invalid({"model.safetensors", "tensor 'model.norm.weight'", "extend past the data section"});
}

TEST_F(BadCheckpointTest, TruncatedInsideHeader) {
  write_config(tiny_config());
  write_weights(safetensors_bytes(tiny_tensors()).substr(0, 100));
  expect_invalid({"model.safetensors", "extends past the end of the file"});
}

TEST_F(BadCheckpointTest, ShorterThanLengthPrefix) {
  write_config(tiny_config());
  write_weights(std::string("\x10\x00\x00", 3));
  expect_invalid({"model.safetensors", "shorter than the 8-byte header length"});
}

TEST_F(BadCheckpointTest, EmptySafetensorsFile) {
  write_config(tiny_config());
  write_weights("");
  expect_invalid({"model.safetensors", "empty file"});
}

TEST_F(BadCheckpointTest, HeaderLengthPastEnd) {
  write_config(tiny_config());
  std::string bytes = safetensors_bytes(tiny_tensors());
  const uint64_t n = bytes.size() + 1000;  // under the 100 MiB cap, past the end
  std::memcpy(bytes.data(), &n, 8);
  write_weights(bytes);
  expect_invalid({"model.safetensors", "header length " + std::to_string(n), "extends past the end of the file"});
}

TEST_F(BadCheckpointTest, HeaderLengthOverCap) {
  write_config(tiny_config());
  std::string bytes = safetensors_bytes(tiny_tensors());
  const uint64_t n = uint64_t{1} << 40;
  std::memcpy(bytes.data(), &n, 8);
  write_weights(bytes);
  expect_invalid({"model.safetensors", "exceeds the limit"});
}

TEST_F(BadCheckpointTest, NonJsonHeader) {
  write_config(tiny_config());
  std::string bytes = safetensors_bytes(tiny_tensors());
  bytes[8] = 'X';  // the header's opening '{'
  write_weights(bytes);
  expect_invalid({"model.safetensors", "header is not valid JSON"});
}

TEST_F(BadCheckpointTest, OverlappingOffsets) {
  write_with_header_edit([](StParts& p) {
    // v_proj claims k_proj's bytes (same shape, so the byte span still matches).
    p.header["model.layers.0.self_attn.v_proj.weight"]["data_offsets"] =
        p.header["model.layers.0.self_attn.k_proj.weight"]["data_offsets"];
  });
  expect_invalid({"model.safetensors", "overlap", "model.layers.0.self_attn.k_proj.weight",
                  "model.layers.0.self_attn.v_proj.weight"});
}

TEST_F(BadCheckpointTest, GapBetweenTensors) {
  write_with_header_edit([](StParts& p) {
    // Move model.norm.weight (last) 4 bytes further and pad the data: a hole of 4 bytes.
    auto& off = p.header["model.norm.weight"]["data_offsets"];
    off = {off[0].get<uint64_t>() + 4, off[1].get<uint64_t>() + 4};
    p.data += std::string(4, '\0');
  });
  expect_invalid({"model.safetensors", "gap of 4 unused bytes before tensor 'model.norm.weight'"});
}

TEST_F(BadCheckpointTest, TrailingBytes) {
  write_with_header_edit([](StParts& p) { p.data += "garbage!"; });
  expect_invalid({"model.safetensors", "8 trailing bytes"});
}

TEST_F(BadCheckpointTest, UnknownDtype) {
  write_with_header_edit([](StParts& p) { p.header["model.norm.weight"]["dtype"] = "I64"; });
  expect_invalid({"model.safetensors", "unsupported dtype 'I64' for tensor 'model.norm.weight'"});
}

TEST_F(BadCheckpointTest, NumelByteSpanMismatch) {
  write_with_header_edit([](StParts& p) { p.header["model.layers.1.mlp.up_proj.weight"]["shape"] = {F + 1, C}; });
  expect_invalid({"model.safetensors", "tensor 'model.layers.1.mlp.up_proj.weight'", "needs"});
}

TEST_F(BadCheckpointTest, NegativeShape) {
  write_with_header_edit([](StParts& p) { p.header["model.norm.weight"]["shape"] = {-16}; });
  expect_invalid({"model.safetensors", "tensor 'model.norm.weight': shape"});
}

TEST_F(BadCheckpointTest, DuplicateTensorNames) {
  write_config(tiny_config());
  const StParts p = split(safetensors_bytes(tiny_tensors()));
  std::string h = p.header.dump();
  // Rename v_proj's entry to k_proj (same length): two entries named k_proj.
  const std::string from = "\"model.layers.0.self_attn.v_proj.weight\"";
  const std::string to = "\"model.layers.0.self_attn.k_proj.weight\"";
  const size_t at = h.find(from);
  ASSERT_NE(at, std::string::npos);
  h.replace(at, from.size(), to);
  write_weights(join(h, p.data));
  expect_invalid({"model.safetensors", "duplicate tensor name 'model.layers.0.self_attn.k_proj.weight'"});
}

TEST_F(BadCheckpointTest, TorchScriptZipNamedSafetensors) {
  write_config(tiny_config());
  write_weights(std::string("PK\x03\x04\x14\x00\x00\x00\x08\x00", 10) + "archive/constants.pkl" + std::string(64, 'z'));
  expect_invalid({"unsupported format: use safetensors"});
}

TEST_F(BadCheckpointTest, PickleNamedSafetensors) {
  write_config(tiny_config());
  write_weights(std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15) + std::string(64, 'q'));
  expect_invalid({"unsupported format: use safetensors"});
}

// ---- files that are valid safetensors but do not match the config ---------------------------

TEST_F(BadCheckpointTest, ShapeConfigMismatch) {
  NamedTensors ts = tiny_tensors();
  for (auto& [name, t] : ts) {
    if (name == "model.norm.weight") t = param({2 * C}, 1);
  }
  write_model_dir(dir_.path(), tiny_config().dump(), ts);
  expect_invalid({"model.safetensors", "tensor 'model.norm.weight' has shape [32], expected [16]"});
}

TEST_F(BadCheckpointTest, VocabMismatch) {
  ojson cfg = tiny_config();
  cfg["vocab_size"] = V + 16;
  write_model_dir(dir_.path(), cfg.dump(), tiny_tensors());
  expect_invalid({"tensor 'model.embed_tokens.weight' has shape [64, 16], expected [80, 16]"});
}

TEST_F(BadCheckpointTest, MissingTensor) {
  NamedTensors ts = tiny_tensors();
  ts.erase(std::remove_if(ts.begin(), ts.end(),
                          [](const auto& nt) { return nt.first == "model.layers.1.mlp.down_proj.weight"; }),
           ts.end());
  write_model_dir(dir_.path(), tiny_config().dump(), ts);
  expect_invalid({"model.layers.1.mlp.down_proj.weight", "missing"});
}

TEST_F(BadCheckpointTest, MissingLmHeadWhenUntied) {
  ojson cfg = tiny_config();
  cfg["tie_word_embeddings"] = false;
  write_model_dir(dir_.path(), cfg.dump(), tiny_tensors(/*with_lm_head=*/false));
  expect_invalid({"lm_head.weight", "missing"});
}

TEST_F(BadCheckpointTest, UnexpectedExtraTensor) {
  NamedTensors ts = tiny_tensors();
  ts.emplace_back("model.layers.0.self_attn.q_norm.weight", param({D}, 99));
  write_model_dir(dir_.path(), tiny_config().dump(), ts);
  expect_invalid({"model.safetensors", "unexpected tensor 'model.layers.0.self_attn.q_norm.weight'"});
}

TEST_F(BadCheckpointTest, ExtraLayerBeyondConfig) {
  ojson cfg = tiny_config();
  cfg["num_hidden_layers"] = 1;  // the file has layers 0 and 1
  write_model_dir(dir_.path(), cfg.dump(), tiny_tensors());
  expect_invalid({"unexpected tensor 'model.layers.1."});
}

TEST_F(BadCheckpointTest, SameTensorInTwoShards) {
  write_model_dir(dir_.path(), tiny_config().dump(), tiny_tensors());
  write_text_file(dir_.file("model-extra.safetensors"), safetensors_bytes({{"model.norm.weight", param({C}, 5)}}));
  expect_invalid({"tensor 'model.norm.weight' appears in both"});
}

// ---- refused formats ------------------------------------------------------------------------

TEST_F(BadCheckpointTest, PytorchBinOnly) {
  write_config(tiny_config());
  write_text_file(dir_.file("pytorch_model.bin"),
                  std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15));
  expect_invalid({"unsupported format: use safetensors"});
}

TEST_F(BadCheckpointTest, TorchScriptPtOnly) {
  write_config(tiny_config());
  write_text_file(dir_.file("model.pt"), std::string("PK\x03\x04\x14\x00\x00\x00\x08\x00", 10) + "model/data.pkl");
  expect_invalid({"unsupported format: use safetensors"});
}

TEST_F(BadCheckpointTest, PathIsAPickleFile) {
  const std::string bin = dir_.file("pytorch_model.bin");
  write_text_file(bin, std::string("\x80\x04\x95", 3));
  const absl::Status s = load_model(bin).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_MSG_HAS(s, "unsupported format: use safetensors");
}

TEST_F(BadCheckpointTest, PathIsASafetensorsFile) {
  write_good();
  const absl::Status s = load_model(st_path()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_MSG_HAS(s, "directory");
}

// ---- bad config.json ------------------------------------------------------------------------

TEST_F(BadCheckpointTest, ConfigNotJson) {
  write_model_dir(dir_.path(), "{\"architectures\": [\"LlamaForCausalLM\"], oops", tiny_tensors());
  expect_invalid({"config.json", "not valid JSON"});
}

TEST_F(BadCheckpointTest, ConfigUnknownArchitecture) {
  ojson cfg = tiny_config();
  cfg["architectures"] = {"BertModel"};
  cfg["model_type"] = "bert";
  write_model_dir(dir_.path(), cfg.dump(), tiny_tensors());
  expect_invalid({"config.json", "unsupported architecture 'BertModel'"});
}

TEST_F(BadCheckpointTest, ConfigMissingHiddenSize) {
  ojson cfg = tiny_config();
  cfg.erase("hidden_size");
  write_model_dir(dir_.path(), cfg.dump(), tiny_tensors());
  expect_invalid({"config.json", "hidden_size is missing"});
}

TEST_F(BadCheckpointTest, ConfigHeadsNotDivisible) {
  ojson cfg = tiny_config();
  cfg["num_key_value_heads"] = 3;
  write_model_dir(dir_.path(), cfg.dump(), tiny_tensors());
  expect_invalid({"config.json", "num_key_value_heads (3) must divide num_attention_heads (4)"});
}

TEST_F(BadCheckpointTest, ConfigRopeScaling) {
  ojson cfg = tiny_config();
  cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  write_model_dir(dir_.path(), cfg.dump(), tiny_tensors());
  expect_invalid({"config.json", "rope_scaling: low_freq_factor is missing"});
}

// ---- missing pieces -------------------------------------------------------------------------

TEST_F(BadCheckpointTest, MissingConfigJson) {
  write_weights(safetensors_bytes(tiny_tensors()));
  expect_error(absl::StatusCode::kNotFound, {"config.json"});
}

TEST_F(BadCheckpointTest, MissingWeights) {
  write_config(tiny_config());
  expect_error(absl::StatusCode::kNotFound, {"safetensors"});
}

TEST_F(BadCheckpointTest, EmptyDirectory) { expect_error(absl::StatusCode::kNotFound, {"config.json"}); }

TEST_F(BadCheckpointTest, NonexistentPath) {
  const absl::Status s = load_model(dir_.file("does/not/exist")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_MSG_HAS(s, "does/not/exist");
}

// fp16 weights (a device format): a checkpoint loads as fp16 with its matrices in half precision, and one
// whose matrix holds a value that rounds beyond fp16's range (|x| >= 65520 → inf) is refused naming the
// matrix — the same file still loads as fp32.
TEST_F(BadCheckpointTest, Fp16RefusesAMatrixBeyondItsRange) {
  LoadOptions f16;
  f16.dtype = WeightDtype::kF16;
  write_good();
  auto ok = load_model(dir_.path(), f16);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->model->weight_format(), WeightDtype::kF16);
  EXPECT_EQ((*ok)->model->weights().layers[0].w_out.scalar_type(), at::kHalf);
  EXPECT_EQ((*ok)->model->weights().final_norm_w.scalar_type(), at::kFloat);  // norms stay fp32
  NamedTensors ts = tiny_tensors();
  for (auto& [name, t] : ts)
    if (name == "model.layers.1.mlp.down_proj.weight")
      t[0][1] = 65520.f;  // the first value that rounds to inf
  write_model_dir(dir_.path(), tiny_config().dump(2), ts);
  const absl::Status s = load_model(dir_.path(), f16).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_MSG_HAS(s, "model.dtype fp16: layer 1 w_out has values beyond fp16's range");
  EXPECT_TRUE(load_model(dir_.path()).ok());
  for (auto& [name, t] : ts)  // 65519.99 rounds down to 65504, the largest half: served
    if (name == "model.layers.1.mlp.down_proj.weight") t[0][1] = 65519.99f;
  write_model_dir(dir_.path(), tiny_config().dump(2), ts);
  auto edge = load_model(dir_.path(), f16);
  ASSERT_TRUE(edge.ok()) << edge.status();
  EXPECT_EQ((*edge)->model->weights().layers[1].w_out[0][1].item<float>(), 65504.f);
}

}  // namespace
}  // namespace frost
