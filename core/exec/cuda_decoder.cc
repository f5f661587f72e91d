// CudaDecoder: the device-resident decoder (core/exec/cuda_decoder.h).
#include "core/exec/cuda_decoder.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/reference.h"

namespace frost {
namespace {

#define FROST_CUBLAS_CHECK(expr)                                                                           \
  do {                                                                                                     \
    const cublasStatus_t frost_s_ = (expr);                                                                \
    if (frost_s_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      ::frost::cuda::throw_cublas_error(static_cast<int>(frost_s_), cublasGetStatusString(frost_s_), #expr, \
                                        __FILE__, __LINE__);                                               \
  } while (0)

cublasHandle_t handle(void* h) { return static_cast<cublasHandle_t>(h); }

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }
int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDecoder>> CudaDecoder::create(const ModelConfig& cfg, const ModelWeights& w,
                                                                 const DeviceOptions& opts) {
  const std::string dev = absl::StrCat("cuda:", opts.device);
  if (absl::Status st = device_supports(cfg, w.dtype, dev); !st.ok()) return st;
  if (absl::Status st = device_int8_weights_present(w, dev); !st.ok()) return st;
  std::unique_ptr<CudaDecoder> d(new CudaDecoder(cfg, opts, device_weight_dtype(w.dtype)));
  try {
    d->init_device();
    d->upload(w);
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(absl::StrCat("model.device ", dev, ": ", e.what()));
  }
  return d;
}

void CudaDecoder::init_device() {
  llama_ = cfg_.arch == Arch::kLlama;
  int n_dev = 0;
  const cudaError_t e = cudaGetDeviceCount(&n_dev);
  if (e != cudaSuccess)
    throw DeviceError(std::string("no usable CUDA driver or device (") + cudaGetErrorString(e) + ")", false);
  if (opts_.device < 0 || opts_.device >= n_dev)
    throw DeviceError(absl::StrCat("no CUDA device ", opts_.device, " (", n_dev, " visible)"), false);
  FROST_CUDA_CHECK(cudaSetDevice(opts_.device));
  cudaDeviceProp prop{};
  FROST_CUDA_CHECK(cudaGetDeviceProperties(&prop, opts_.device));
  card_ = prop.name;
  n_sms_ = prop.multiProcessorCount;
  device_total_ = static_cast<int64_t>(prop.totalGlobalMem);
  FROST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cublasHandle_t h = nullptr;
  FROST_CUBLAS_CHECK(cublasCreate(&h));
  cublas_ = h;
  FROST_CUBLAS_CHECK(cublasSetStream(h, stream_));
  FROST_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));  // fp32 stays fp32 (no TF32)
  constexpr int64_t kWs = 32 << 20;
  FROST_CUBLAS_CHECK(cublasSetWorkspace(h, alloc(kWs, "cuBLAS workspace"), kWs));
  if (llama_) {  // RoPE tables as core/model/transformer.cc computes them (and the twin)
    std::vector<float> c, s;
    cuda::ref::rope_tables(static_cast<int>(cfg_.max_pos), static_cast<int>(cfg_.head_dim), cfg_.rope_theta, &c, &s);
    auto up = [this](const std::vector<float>& v) {
      auto* p = static_cast<float*>(alloc(4 * static_cast<int64_t>(v.size()), "RoPE table"));
      FROST_CUDA_CHECK(cudaMemcpy(p, v.data(), 4 * v.size(), cudaMemcpyHostToDevice));
      return p;
    };
    rope_cos_ = up(c);
    rope_sin_ = up(s);
  }
}

void* CudaDecoder::alloc(int64_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  if (e != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    throw DeviceError(absl::StrCat("out of device memory allocating ", bytes, " bytes for ", what, " (", free_b,
                                   " of ", total_b, " bytes free; this model had allocated ", device_bytes_, ")"),
                      false);
  }
  allocations_.push_back(p);
  device_bytes_ += bytes;
  return p;
}

const float* CudaDecoder::upload_f32(const at::Tensor& t, const char* what) {
  if (!t.defined()) return nullptr;
  const at::Tensor c = t.to(at::kFloat).contiguous();
  auto* d = static_cast<float*>(alloc(4 * c.numel(), what));
  FROST_CUDA_CHECK(cudaMemcpy(d, c.data_ptr<float>(), 4 * static_cast<size_t>(c.numel()), cudaMemcpyHostToDevice));
  weight_bytes_ += 4 * c.numel();
  return d;
}

