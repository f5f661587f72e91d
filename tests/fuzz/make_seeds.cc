// frost_fuzz_make_seeds <tests/fuzz dir> <shared dir> (`--help`: the flag table in main): (re)writes the text
// seed corpora corpus/<target>/seed-* of the repository. frost_fuzz_make_seeds --tensors <dir>: writes the
// tensor-file seeds (safetensors, repair_file, kvsplice_file: <dir>/corpus/<target>/seed-*) and
// <dir>/data/prototype.safetensors, which artifact_manifest_fuzz places beside its manifests. Tensor files
// are not kept in the repository (only the embedded default model is): the fuzz build runs --tensors into its
// build directory before any target (tests/fuzz/CMakeLists.txt). Seeds are small real inputs: files of
// ../shared/models/stories260K and
// ../shared/data, configs/default.yaml, the embedded models/stories260K, and files made by the project's own
// writers (safetensors_serialize, RepairSet::save, KvSpliceSet::save, ArtifactStore::publish,
// write_checked_file, save_artifact, spec_to_json, the generated protobuf classes). Deterministic: running it
// again rewrites the same bytes, except artifact.json's creation time. Regression inputs
// (corpus/*/regress-*) are never touched.
#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/common/fs.h"
#include "core/flags/flags.h"
#include "core/jobs/job_spec.h"
#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"
#include "core/prototype/artifact.h"
#include "core/serving/artifact_store.h"
#include "core/serving/checked_file.h"
#include "core/store/safetensors.h"
#ifdef FROST_FUZZ_WITH_SERVER
#include "frost/v1/generation.pb.h"
#include "server/server_config.h"
#endif

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string g_out;     // where put() writes corpus/<target>/: tests/fuzz, or the --tensors directory
std::string g_shared;  // ../shared

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "frost_fuzz_make_seeds: %s\n", what.c_str());
  std::exit(1);
}

void check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) die(what + ": " + s.ToString());
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = fs::path(g_out) / "corpus" / target;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) die("cannot write " + (dir / name).string());
  std::printf("  corpus/%s/%s (%zu bytes)\n", target.c_str(), name.c_str(), bytes.size());
}

std::string tmp_dir() {
  std::string t = (fs::temp_directory_path() / "frost-seeds-XXXXXX").string();
  if (mkdtemp(t.data()) == nullptr) die("mkdtemp");
  return t;
}