const void* CudaDecoder::upload_w(const at::Tensor& t, const char* what) {
  if (wdt_ == cuda::DType::kF32) return upload_f32(t, what);
  const int64_t n = t.numel();
  void* d = alloc(2 * n, what);
  const bool f16 = wdt_ == cuda::DType::kF16;
  if (t.scalar_type() == (f16 ? at::kHalf : at::kBFloat16)) {  // the loaded bf16 / fp16 bits, as they are
    const at::Tensor c = t.contiguous();
    FROST_CUDA_CHECK(cudaMemcpy(d, c.data_ptr(), 2 * static_cast<size_t>(n), cudaMemcpyHostToDevice));
  } else {  // rounded here, to nearest even, by the twins' functions (the reference device rounds alike)
    const at::Tensor c = t.to(at::kFloat).contiguous();
    const float* f = c.data_ptr<float>();
    std::vector<uint16_t> b(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      b[static_cast<size_t>(i)] = f16 ? cuda::ref::f16_bits(f[i]) : cuda::ref::bf16_bits(f[i]);
    FROST_CUDA_CHECK(cudaMemcpy(d, b.data(), 2 * static_cast<size_t>(n), cudaMemcpyHostToDevice));
  }
  weight_bytes_ += 2 * n;
  return d;
}

CudaDecoder::Linear CudaDecoder::upload_q8(const kernels::QuantizedMatrix& q, const at::Tensor& bias,
                                           const char* what) {
  Linear L;
  const at::Tensor qc = q.q.contiguous(), sc = q.scales.to(at::kFloat).contiguous();
  void* d = alloc(qc.numel(), what);
  FROST_CUDA_CHECK(cudaMemcpy(d, qc.data_ptr(), static_cast<size_t>(qc.numel()), cudaMemcpyHostToDevice));
  weight_bytes_ += qc.numel();
  L.w = d;
  L.scales = upload_f32(sc, what);
  L.group = static_cast<int>(q.group);
  L.b = upload_f32(bias, what);
  L.n_out = static_cast<int>(q.n_out);
  L.n_in = static_cast<int>(q.n_in);
  return L;
}

void CudaDecoder::upload(const ModelWeights& w) {
  const bool int8 = wdt_ == cuda::DType::kInt8;
  auto lin = [&](const at::Tensor& wt, const at::Tensor& bt, const char* what) {
    Linear L;
    L.w = upload_w(wt, what);
    L.b = upload_f32(bt, what);
    L.n_out = static_cast<int>(wt.size(0));
    L.n_in = static_cast<int>(wt.size(1));
    return L;
  };
  tok_embed_ = int8 ? upload_f32(w.tok_embed, "tok_embed") : upload_w(w.tok_embed, "tok_embed");
  if (!llama_) pos_embed_ = upload_f32(w.pos_embed, "pos_embed");
  for (const LayerWeights& l : w.layers) {
    Layer L;
    L.attn_norm_w = upload_f32(l.attn_norm_w, "norm");
    L.attn_norm_b = upload_f32(l.attn_norm_b, "norm");
    L.mlp_norm_w = upload_f32(l.mlp_norm_w, "norm");
    L.mlp_norm_b = upload_f32(l.mlp_norm_b, "norm");
    L.qkv = int8 ? upload_q8(l.wqkv_q, l.bqkv, "wqkv") : lin(l.wqkv, l.bqkv, "wqkv");
    L.o = int8 ? upload_q8(l.wo_q, l.bo, "wo") : lin(l.wo, l.bo, "wo");
    L.in = int8 ? upload_q8(l.w_in_q, l.b_in, "w_in") : lin(l.w_in, l.b_in, "w_in");
    L.out = int8 ? upload_q8(l.w_out_q, l.b_out, "w_out") : lin(l.w_out, l.b_out, "w_out");
    layers_.push_back(L);
  }
  final_norm_w_ = upload_f32(w.final_norm_w, "final_norm_w");
  final_norm_b_ = upload_f32(w.final_norm_b, "final_norm_b");
  if (int8) {  // the CPU int8 model's head: quantized, tied or not
    lm_head_ = upload_q8(w.lm_head_q, at::Tensor(), "lm_head");
  } else if (w.lm_head.defined() && !w.lm_head.is_same(w.tok_embed)) {
    lm_head_ = lin(w.lm_head, at::Tensor(), "lm_head");
  } else {
    lm_head_.w = tok_embed_;
    lm_head_.n_out = static_cast<int>(cfg_.n_vocab);
    lm_head_.n_in = static_cast<int>(cfg_.dim);
  }
  FROST_CUDA_CHECK(cudaDeviceSynchronize());
}

std::unique_ptr<CudaDecoder> CudaDecoder::random(const ModelConfig& cfg, const DeviceOptions& opts,
                                                 WeightDtype weights, uint64_t seed) {
  if (absl::Status st = device_supports(cfg, weights, absl::StrCat("cuda:", opts.device)); !st.ok())
    throw DeviceError(std::string(st.message()), false);
  std::unique_ptr<CudaDecoder> m(new CudaDecoder(cfg, opts, device_weight_dtype(weights)));
  m->init_device();
  const int64_t C = cfg.dim, V = cfg.n_vocab, F = cfg.ffn_dim, Q = cfg.q_dim(), QKV = Q + 2 * cfg.kv_dim();
  const bool gpt2 = cfg.arch == Arch::kGpt2;
  const int64_t FIN = gpt2 ? F : 2 * F;
  const cuda::DType wd = m->wdt_;
  const int64_t wsz = cuda::dtype_bytes(wd);
  uint64_t k = seed;
  auto fill = [&](int64_t n, cuda::DType dt, float std, float mean, const char* what) {
    void* p = m->alloc(n * cuda::dtype_bytes(dt), what);
    cuda::fill_uniform(p, dt, n, ++k, std * std::sqrt(3.f), mean, m->stream_);
    return p;
  };
  // int8: each matrix drawn in fp32 into one scratch (the largest matrix's size), then quantized on the
  // device as the CPU loader quantizes (groups of 32).
  const bool int8 = wd == cuda::DType::kInt8;
  float* draw = nullptr;
  struct FreeDraw {
    float** p;
    ~FreeDraw() {
      if (*p) cudaFree(*p);
    }
  } free_draw{&draw};
  if (int8) {
    const int64_t most = std::max({QKV * C, C * Q, FIN * C, C * F, V * C});
    if (cudaMalloc(reinterpret_cast<void**>(&draw), 4 * static_cast<size_t>(most)) != cudaSuccess) {
      cudaGetLastError();
      throw DeviceError(absl::StrCat("out of device memory drawing int8 weights (", 4 * most, " bytes)"),
                        false);
    }
  }
  auto quantized = [&](int64_t n_out, int64_t n_in, float a, Linear* L) {
    constexpr int kGroup = 32;
    cuda::fill_uniform(draw, cuda::DType::kF32, n_out * n_in, ++k, a, 0.f, m->stream_);
    auto* q = static_cast<int8_t*>(m->alloc(n_out * n_in, "weights"));
    const int64_t n_scales = n_out * ((n_in + kGroup - 1) / kGroup);
    auto* sc = static_cast<float*>(m->alloc(4 * n_scales, "weights"));
    cuda::quantize_int8(draw, n_out, static_cast<int>(n_in), kGroup, q, sc, m->stream_);
    L->w = q;
    L->scales = sc;
    L->group = kGroup;
    m->weight_bytes_ += n_out * n_in + 4 * n_scales;
  };
  auto lin = [&](int64_t n_out, int64_t n_in, bool bias) {
    Linear L;
    const float a = 1.f / std::sqrt(static_cast<float>(n_in));
    if (int8) {
      quantized(n_out, n_in, a * std::sqrt(3.f), &L);
    } else {
      L.w = fill(n_out * n_in, wd, a, 0.f, "weights");
      m->weight_bytes_ += n_out * n_in * wsz;
    }
    if (bias) {
      L.b = static_cast<const float*>(fill(n_out, cuda::DType::kF32, 0.02f, 0.f, "weights"));
      m->weight_bytes_ += 4 * n_out;
    }
    L.n_out = static_cast<int>(n_out);
    L.n_in = static_cast<int>(n_in);
    return L;
  };
  auto vec = [&](float std, float mean) {
    m->weight_bytes_ += 4 * C;
    return static_cast<const float*>(fill(C, cuda::DType::kF32, std, mean, "weights"));
  };
  m->tok_embed_ = fill(V * C, m->edt_, 0.05f, 0.f, "weights");
  m->weight_bytes_ += V * C * cuda::dtype_bytes(m->edt_);
  if (gpt2) {
    m->pos_embed_ = static_cast<const float*>(fill(cfg.max_pos * C, cuda::DType::kF32, 0.1f, 0.f, "weights"));
    m->weight_bytes_ += 4 * cfg.max_pos * C;
  }
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    Layer L;
    L.attn_norm_w = vec(0.1f, 1.f);
    L.mlp_norm_w = vec(0.1f, 1.f);
    if (gpt2) {
      L.attn_norm_b = vec(0.02f, 0.f);
      L.mlp_norm_b = vec(0.02f, 0.f);
    }
    const bool bias = gpt2 || cfg.attention_bias;
    L.qkv = lin(QKV, C, bias);
    L.o = lin(C, Q, bias);
    L.in = lin(FIN, C, gpt2 || cfg.mlp_bias);
    L.out = lin(C, F, gpt2 || cfg.mlp_bias);
    m->layers_.push_back(L);
  }
  m->final_norm_w_ = vec(0.1f, 1.f);
  if (gpt2) m->final_norm_b_ = vec(0.02f, 0.f);
  if (int8) {  // the head quantized from the table (tied) or drawn (untied), as the CPU int8 model's
    m->lm_head_.n_out = static_cast<int>(V);
    m->lm_head_.n_in = static_cast<int>(C);
    if (cfg.tie_embeddings) {
      auto* q = static_cast<int8_t*>(m->alloc(V * C, "weights"));
      auto* sc = static_cast<float*>(m->alloc(4 * V * ((C + 31) / 32), "weights"));
      cuda::quantize_int8(static_cast<const float*>(m->tok_embed_), V, static_cast<int>(C), 32, q, sc,
                          m->stream_);
      m->lm_head_.w = q;
      m->lm_head_.scales = sc;
      m->lm_head_.group = 32;
      m->weight_bytes_ += V * C + 4 * V * ((C + 31) / 32);
    } else {
      quantized(V, C, std::sqrt(3.f) / std::sqrt(static_cast<float>(C)), &m->lm_head_);
    }
  } else if (cfg.tie_embeddings) {
    m->lm_head_.w = m->tok_embed_;
    m->lm_head_.n_out = static_cast<int>(V);
    m->lm_head_.n_in = static_cast<int>(C);
  } else {
    m->lm_head_ = lin(V, C, false);
  }
  FROST_CUDA_CHECK(cudaStreamSynchronize(m->stream_));
  return m;
}

CudaDecoder::~CudaDecoder() { release(); }

void CudaDecoder::release() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (auto& [shape, g] : graphs_) cudaGraphExecDestroy(g);
  graphs_.clear();
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  events_.clear();
  if (cublas_) cublasDestroy(handle(cublas_));
  cublas_ = nullptr;
  for (void* p : allocations_) cudaFree(p);
  allocations_.clear();
  if (meta_host_) cudaFreeHost(meta_host_);
  meta_host_ = nullptr;
  if (ids_host_) cudaFreeHost(ids_host_);
  ids_host_ = nullptr;
  if (stream_) cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

void CudaDecoder::allocate(const cuda::KvLayout& layout, int n_blocks, int max_rows, int max_seqs, int max_blocks) {
  try {
    if (pool_) throw DeviceError("allocate() called twice", false);
    if (layout.format != opts_.kv || layout.n_layer != cfg_.n_layer || layout.n_head_kv != cfg_.n_head_kv ||
        layout.head_dim != cfg_.head_dim || layout.block_tokens < 1)
      throw DeviceError("the KV layout does not match the model and options", false);
    if (n_blocks < 1 || max_rows < 1 || max_seqs < 1 || max_blocks < 1)
      throw DeviceError("sizes must be positive", false);
    kv_ = layout;
    n_blocks_ = n_blocks;
    max_rows_ = max_rows;
    max_seqs_ = max_seqs;
    max_blocks_ = max_blocks;
    // Graph buckets pad rows and logit rows up to powers of two.
    rows_cap_ = opts_.cuda_graphs ? pow2_at_least(max_rows) : max_rows;
    logits_cap_ = std::min(rows_cap_, opts_.cuda_graphs ? pow2_at_least(max_seqs) : max_seqs);
    // n_blocks + 1: the last block takes the padding rows' K / V.
    pool_ = static_cast<uint8_t*>(alloc(kv_.block_bytes() * (n_blocks + 1), "KV block pool"));
    const int64_t R = rows_cap_, C = cfg_.dim, QKV = cfg_.q_dim() + 2 * cfg_.kv_dim();
    const int64_t FIN = llama_ ? 2 * cfg_.ffn_dim : cfg_.ffn_dim, V = cfg_.n_vocab;
    x_ = static_cast<float*>(alloc(4 * R * C, "activations"));
    h_ = static_cast<float*>(alloc(4 * R * C, "activations"));
    qkv_ = static_cast<float*>(alloc(4 * R * QKV, "activations"));
    att_ = static_cast<float*>(alloc(4 * R * cfg_.q_dim(), "activations"));
    gu_ = static_cast<float*>(alloc(4 * R * FIN, "activations"));
    act_ = static_cast<float*>(alloc(4 * R * cfg_.ffn_dim, "activations"));
    // Logits for every row a step may ask for (forward_logits: up to its rows); the sampler's scratch for the
    // sequences of a step (forward: one row each).
    logit_rows_cap_ = std::max<int>(logits_cap_, std::min<int>(rows_cap_, 256));
    logits_ = static_cast<float*>(alloc(4 * int64_t{logit_rows_cap_} * V, "logits"));
    probs_ = static_cast<float*>(alloc(4 * logits_cap_ * V, "sampling probabilities"));
    const int64_t widest = std::max<int64_t>({C, QKV, FIN, cfg_.q_dim(), cfg_.ffn_dim});
    xb_ = static_cast<uint16_t*>(alloc(2 * R * widest, "bf16 / fp16 activations"));
    if (wdt_ == cuda::DType::kInt8 && (!opts_.gemv || R > kInt8GemvRows)) {
      int64_t most = int64_t{lm_head_.n_out} * lm_head_.n_in;
      for (const Layer& L : layers_)
        for (const Linear* l : {&L.qkv, &L.o, &L.in, &L.out})
          most = std::max(most, int64_t{l->n_out} * l->n_in);
      wscratch_ = static_cast<float*>(alloc(4 * most, "int8 weights dequantized for the GEMM"));
    }
    ids_ = static_cast<int32_t*>(alloc(4 * R, "sampled ids"));
    attn_part_ = static_cast<float*>(alloc(
        4 * cuda::attention_partials_floats(static_cast<int>(R), static_cast<int>(cfg_.n_head),
                                            static_cast<int>(cfg_.head_dim)),
        "attention partials"));
    // Metadata: token, seq, pos, logit_rows [R] int32; the sampling parameters [R]; the block tables
    // [max_seqs + 1, max_blocks] (the last row: the padding rows', every entry the spare block).
    off_params_ = align256(4 * R * 4);
    off_table_ = align256(off_params_ + static_cast<int64_t>(sizeof(cuda::SampleParams)) * R);
    meta_bytes_ = off_table_ + 4LL * (max_seqs + 1) * max_blocks;
    FROST_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&meta_host_), static_cast<size_t>(meta_bytes_)));
    std::memset(meta_host_, 0, static_cast<size_t>(meta_bytes_));
    meta_dev_ = static_cast<uint8_t*>(alloc(meta_bytes_, "step metadata"));
    FROST_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&ids_host_), 4 * static_cast<size_t>(R)));
    auto* i32 = reinterpret_cast<int32_t*>(meta_dev_);
    rows_dev_.token = i32;
    rows_dev_.seq = i32 + R;
    rows_dev_.pos = i32 + 2 * R;
    logit_rows_dev_ = i32 + 3 * R;
    params_dev_ = reinterpret_cast<cuda::SampleParams*>(meta_dev_ + off_params_);
    rows_dev_.block_table = reinterpret_cast<int32_t*>(meta_dev_ + off_table_);
    rows_dev_.max_blocks = max_blocks;
    auto* spare = reinterpret_cast<int32_t*>(meta_host_ + off_table_) + static_cast<int64_t>(max_seqs) * max_blocks;
    std::fill(spare, spare + max_blocks, n_blocks);
    FROST_CUDA_CHECK(cudaMemcpy(meta_dev_, meta_host_, static_cast<size_t>(meta_bytes_), cudaMemcpyHostToDevice));
  } catch (const DeviceError&) {
    throw;
  } catch (const std::exception& e) {
    fail(e);
  }
}