void safetensors_seeds() {
  using namespace frost;
  at::manual_seed(1);
  absl::StatusOr<std::string> two = safetensors_serialize({{"a.weight", at::randn({2, 3})},
                                                           {"b.bias", at::randn({3}).to(at::kBFloat16)},
                                                           {"c.half", at::randn({1, 2}).to(at::kHalf)}},
                                                          {{"format", "pt"}});
  check(two.status(), "safetensors_serialize");
  put("safetensors", "seed-three-tensors.safetensors", *two);
  absl::StatusOr<std::string> empty = safetensors_serialize({{"e", at::zeros({0, 4})}}, {});
  check(empty.status(), "safetensors_serialize");
  put("safetensors", "seed-empty-tensor.safetensors", *empty);
  // The real checkpoint's header, cut after the JSON (no data section): rejected as is, but every tensor
  // entry of a real model is there to mutate.
  const std::string model =
      read(std::string(FROST_FUZZ_SOURCE_DIR) + "/../../models/stories260K/model.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(model[static_cast<size_t>(i)]);
  put("safetensors", "seed-stories260K-header.safetensors", model.substr(0, 8 + n));
}

void model_config_seeds() {
  const std::string cfg = read(g_shared + "/models/stories260K/config.json");
  put("model_config", "seed-stories260K.json", cfg);
  json gpt2 = {{"architectures", {"GPT2LMHeadModel"}},
               {"model_type", "gpt2"},
               {"vocab_size", 300},
               {"n_embd", 32},
               {"n_layer", 2},
               {"n_head", 4},
               {"n_positions", 64},
               {"n_inner", nullptr},
               {"layer_norm_epsilon", 1e-5},
               {"activation_function", "gelu_new"},
               {"bos_token_id", 0},
               {"eos_token_id", {0, 1}},
               {"tie_word_embeddings", true},
               {"frost_variants", {{"mlp_ctx", {{"rank", 4}, {"layers", {1}}, {"conductor", true}}}}}};
  put("model_config", "seed-gpt2-variants.json", gpt2.dump(1));
  json llama = json::parse(cfg);
  llama["num_key_value_heads"] = 8;
  llama["frost_variants"] = {{"ra_layers", {0}},
                             {"sba", {{"layers", {1}}, {"alpha", 0.5}}},
                             {"router", {{"layers", {2}}, {"ra_heads", 2}, {"hidden", 8}}}};
  put("model_config", "seed-llama-variants.json", llama.dump(1));
}

// GPT-2's byte → code point map: printable Latin-1 bytes map to themselves, the rest to U+0100.. in order.
std::string gpt2_char(int b) {
  static std::vector<std::string> map = [] {
    std::vector<int> cp(256, -1);
    for (int c = '!'; c <= '~'; ++c) cp[c] = c;
    for (int c = 0xA1; c <= 0xAC; ++c) cp[c] = c;
    for (int c = 0xAE; c <= 0xFF; ++c) cp[c] = c;
    int next = 256;
    for (int c = 0; c < 256; ++c)
      if (cp[c] < 0) cp[c] = next++;
    std::vector<std::string> out;
    for (int c : cp) {
      std::string s;
      if (c < 0x80) {
        s += static_cast<char>(c);
      } else {
        s += static_cast<char>(0xC0 | (c >> 6));
        s += static_cast<char>(0x80 | (c & 0x3F));
      }
      out.push_back(s);
    }
    return out;
  }();
  return map[static_cast<size_t>(b)];
}

void tokenizer_seeds() {
  put("tokenizer_json", "seed-stories260K.json", read(g_shared + "/models/stories260K/tokenizer.json"));
  // A GPT-2 style byte-level tokenizer: the 256 byte symbols, a few merges, an end-of-text token.
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_char(b)] = b;
  const std::string sp = gpt2_char(' ');
  const std::vector<std::pair<std::string, std::string>> merges = {{sp, "t"},
                                                                   {"h", "e"},
                                                                   {sp + "t", "he"},
                                                                   {"i", "n"},
                                                                   {sp, "a"},
                                                                   {"o", "n"},
                                                                   {"e", "r"},
                                                                   {sp, sp},
                                                                   {"'", "s"},
                                                                   {"1", "2"},
                                                                   {gpt2_char('\n'), gpt2_char('\n')}};
  json merge_list = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(a + " " + b);
  }
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", id},
         {"content", "<|endoftext|>"},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false},
         {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  put("tokenizer_json", "seed-gpt2-bytelevel.json", j.dump(1));

  // tokenizer_encode: byte 0 = tokenizer (bit 0: byte-level) | add_bos (bit 1), then the text.
  put("tokenizer_encode", "seed-metaspace.txt",
      std::string("\x02") + "Once upon a time, there was a little girl.");
  put("tokenizer_encode", "seed-metaspace-nospace.txt",
      std::string("\x00", 1) + "Lily\xE2\x80\x99s caf\xC3\xA9!\n\t42");
  put("tokenizer_encode", "seed-bytelevel.txt",
      std::string("\x01") + "Hello world, it's 12 o'clock\n\nthe end  ");
  put("tokenizer_encode", "seed-bytelevel-bad-utf8.txt",
      std::string("\x03") + "\xF0\x9F\x99\x82 ok \xFF\xC3 \xE2\x96\x81x");
}

void jsonl_seeds() {
  std::istringstream in(read(g_shared + "/data/emobank_valence/train.jsonl"));
  std::string line, rows;
  for (int i = 0; i < 6 && std::getline(in, line); ++i) {
    json j = json::parse(line);
    j["label"] = j["label"].get<double>() - 2.0;  // into the fuzz target's bounds [-1.5, 2.5]
    rows += j.dump() + "\n";
  }
  put("jsonl_rows", "seed-emobank.jsonl", rows);
  put("jsonl_rows", "seed-text-only.jsonl",
      "{\"text\": \"Once upon a time\"}\n\n{\"text\": \"caf\\u00e9 \\ud83d\\ude42\", \"label\": 1}\r\n");
  put("jsonl_rows", "seed-inline-rows.jsonl",
      frost::jobs::training_rows_jsonl(
          {{"a", 0.5, "r1"}, {"b \"quoted\"\n", -1.5, ""}, {"\xE2\x82\xAC", 2.5, "x"}}));
}