void CudaDecoder::set_blocks(int seq, const int32_t* blocks, int n) {
  if (seq < 0 || seq >= max_seqs_)
    throw DeviceError(absl::StrCat("sequence slot ", seq, " out of [0, ", max_seqs_, ")"), false);
  if (n > max_blocks_)
    throw DeviceError(absl::StrCat(n, " blocks exceed the ", max_blocks_, " a sequence can hold"), false);
  for (int i = 0; i < n; ++i)
    if (blocks[i] < 0 || blocks[i] >= n_blocks_)
      throw DeviceError(absl::StrCat("block ", blocks[i], " out of the pool's ", n_blocks_), false);
  std::copy(blocks, blocks + n, reinterpret_cast<int32_t*>(meta_host_ + off_table_) + static_cast<int64_t>(seq) * max_blocks_);
  n_table_rows_ = std::max(n_table_rows_, seq + 1);
}

void CudaDecoder::check(const DeviceStep& step, int max_logit_rows) const {
  auto bad = [](const std::string& m) { throw DeviceError("cuda decoder: " + m, false); };
  if (!pool_) bad("no KV pool: allocate() first");
  const auto n = static_cast<int>(step.token.size());
  if (n <= 0 || n > max_rows_) bad(absl::StrCat("a step has 1..", max_rows_, " rows, got ", n));
  if (step.seq.size() != step.token.size() || step.pos.size() != step.token.size())
    bad("token, seq and pos must have one entry per row");
  const auto nl = static_cast<int>(step.logit_rows.size());
  const int max_nl = std::min(n, max_logit_rows);
  if (nl <= 0 || nl > max_nl) bad(absl::StrCat("1..", max_nl, " logit rows, got ", nl));
  for (int r = 0; r < n; ++r) {
    if (step.token[r] < 0 || step.token[r] >= cfg_.n_vocab) bad(absl::StrCat("token ", step.token[r], " out of range"));
    if (step.seq[r] < 0 || step.seq[r] >= max_seqs_) bad(absl::StrCat("sequence slot ", step.seq[r], " out of range"));
    if (step.pos[r] < 0 || step.pos[r] >= cfg_.max_pos || step.pos[r] / kv_.block_tokens >= max_blocks_)
      bad(absl::StrCat("position ", step.pos[r], " out of range"));
  }
  for (int32_t lr : step.logit_rows)
    if (lr < 0 || lr >= n) bad(absl::StrCat("logit row ", lr, " out of range"));
}