void job_spec_seeds() {
  using namespace frost::jobs;
  PrototypeJobSpec p;
  p.inline_rows = std::vector<TrainingRow>{{"good", 4.5, "a"}, {"bad", 1.0, ""}};
  p.holdout_fraction = 0.25;
  p.label_min = 1;
  p.label_max = 5;
  p.config = {{"K", "4"}, {"epochs_b", "2"}};
  p.activate = true;
  put("job_spec", "seed-prototype.json", std::string("\x00", 1) + spec_to_json(JobSpec(p)));
  PrototypeJobSpec q;
  q.train_path = "emobank_valence/train.jsonl";
  q.test_path = "emobank_valence/test.jsonl";
  put("job_spec", "seed-prototype-paths.json", std::string("\x03") + spec_to_json(JobSpec(q)));
  KvRepairJobSpec r;
  r.calib_path = "calib.jsonl";
  r.calib_windows = 8;
  r.eval_windows = 4;
  r.config = {{"option", "B"}, {"rank", "4"}};
  put("job_spec", "seed-kv-repair.json", std::string("\x01") + spec_to_json(JobSpec(r)));
  KvSpliceJobSpec s;
  s.test_path = "test.jsonl";
  s.fisher_windows = 3;
  s.config = {{"rank", "8"}};
  put("job_spec", "seed-kvsplice.json", std::string("\x02") + spec_to_json(JobSpec(s)));
  JobProgress g;
  g.stage = "stage_b";
  g.epoch = 2;
  g.epochs = 10;
  g.step = 40;
  g.steps_total = 200;
  g.loss = 0.25;
  g.kl = 0.125;
  g.examples_per_s = 31.5;
  g.eta_s = 12;
  put("job_spec", "seed-progress.json", std::string("\x00", 1) + progress_to_json(g));
}

void kv_file_seeds() {
  using namespace frost;
  const std::string tmp = tmp_dir();
  const RepairDims rdims{8, 2, 3};
  int k = 0;
  for (const char* opt : {"A", "B", "C"}) {
    RepairConfig cfg;
    absl::StatusOr<RepairOption> o = parse_repair_option(opt);
    check(o.status(), "parse_repair_option");
    cfg.option = *o;
    cfg.rank = 2;
    if (k == 1) cfg.repair_v = false;
    absl::StatusOr<std::shared_ptr<RepairSet>> set =
        RepairSet::create(cfg, k == 2 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{1}, rdims, 7);
    check(set.status(), "RepairSet::create");
    const std::string path = tmp + "/repair.safetensors";
    check((*set)->save(path, {{"codec", "int4"}, {"model", "model"}}), "RepairSet::save");
    put("repair_file", std::string("seed-option-") + opt + ".safetensors", read(path));
    ++k;
  }
  const KvSpliceDims kdims{2, 2, 4};
  absl::StatusOr<std::shared_ptr<KvSpliceSet>> ks = KvSpliceSet::create(kdims, KvSpliceRanks{3, 2}, 5);
  check(ks.status(), "KvSpliceSet::create");
  const std::string kpath = tmp + "/kvsplice.safetensors";
  check((*ks)->save(kpath, {{"model", "model"}}), "KvSpliceSet::save");
  put("kvsplice_file", "seed-ranks-3-2.safetensors", read(kpath));
  ks = KvSpliceSet::create(kdims, 4, 6);
  check(ks.status(), "KvSpliceSet::create");
  (*ks)->set_latent(KvLatentDtype::kI8);
  check((*ks)->save(kpath, {}), "KvSpliceSet::save");
  put("kvsplice_file", "seed-rank-4-int8.safetensors", read(kpath));
  fs::remove_all(tmp);
}