std::pair<int, int> CudaDecoder::stage(const DeviceStep& step, const std::vector<cuda::SampleParams>* sampling,
                                       bool pad, bool hidden) {
  check(step, sampling ? max_seqs_ : hidden ? max_rows_ : logit_rows_cap_);
  const int n = static_cast<int>(step.token.size()), nl = static_cast<int>(step.logit_rows.size());
  const int R = rows_cap_;
  const int nb = pad ? pow2_at_least(n) : n;
  const int nlb = pad ? std::min({nb, pow2_at_least(nl), logits_cap_}) : nl;
  auto* i32 = reinterpret_cast<int32_t*>(meta_host_);
  std::copy(step.token.begin(), step.token.end(), i32);
  std::copy(step.seq.begin(), step.seq.end(), i32 + R);
  std::copy(step.pos.begin(), step.pos.end(), i32 + 2 * R);
  std::copy(step.logit_rows.begin(), step.logit_rows.end(), i32 + 3 * R);
  for (int r = n; r < nb; ++r) i32[r] = 0, i32[R + r] = max_seqs_, i32[2 * R + r] = 0;  // padding: the spare block
  for (int i = nl; i < nlb; ++i) i32[3 * R + i] = 0;
  auto* params = reinterpret_cast<cuda::SampleParams*>(meta_host_ + off_params_);
  for (int i = 0; i < nlb; ++i) params[i] = sampling && i < nl ? (*sampling)[static_cast<size_t>(i)] : cuda::SampleParams{};
  split_ = cuda::attention_split(*std::max_element(step.pos.begin(), step.pos.end()) + 1, nb,
                                 static_cast<int>(cfg_.n_head_kv), 4 * n_sms_);
  FROST_CUDA_CHECK(cudaMemcpyAsync(meta_dev_, meta_host_, static_cast<size_t>(off_table_), cudaMemcpyHostToDevice, stream_));
  if (n_table_rows_ > 0)
    FROST_CUDA_CHECK(cudaMemcpyAsync(meta_dev_ + off_table_, meta_host_ + off_table_,
                                     4 * static_cast<size_t>(n_table_rows_) * max_blocks_, cudaMemcpyHostToDevice,
                                     stream_));
  n_table_rows_ = 0;
  return {nb, nlb};
}