// A prototype artifact: K = 2 prototypes, m = 1, d_h = 4, 3 training rows (deterministic tensors).
frost::prototype::PrototypeArtifact seed_prototype_artifact() {
  using namespace frost;
  prototype::PrototypeArtifact art;
  art.cfg.K = 2;
  art.cfg.T = 2;
  art.cfg.m = 1;
  art.cfg.m_q = 1;
  art.cfg.d_h = 4;
  art.cfg.H = 2;
  art.cfg.L = 1;
  art.backbone = {"stories260K", "llama", 64, 5, 512, "0123456789abcdef", "fp32"};
  art.bounds = {1, 5};
  art.label_mu = 3;
  art.label_sigma = 0.5;
  art.d_model = 64;
  art.n_train = 3;
  art.prototypes = {{0, 2, "r2", "a happy day", 4.5f}, {1, 0, "", "a sad day", 1.5f}};
  at::manual_seed(3);
  art.tensors = {{"proto.memory", at::randn({2, 1, 4}).to(at::kHalf)},
                 {"proto.labels", at::tensor({4.5f, 1.5f})},
                 {"cache.keys", at::randn({3, 4}).to(at::kHalf)},
                 {"cache.labels", at::tensor({1.5f, 3.0f, 4.5f})},
                 {"rlcs.population", at::tensor({0.1f, 0.2f, 0.3f})}};
  return art;
}

void artifact_seeds() {
  using namespace frost;
  const std::string tmp = tmp_dir();
  // artifact.json, as publish() writes it.
  absl::StatusOr<std::unique_ptr<serving::ArtifactStore>> store =
      serving::ArtifactStore::open(tmp + "/store");
  check(store.status(), "ArtifactStore::open");
  serving::ArtifactMeta meta{"job-000001", "stories260K", "{\"mae\": 0.25}"};
  absl::StatusOr<serving::ArtifactInfo> info = (*store)->publish(
      "kv_repair", meta, [](const std::string& dir) { return write_file_atomic(dir + "/x", "x"); });
  check(info.status(), "publish");
  put("artifact_manifest", "seed-artifact.json", read(info->dir + "/artifact.json"));
  // manifest.json of a checked file (the payload artifact_manifest_fuzz.cc places beside it).
  check(serving::write_checked_file(
            tmp, "repair.safetensors", "frost.kv_repair.v1",
            [](const std::string& path) { return write_file_atomic(path, "frost fuzz checked payload\n"); }),
        "write_checked_file");
  put("artifact_manifest", "seed-checked-manifest.json", read(tmp + "/manifest.json"));
  check(prototype::save_artifact(seed_prototype_artifact(), tmp + "/prototype").status(), "save_artifact");
  put("artifact_manifest", "seed-prototype-manifest.json", read(tmp + "/prototype/manifest.json"));
  fs::remove_all(tmp);
}

// The prototype tensors the prototype manifest seed describes (its sha256 included): the same artifact as
// artifact_seeds() saves, as --tensors writes it to <dir>/data/prototype.safetensors.
void prototype_tensors() {
  using namespace frost;
  const std::string tmp = tmp_dir();
  check(prototype::save_artifact(seed_prototype_artifact(), tmp + "/prototype").status(), "save_artifact");
  fs::create_directories(fs::path(g_out) / "data");
  std::ofstream(fs::path(g_out) / "data" / "prototype.safetensors", std::ios::binary | std::ios::trunc)
      << read(tmp + "/prototype/prototype.safetensors");
  std::printf("  data/prototype.safetensors\n");
  fs::remove_all(tmp);
}

#ifdef FROST_FUZZ_WITH_SERVER
void server_seeds() {
  using namespace frost;
  put("server_config", "seed-default.yaml", read(g_out + "/../../configs/default.yaml"));
  server::ServerConfig c;
  c.server.listen = "[::1]:0";
  c.server.tls.cert_file = "tls/server.pem";
  c.server.tls.key_file = "tls/server.key";
  c.server.tls.client_ca_file = "tls/ca.pem";
  c.server.tls.require_client_cert = true;
  c.model.path = "builtin:tiny";
  c.model.dtype = WeightDtype::kInt8;
  c.engine.kv_cache_bytes = int64_t{64} << 20;
  c.engine.kv_codec = KvCodecKind::kInt4;
  c.engine.kv_repair = "art/repair.safetensors";
  c.jobs.enabled = false;
  c.artifacts.follow_state_dir = "/srv/frost-state";
  c.log.level = LogLevel::kDebug;
  put("server_config", "seed-formatted.yaml", server::format_server_config(c));
  put("server_config", "seed-flow.yaml",
      "server: {listen: \"127.0.0.1:7000\", metrics_listen: \"127.0.0.1:0\", drain_timeout_s: 0.5}\n"
      "engine: {max_running: 4, max_batch_tokens: 8, kv_cache_bytes: 2GiB}\n"
      "limits:\n  max_stop_strings: 2\nlog: {level: warn}\n");

  // Requests, with the selector bytes of proto_codec_fuzz.cc (message, slice cut) in front.
  v1::GenerateRequest g;
  g.set_request_id("req-1");
  g.set_text("Once upon a time \xE2\x80\x94 caf\xC3\xA9");
  g.set_add_bos(true);
  v1::SamplingParams* s = g.mutable_sampling();
  s->set_temperature(0.7f);
  s->set_top_k(40);
  s->set_top_p(0.9f);
  s->set_seed(42);
  s->set_max_new_tokens(16);
  s->add_stop("\n\n");
  s->add_stop("The end");
  s->add_stop_token_ids(2);
  s->set_logprobs(2);
  g.mutable_kv()->set_codec("int8");
  put("proto_codec", "seed-generate-text.pb", std::string("\x00\x07", 2) + g.SerializeAsString());
  v1::GenerateRequest t;
  for (int id : {1, 403, 22, 7}) t.mutable_token_ids()->add_ids(id);
  t.mutable_kv()->set_repair(v1::KV_REPAIR_MODE_ON);
  put("proto_codec", "seed-generate-ids.pb", std::string("\x00\x00", 2) + t.SerializeAsString());
  v1::TokenizeRequest k;
  k.set_text("Hello \xF0\x9F\x99\x82");
  k.set_add_bos(false);
  put("proto_codec", "seed-tokenize.pb", std::string("\x01\x03", 2) + k.SerializeAsString());
  // text (field 2) with an invalid byte: what a client in another language can send.
  put("proto_codec", "seed-generate-bad-utf8.pb",
      std::string("\x00\x00\x12\x04"
                  "ab\xFF\xFE",
                  8));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string tensors_dir;
  frost::cli::Command command;
  command.name = "frost_fuzz_make_seeds";
  command.synopsis = "FUZZ_DIR SHARED_DIR\n--tensors DIR";
  command.description =
      "FUZZ_DIR SHARED_DIR (e.g. tests/fuzz ../shared): (re)writes the text seed corpora "
      "corpus/<target>/seed-* "
      "of the repository from SHARED_DIR's models and data. --tensors DIR: writes the tensor-file seeds "
      "(DIR/corpus/<target>/seed-*) and DIR/data/prototype.safetensors, which are not kept in the repository "
      "(docs/fuzzing.md).";
  command.flag_groups = {
      {"flags", {frost::cli::string_flag("--tensors", [&](const std::string& v) {
                   tensors_dir = v;
                 }).doc("DIR", "write the tensor-file seeds there instead of the text seeds")}}};
  const std::vector<std::string> positional =
      frost::cli::parse_or_exit(command, std::vector<std::string>(argv + 1, argv + argc), 2);
  if (!tensors_dir.empty()) {
    if (!positional.empty())
      frost::cli::exit_usage_error(command,
                                   "--tensors takes no other argument, got '" + positional.front() + "'", 2);
    g_out = tensors_dir;
    safetensors_seeds();
    kv_file_seeds();
    prototype_tensors();
    return 0;
  }
  if (positional.size() != 2) {
    frost::cli::exit_usage_error(
        command, "expected FUZZ_DIR SHARED_DIR, got " + std::to_string(positional.size()) + " arguments", 2);
  }
  g_out = positional[0];
  g_shared = positional[1];
  model_config_seeds();
  tokenizer_seeds();
  jsonl_seeds();
  job_spec_seeds();
  artifact_seeds();
#ifdef FROST_FUZZ_WITH_SERVER
  server_seeds();
#endif
  return 0;
}