void CudaDecoder::norm(const float* x, const float* w, const float* b, int rows, float* out) {
  if (llama_)
    cuda::rmsnorm(x, w, rows, static_cast<int>(cfg_.dim), static_cast<float>(cfg_.norm_eps), out, stream_);
  else
    cuda::layernorm(x, w, b, rows, static_cast<int>(cfg_.dim), static_cast<float>(cfg_.norm_eps), out, stream_);
}

void CudaDecoder::linear(const Linear& L, const float* x, int rows, float* y, bool accumulate, cuda::GemvInput in,
                         const float* norm_w, float* scratch) {
  const float eps = static_cast<float>(cfg_.norm_eps);
  if (opts_.gemv && rows <= cuda::kGemvMaxRows) {
    cuda::gemv(L.w, wdt_, x, rows, L.n_out, L.n_in, L.b, accumulate, y, stream_, in, norm_w, eps, L.scales,
               L.group);
    return;
  }
  const bool int8 = wdt_ == cuda::DType::kInt8;
  if (int8 && opts_.gemv && rows <= kInt8GemvRows) {  // the GEMV in pieces (cuda_decoder.h says why)
    const int64_t x_stride = in == cuda::GemvInput::kSwiGlu ? 2LL * L.n_in : L.n_in;
    for (int r0 = 0; r0 < rows; r0 += cuda::kGemvMaxRows)
      cuda::gemv(L.w, wdt_, x + r0 * x_stride, std::min(cuda::kGemvMaxRows, rows - r0), L.n_out, L.n_in, L.b,
                 accumulate, y + static_cast<int64_t>(r0) * L.n_out, stream_, in, norm_w, eps, L.scales,
                 L.group);
    return;
  }
  if (in == cuda::GemvInput::kRmsNorm) {
    cuda::rmsnorm(x, norm_w, rows, L.n_in, eps, scratch, stream_);
    x = scratch;
  } else if (in == cuda::GemvInput::kSwiGlu) {
    cuda::swiglu(x, rows, L.n_in, scratch, stream_);
    x = scratch;
  }
  // Row-major y[rows, n_out] = x[rows, n_in] · Wᵀ is, column-major, yᵀ = W · xᵀ with W read transposed.
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  if (wdt_ == cuda::DType::kF32 || int8) {
    const void* w = L.w;
    if (int8) {  // the matrix dequantized (the GEMV's weights, bit for bit), then the fp32 GEMM
      if (!wscratch_)
        throw DeviceError("cuda decoder: int8 GEMM without its scratch (allocate() sized it)", false);
      cuda::dequantize_int8(static_cast<const int8_t*>(L.w), L.scales, L.n_out, L.n_in, L.group, wscratch_,
                            stream_);
      w = wscratch_;
    }
    FROST_CUBLAS_CHECK(cublasGemmEx(handle(cublas_), CUBLAS_OP_T, CUBLAS_OP_N, L.n_out, rows, L.n_in, &alpha,
                                    w, CUDA_R_32F, L.n_in, x, CUDA_R_32F, L.n_in, &beta, y, CUDA_R_32F,
                                    L.n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {  // bf16 / fp16: W times x rounded to the same format, fp32 accumulation (the GEMV's function)
    const cudaDataType_t t = wdt_ == cuda::DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
    cuda::to_half(x, static_cast<int64_t>(rows) * L.n_in, wdt_, xb_, stream_);
    FROST_CUBLAS_CHECK(cublasGemmEx(handle(cublas_), CUBLAS_OP_T, CUBLAS_OP_N, L.n_out, rows, L.n_in, &alpha,
                                    L.w, t, L.n_in, xb_, t, L.n_in, &beta, y, CUDA_R_32F, L.n_out,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (L.b) cuda::add_bias(y, L.b, rows, L.n_out, stream_);
}

void CudaDecoder::enqueue(int n, int nl, Out out) {
  const ModelConfig& s = cfg_;
  const int C = static_cast<int>(s.dim), H = static_cast<int>(s.n_head), V = static_cast<int>(s.n_vocab);
  mark(nullptr);
  const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  cuda::embed(tok_embed_, edt_, pos_embed_, rows_dev_, n, C, x_, stream_);
  mark("embed");
  // LLaMA: the RMSNorms and SwiGLU ride inside the linear layers that read them (fused into the GEMV at
  // batch ≤ kGemvMaxRows; their own kernels before cuBLAS above). GPT-2: LayerNorm and GELU kernels.
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    if (llama_) {
      linear(L.qkv, x_, n, qkv_, false, cuda::GemvInput::kRmsNorm, L.attn_norm_w, h_);
    } else {
      norm(x_, L.attn_norm_w, L.attn_norm_b, n, h_);
      linear(L.qkv, h_, n, qkv_, false);
    }
    mark("norm_qkv");
    cuda::rope_kv_append(qkv_, rope_cos_, rope_sin_, rows_dev_, n, H, kv_, static_cast<int>(l), pool_, stream_);
    mark("rope_kv_append");
    cuda::attention(qkv_, rows_dev_, n, H, kv_, static_cast<int>(l), pool_, scale, split_, attn_part_, att_, stream_);
    mark("attention");
    linear(L.o, att_, n, x_, true);
    mark("o");
    if (llama_) {
      linear(L.in, x_, n, gu_, false, cuda::GemvInput::kRmsNorm, L.mlp_norm_w, h_);
      mark("norm_mlp_in");
      linear(L.out, gu_, n, x_, true, cuda::GemvInput::kSwiGlu, nullptr, act_);
    } else {
      norm(x_, L.mlp_norm_w, L.mlp_norm_b, n, h_);
      linear(L.in, h_, n, gu_, false);
      mark("norm_mlp_in");
      cuda::gelu_new(gu_, static_cast<int64_t>(n) * s.ffn_dim, stream_);
      linear(L.out, gu_, n, x_, true);
    }
    mark("act_mlp_out");
  }
  cuda::gather_rows(x_, logit_rows_dev_, nl, C, h_, stream_);
  if (out == Out::kHidden) {  // the final-norm rows into x_, no lm_head
    norm(h_, final_norm_w_, final_norm_b_, nl, x_);
    mark("norm");
    return;
  }
  if (llama_) {  // the residual stream is spent: x_ takes the normed rows when the norm runs alone
    linear(lm_head_, h_, nl, logits_, false, cuda::GemvInput::kRmsNorm, final_norm_w_, x_);
  } else {
    norm(h_, final_norm_w_, final_norm_b_, nl, x_);
    linear(lm_head_, x_, nl, logits_, false);
  }
  mark("norm_lm_head");
  if (out == Out::kSample) {
    cuda::sample_rows(logits_, nl, V, params_dev_, probs_, ids_, stream_);
    mark("sample");
  }
}

void CudaDecoder::run(int n, int nl, Out out) {
  if (!opts_.cuda_graphs || profiling_ || n > kMaxGraphRows || out != Out::kSample) {
    enqueue(n, nl, out);
    return;
  }
  const auto key = std::make_tuple(n, nl, split_.split_len, split_.n_splits);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (static_cast<int>(graphs_.size()) >= kMaxGraphs) {  // bounded: this shape runs with direct launches
      enqueue(n, nl, out);
      return;
    }
    cudaGraph_t g = nullptr;
    FROST_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue(n, nl, out);
    } catch (...) {
      cudaStreamEndCapture(stream_, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    FROST_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    FROST_CUDA_CHECK(e);
    it = graphs_.emplace(key, exec).first;
  }
  FROST_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
}

void CudaDecoder::fail(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const cuda::CudaError*>(&e)) {
    if (ce->sticky()) broken_ = true;
    throw DeviceError(absl::StrCat("cuda:", opts_.device, ": ", ce->what()), ce->sticky());
  }
  // Anything else (a refused shape) may still have left a sticky error behind: ask the runtime.
  const cudaError_t rt = cudaPeekAtLastError();
  if (cuda::is_sticky(rt)) broken_ = true;
  throw DeviceError(absl::StrCat("cuda:", opts_.device, ": ", e.what()), broken_);
}

int CudaDecoder::forward(const DeviceStep& step, const std::vector<cuda::SampleParams>& sampling, int32_t* ids,
                         float* host_logits) {
  if (broken_) throw DeviceError(absl::StrCat("cuda:", opts_.device, " failed earlier (sticky error)"), true);
  if (sampling.size() != step.logit_rows.size())
    throw DeviceError("cuda decoder: one sampling entry per logit row", false);
  try {
    const auto [n, nl] = stage(step, &sampling, opts_.cuda_graphs && !profiling_, false);
    run(n, nl, Out::kSample);
    const auto real = static_cast<int>(step.logit_rows.size());
    FROST_CUDA_CHECK(cudaMemcpyAsync(ids_host_, ids_, 4 * static_cast<size_t>(real), cudaMemcpyDeviceToHost, stream_));
    const size_t V = static_cast<size_t>(cfg_.n_vocab);
    int copied = 0;
    for (int i = 0; i < real; ++i)
      if (sampling[static_cast<size_t>(i)].to_host)
        FROST_CUDA_CHECK(cudaMemcpyAsync(host_logits + static_cast<size_t>(copied++) * V, logits_ + i * V, 4 * V,
                                         cudaMemcpyDeviceToHost, stream_));
    FROST_CUDA_CHECK(cudaStreamSynchronize(stream_));
    collect_profile();
    for (int i = 0; i < real; ++i) ids[i] = sampling[static_cast<size_t>(i)].to_host ? -1 : ids_host_[i];
    return copied;
  } catch (const DeviceError&) {
    throw;
  } catch (const std::exception& e) {
    fail(e);
  }
}

std::vector<float> CudaDecoder::forward_logits(const DeviceStep& step) {
  if (broken_) throw DeviceError(absl::StrCat("cuda:", opts_.device, " failed earlier (sticky error)"), true);
  try {
    const auto [n, nl] = stage(step, nullptr, false, false);
    enqueue(n, nl, Out::kLogits);
    std::vector<float> out(static_cast<size_t>(nl) * static_cast<size_t>(cfg_.n_vocab));
    FROST_CUDA_CHECK(cudaMemcpyAsync(out.data(), logits_, 4 * out.size(), cudaMemcpyDeviceToHost, stream_));
    FROST_CUDA_CHECK(cudaStreamSynchronize(stream_));
    collect_profile();
    return out;
  } catch (const DeviceError&) {
    throw;
  } catch (const std::exception& e) {
    fail(e);
  }
}

std::vector<float> CudaDecoder::forward_hidden(const DeviceStep& step) {
  if (broken_) throw DeviceError(absl::StrCat("cuda:", opts_.device, " failed earlier (sticky error)"), true);
  try {
    const auto [n, nl] = stage(step, nullptr, false, true);
    enqueue(n, nl, Out::kHidden);
    std::vector<float> out(static_cast<size_t>(nl) * static_cast<size_t>(cfg_.dim));
    FROST_CUDA_CHECK(cudaMemcpyAsync(out.data(), x_, 4 * out.size(), cudaMemcpyDeviceToHost, stream_));
    FROST_CUDA_CHECK(cudaStreamSynchronize(stream_));
    collect_profile();
    return out;
  } catch (const DeviceError&) {
    throw;
  } catch (const std::exception& e) {
    fail(e);
  }
}

DeviceMemory CudaDecoder::memory() const {
  DeviceMemory m;
  m.name = absl::StrCat("cuda:", opts_.device, " (", card_, ")");
  m.weight_bytes = weight_bytes_;
  m.kv_pool_bytes = pool_ ? kv_.block_bytes() * (n_blocks_ + 1) : 0;
  m.device_bytes = device_bytes_;
  m.device_total_bytes = device_total_;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) m.device_free_bytes = static_cast<int64_t>(free_b);
  m.graphs = static_cast<int32_t>(graphs_.size());
  return m;
}

void CudaDecoder::mark(const char* stage) {
  if (!profiling_) return;
  if (events_used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    FROST_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
    event_stage_.push_back(nullptr);
  }
  event_stage_[events_used_] = stage;
  FROST_CUDA_CHECK(cudaEventRecord(events_[events_used_++], stream_));
}

void CudaDecoder::collect_profile() {
  if (!profiling_) return;
  for (size_t i = 1; i < events_used_; ++i) {
    float ms = 0;
    FROST_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]));
    const std::string name = event_stage_[i];
    auto it = std::find_if(profile_.begin(), profile_.end(), [&](const auto& p) { return p.first == name; });
    if (it == profile_.end())
      profile_.emplace_back(name, ms);
    else
      it->second += ms;
  }
  events_used_ = 0;
}

std::vector<std::pair<std::string, double>> CudaDecoder::take_profile() { return std::exchange(profile_, {}); }

}  // namespace frost
