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

constexpr const char* kWho = "cuda decoder";

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

CudaWeights::CudaWeights(const ModelConfig& cfg, int device, cuda::DType wdt)
    : DeviceWeights(cfg, DeviceSpec{DeviceKind::kCuda, device}),
      wdt(wdt), edt(wdt == cuda::DType::kInt8 ? cuda::DType::kF32 : wdt), llama(cfg.arch == Arch::kLlama) {}

absl::StatusOr<std::shared_ptr<const CudaWeights>> CudaWeights::create(const ModelConfig& cfg, const ModelWeights& w,
                                                                       int device) {
  const std::string dev = absl::StrCat("cuda:", device);
  if (absl::Status st = device_supports(cfg, w.dtype, dev); !st.ok()) return st;
  if (absl::Status st = device_int8_weights_present(w, dev); !st.ok()) return st;
  std::shared_ptr<CudaWeights> d(new CudaWeights(cfg, device, device_weight_dtype(w.dtype)));
  try {
    d->init();
    d->upload(w);
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(absl::StrCat("model.device ", dev, ": ", e.what()));
  }
  return std::shared_ptr<const CudaWeights>(std::move(d));
}

void CudaWeights::init() {
  const int device = device_.index;
  int n_dev = 0;
  const cudaError_t e = cudaGetDeviceCount(&n_dev);
  if (e != cudaSuccess)
    throw DeviceError(std::string("no usable CUDA driver or device (") + cudaGetErrorString(e) + ")", false);
  if (device < 0 || device >= n_dev)
    throw DeviceError(absl::StrCat("no CUDA device ", device, " (", n_dev, " visible)"), false);
  FROST_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  FROST_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  card = prop.name;
  n_sms = prop.multiProcessorCount;
  device_total = static_cast<int64_t>(prop.totalGlobalMem);
  if (llama) {  // RoPE tables as the CPU computes them (make_rope_table; the reference device reads them too)
    std::vector<float> c, s;
    device_rope_table(cfg_, /*local=*/false, &c, &s);  // plain models only (device_supports): [max_pos, D/2]
    auto up = [this](const std::vector<float>& v) {
      auto* p = static_cast<float*>(alloc(4 * static_cast<int64_t>(v.size()), "RoPE table"));
      FROST_CUDA_CHECK(cudaMemcpy(p, v.data(), 4 * v.size(), cudaMemcpyHostToDevice));
      return p;
    };
    rope_cos = up(c);
    rope_sin = up(s);
  }
}

CudaWeights::~CudaWeights() {
  if (allocations_.empty()) return;
  cudaSetDevice(device_.index);
  cudaDeviceSynchronize();
  for (void* p : allocations_) cudaFree(p);
}

namespace {
void* device_alloc(int64_t bytes, const char* what, int64_t already, std::vector<void*>* allocations) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  if (e != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    throw DeviceError(absl::StrCat("out of device memory allocating ", bytes, " bytes for ", what, " (", free_b,
                                   " of ", total_b, " bytes free; this model had allocated ", already, ")"),
                      false);
  }
  allocations->push_back(p);
  return p;
}
}  // namespace

void* CudaWeights::alloc(int64_t bytes, const char* what) {
  void* p = device_alloc(bytes, what, allocated, &allocations_);
  allocated += bytes;
  return p;
}

void* CudaDecoder::alloc(int64_t bytes, const char* what) {
  void* p = device_alloc(bytes, what, w_->allocated + device_bytes_, &allocations_);
  device_bytes_ += bytes;
  return p;
}

absl::StatusOr<std::unique_ptr<CudaDecoder>> CudaDecoder::create(std::shared_ptr<const CudaWeights> weights,
                                                                 const DeviceOptions& opts) {
  const std::string dev = absl::StrCat("cuda:", weights->device().index);
  DeviceOptions o = opts;
  o.device = weights->device().index;
  std::unique_ptr<CudaDecoder> d(new CudaDecoder(std::move(weights), o));
  try {
    d->init_stream();
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(absl::StrCat("model.device ", dev, ": ", e.what()));
  }
  return d;
}

void CudaDecoder::init_stream() {
  FROST_CUDA_CHECK(cudaSetDevice(opts_.device));
  FROST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cublasHandle_t h = nullptr;
  FROST_CUBLAS_CHECK(cublasCreate(&h));
  cublas_ = h;
  FROST_CUBLAS_CHECK(cublasSetStream(h, stream_));
  FROST_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));  // fp32 stays fp32 (no TF32)
  constexpr int64_t kWs = 32 << 20;
  FROST_CUBLAS_CHECK(cublasSetWorkspace(h, alloc(kWs, "cuBLAS workspace"), kWs));
}

const float* CudaWeights::upload_f32(const at::Tensor& t, const char* what) {
  if (!t.defined()) return nullptr;
  const at::Tensor c = t.to(at::kFloat).contiguous();
  auto* d = static_cast<float*>(alloc(4 * c.numel(), what));
  FROST_CUDA_CHECK(cudaMemcpy(d, c.data_ptr<float>(), 4 * static_cast<size_t>(c.numel()), cudaMemcpyHostToDevice));
  bytes_ += 4 * c.numel();
  return d;
}

const void* CudaWeights::upload_w(const at::Tensor& t, const char* what) {
  if (wdt == cuda::DType::kF32) return upload_f32(t, what);
  const int64_t n = t.numel();
  void* d = alloc(2 * n, what);
  const bool f16 = wdt == cuda::DType::kF16;
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
  bytes_ += 2 * n;
  return d;
}

CudaWeights::Linear CudaWeights::upload_q8(const kernels::QuantizedMatrix& q, const at::Tensor& bias,
                                           const char* what) {
  Linear L;
  const at::Tensor qc = q.q.contiguous(), sc = q.scales.to(at::kFloat).contiguous();
  void* d = alloc(qc.numel(), what);
  FROST_CUDA_CHECK(cudaMemcpy(d, qc.data_ptr(), static_cast<size_t>(qc.numel()), cudaMemcpyHostToDevice));
  bytes_ += qc.numel();
  L.w = d;
  L.scales = upload_f32(sc, what);
  L.group = static_cast<int>(q.group);
  L.b = upload_f32(bias, what);
  L.n_out = static_cast<int>(q.n_out);
  L.n_in = static_cast<int>(q.n_in);
  return L;
}

void CudaWeights::upload(const ModelWeights& w) {
  const bool int8 = wdt == cuda::DType::kInt8;
  auto lin = [&](const at::Tensor& wt, const at::Tensor& bt, const char* what) {
    Linear L;
    L.w = upload_w(wt, what);
    L.b = upload_f32(bt, what);
    L.n_out = static_cast<int>(wt.size(0));
    L.n_in = static_cast<int>(wt.size(1));
    return L;
  };
  tok_embed = int8 ? upload_f32(w.tok_embed, "tok_embed") : upload_w(w.tok_embed, "tok_embed");
  if (!llama) pos_embed = upload_f32(w.pos_embed, "pos_embed");
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
    layers.push_back(L);
  }
  final_norm_w = upload_f32(w.final_norm_w, "final_norm_w");
  final_norm_b = upload_f32(w.final_norm_b, "final_norm_b");
  if (int8) {  // the CPU int8 model's head: quantized, tied or not
    lm_head = upload_q8(w.lm_head_q, at::Tensor(), "lm_head");
  } else if (w.lm_head.defined() && !w.lm_head.is_same(w.tok_embed)) {
    lm_head = lin(w.lm_head, at::Tensor(), "lm_head");
  } else {
    lm_head.w = tok_embed;
    lm_head.n_out = static_cast<int>(cfg_.n_vocab);
    lm_head.n_in = static_cast<int>(cfg_.dim);
  }
  FROST_CUDA_CHECK(cudaDeviceSynchronize());
}

std::shared_ptr<const CudaWeights> CudaWeights::random(const ModelConfig& cfg, int device, WeightDtype weights,
                                                       uint64_t seed) {
  if (absl::Status st = device_supports(cfg, weights, absl::StrCat("cuda:", device)); !st.ok())
    throw DeviceError(std::string(st.message()), false);
  std::shared_ptr<CudaWeights> m(new CudaWeights(cfg, device, device_weight_dtype(weights)));
  m->init();
  m->draw(seed);
  return m;
}

std::unique_ptr<CudaDecoder> CudaDecoder::random(const ModelConfig& cfg, const DeviceOptions& opts,
                                                 WeightDtype weights, uint64_t seed) {
  absl::StatusOr<std::unique_ptr<CudaDecoder>> d = create(CudaWeights::random(cfg, opts.device, weights, seed), opts);
  if (!d.ok()) throw DeviceError(std::string(d.status().message()), false);
  return *std::move(d);
}

// Drawn on the default stream, synchronized before the weights are shared.
void CudaWeights::draw(uint64_t seed) {
  const ModelConfig& cfg = cfg_;
  cudaStream_t stream = nullptr;
  const int64_t C = cfg.dim, V = cfg.n_vocab, F = cfg.ffn_dim, Q = cfg.q_dim(), QKV = Q + 2 * cfg.kv_dim();
  const bool gpt2 = cfg.arch == Arch::kGpt2;
  const int64_t FIN = gpt2 ? F : 2 * F;
  const cuda::DType wd = wdt;
  const int64_t wsz = cuda::dtype_bytes(wd);
  uint64_t k = seed;
  auto fill = [&](int64_t n, cuda::DType dt, float std, float mean, const char* what) {
    void* p = alloc(n * cuda::dtype_bytes(dt), what);
    cuda::fill_uniform(p, dt, n, ++k, std * std::sqrt(3.f), mean, stream);
    return p;
  };
  // int8: each matrix drawn in fp32 into one scratch (the largest matrix's size), then quantized on the
  // device as the CPU loader quantizes (groups of 32).
  const bool int8 = wd == cuda::DType::kInt8;
  float* scratch = nullptr;
  struct FreeDraw {
    float** p;
    ~FreeDraw() {
      if (*p) cudaFree(*p);
    }
  } free_draw{&scratch};
  if (int8) {
    const int64_t most = std::max({QKV * C, C * Q, FIN * C, C * F, V * C});
    if (cudaMalloc(reinterpret_cast<void**>(&scratch), 4 * static_cast<size_t>(most)) != cudaSuccess) {
      cudaGetLastError();
      throw DeviceError(absl::StrCat("out of device memory drawing int8 weights (", 4 * most, " bytes)"),
                        false);
    }
  }
  auto quantized = [&](int64_t n_out, int64_t n_in, float a, Linear* L) {
    constexpr int kGroup = 32;
    cuda::fill_uniform(scratch, cuda::DType::kF32, n_out * n_in, ++k, a, 0.f, stream);
    auto* q = static_cast<int8_t*>(alloc(n_out * n_in, "weights"));
    const int64_t n_scales = n_out * ((n_in + kGroup - 1) / kGroup);
    auto* sc = static_cast<float*>(alloc(4 * n_scales, "weights"));
    cuda::quantize_int8(scratch, n_out, static_cast<int>(n_in), kGroup, q, sc, stream);
    L->w = q;
    L->scales = sc;
    L->group = kGroup;
    bytes_ += n_out * n_in + 4 * n_scales;
  };
  auto lin = [&](int64_t n_out, int64_t n_in, bool bias) {
    Linear L;
    const float a = 1.f / std::sqrt(static_cast<float>(n_in));
    if (int8) {
      quantized(n_out, n_in, a * std::sqrt(3.f), &L);
    } else {
      L.w = fill(n_out * n_in, wd, a, 0.f, "weights");
      bytes_ += n_out * n_in * wsz;
    }
    if (bias) {
      L.b = static_cast<const float*>(fill(n_out, cuda::DType::kF32, 0.02f, 0.f, "weights"));
      bytes_ += 4 * n_out;
    }
    L.n_out = static_cast<int>(n_out);
    L.n_in = static_cast<int>(n_in);
    return L;
  };
  auto vec = [&](float std, float mean) {
    bytes_ += 4 * C;
    return static_cast<const float*>(fill(C, cuda::DType::kF32, std, mean, "weights"));
  };
  tok_embed = fill(V * C, edt, 0.05f, 0.f, "weights");
  bytes_ += V * C * cuda::dtype_bytes(edt);
  if (gpt2) {
    pos_embed = static_cast<const float*>(fill(cfg.max_pos * C, cuda::DType::kF32, 0.1f, 0.f, "weights"));
    bytes_ += 4 * cfg.max_pos * C;
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
    layers.push_back(L);
  }
  final_norm_w = vec(0.1f, 1.f);
  if (gpt2) final_norm_b = vec(0.02f, 0.f);
  if (int8) {  // the head quantized from the table (tied) or drawn (untied), as the CPU int8 model's
    lm_head.n_out = static_cast<int>(V);
    lm_head.n_in = static_cast<int>(C);
    if (cfg.tie_embeddings) {
      auto* q = static_cast<int8_t*>(alloc(V * C, "weights"));
      auto* sc = static_cast<float*>(alloc(4 * V * ((C + 31) / 32), "weights"));
      cuda::quantize_int8(static_cast<const float*>(tok_embed), V, static_cast<int>(C), 32, q, sc,
                          stream);
      lm_head.w = q;
      lm_head.scales = sc;
      lm_head.group = 32;
      bytes_ += V * C + 4 * V * ((C + 31) / 32);
    } else {
      quantized(V, C, std::sqrt(3.f) / std::sqrt(static_cast<float>(C)), &lm_head);
    }
  } else if (cfg.tie_embeddings) {
    lm_head.w = tok_embed;
    lm_head.n_out = static_cast<int>(V);
    lm_head.n_in = static_cast<int>(C);
  } else {
    lm_head = lin(V, C, false);
  }
  FROST_CUDA_CHECK(cudaDeviceSynchronize());
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
    const DeviceLimits lim{n_blocks, max_rows, max_seqs, max_blocks};
    check_device_allocation(cfg_, opts_.kv, layout, lim, lim_, kWho);
    kv_ = layout;
    lim_ = lim;
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
      int64_t most = int64_t{w_->lm_head.n_out} * w_->lm_head.n_in;
      for (const Layer& L : w_->layers)
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
    off_masks_ = align256(off_table_ + 4LL * (max_seqs + 1) * max_blocks);  // token masks (set_masks)
    meta_bytes_ = off_masks_ + 4LL * logits_cap_ * ((V + 31) / 32);
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
  check_device_blocks(lim_, seq, blocks, n, kWho);
  std::copy(blocks, blocks + n,
            reinterpret_cast<int32_t*>(meta_host_ + off_table_) + static_cast<int64_t>(seq) * lim_.max_blocks);
  n_table_rows_ = std::max(n_table_rows_, seq + 1);
}

std::pair<int, int> CudaDecoder::stage(const DeviceStep& step, const std::vector<cuda::SampleParams>* sampling,
                                       bool pad, bool hidden) {
  check_device_step(cfg_, lim_, kv_.block_tokens, sampling ? lim_.max_seqs : hidden ? lim_.max_rows : logit_rows_cap_,
                    step, kWho);
  const int n = static_cast<int>(step.token.size()), nl = static_cast<int>(step.logit_rows.size());
  const int R = rows_cap_;
  const int nb = pad ? pow2_at_least(n) : n;
  const int nlb = pad ? std::min({nb, pow2_at_least(nl), logits_cap_}) : nl;
  auto* i32 = reinterpret_cast<int32_t*>(meta_host_);
  std::copy(step.token.begin(), step.token.end(), i32);
  std::copy(step.seq.begin(), step.seq.end(), i32 + R);
  std::copy(step.pos.begin(), step.pos.end(), i32 + 2 * R);
  std::copy(step.logit_rows.begin(), step.logit_rows.end(), i32 + 3 * R);
  for (int r = n; r < nb; ++r)
    i32[r] = 0, i32[R + r] = lim_.max_seqs, i32[2 * R + r] = 0;  // padding: the spare block
  for (int i = nl; i < nlb; ++i) i32[3 * R + i] = 0;
  auto* params = reinterpret_cast<cuda::SampleParams*>(meta_host_ + off_params_);
  for (int i = 0; i < nlb; ++i)
    params[i] = sampling && i < nl ? (*sampling)[static_cast<size_t>(i)] : cuda::SampleParams{};
  split_ = cuda::attention_split(*std::max_element(step.pos.begin(), step.pos.end()) + 1, nb,
                                 static_cast<int>(cfg_.n_head_kv), 4 * w_->n_sms);
  FROST_CUDA_CHECK(cudaMemcpyAsync(meta_dev_, meta_host_, static_cast<size_t>(off_table_),
                                   cudaMemcpyHostToDevice, stream_));
  if (n_table_rows_ > 0)
    FROST_CUDA_CHECK(cudaMemcpyAsync(meta_dev_ + off_table_, meta_host_ + off_table_,
                                     4 * static_cast<size_t>(n_table_rows_) * lim_.max_blocks,
                                     cudaMemcpyHostToDevice, stream_));
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

// The layer sequence's ops on the GPU. LLaMA's RMSNorms and SwiGLU ride inside the linear layer that reads
// them (fused into the GEMV at batch <= kGemvMaxRows; their own kernels before cuBLAS above): norm() and
// activation() leave them pending and the next linear() takes them. GPT-2: LayerNorm and GELU kernels. The
// stage marks (profiling) are the ones the CUDA benchmark reports.
struct CudaDecoder::Ops final : LayerOps {
  CudaDecoder& d;
  const CudaWeights& w;
  const int n, nl;
  const StepOutput out;
  const float* pending_norm = nullptr;  // LLaMA: the RMSNorm weights the next linear applies to its input
  const float* norm_in = nullptr;       // ... and that input (x_, or the gathered rows in h_)
  float* norm_scratch = nullptr;        // where the normed rows go when the norm cannot fuse (cuBLAS)
  const float* normed = nullptr;        // a standalone norm's output: the next linear's input
  bool pending_swiglu = false;

  Ops(CudaDecoder& d_, int rows, int logit_rows, StepOutput o) : d(d_), w(*d_.w_), n(rows), nl(logit_rows), out(o) {}
  const CudaWeights::Layer& L(int64_t l) const { return w.layers[static_cast<size_t>(l)]; }
  // A linear reading the last norm's rows: fused (LLaMA) or from its output.
  void normed_linear(const Linear& lin, int rows, float* y) {
    if (pending_norm) {
      d.linear(lin, norm_in, rows, y, false, cuda::GemvInput::kRmsNorm, pending_norm, norm_scratch);
      pending_norm = nullptr;
    } else {
      d.linear(lin, normed, rows, y, false);
    }
  }

  void embed() override {
    d.mark(nullptr);
    cuda::embed(w.tok_embed, w.edt, w.pos_embed, d.rows_dev_, n, static_cast<int>(d.cfg_.dim), d.x_,
                d.stream_);
    d.mark("embed");
  }
  void norm(NormSite site, int64_t l) override {
    const bool fin = site == NormSite::kFinal;
    const float* nw = fin ? w.final_norm_w : site == NormSite::kAttn ? L(l).attn_norm_w : L(l).mlp_norm_w;
    const float* nb = fin ? w.final_norm_b : site == NormSite::kAttn ? L(l).attn_norm_b : L(l).mlp_norm_b;
    // Layer norms read the residual stream x_ into h_; the final norm reads the gathered rows (h_) into x_
    // (the residual stream is spent by then).
    const float* in = fin ? d.h_ : d.x_;
    float* o = fin ? d.x_ : d.h_;
    const int rows = fin ? nl : n;
    if (d.llama_ && !(fin && out == StepOutput::kHidden)) {
      pending_norm = nw;
      norm_in = in;
      norm_scratch = o;
      return;
    }
    d.norm(in, nw, nb, rows, o);
    normed = o;
    if (fin && out == StepOutput::kHidden) d.mark("norm");
  }
  void linear(LayerMatrix m, int64_t l) override {
    switch (m) {
      case LayerMatrix::kQkv:
        normed_linear(L(l).qkv, n, d.qkv_);
        d.mark("norm_qkv");
        return;
      case LayerMatrix::kO:
        d.linear(L(l).o, d.att_, n, d.x_, true);
        d.mark("o");
        return;
      case LayerMatrix::kMlpIn:
        normed_linear(L(l).in, n, d.gu_);
        d.mark("norm_mlp_in");
        return;
      case LayerMatrix::kMlpOut:
        if (pending_swiglu)
          d.linear(L(l).out, d.gu_, n, d.x_, true, cuda::GemvInput::kSwiGlu, nullptr, d.act_);
        else
          d.linear(L(l).out, d.gu_, n, d.x_, true);
        pending_swiglu = false;
        d.mark("act_mlp_out");
        return;
      case LayerMatrix::kHead:
        normed_linear(w.lm_head, nl, d.logits_);
        d.mark("norm_lm_head");
        return;
    }
  }
  void rope_kv_append(int64_t l, bool) override {  // RA is refused before upload (device_supports)
    cuda::rope_kv_append(d.qkv_, w.rope_cos, w.rope_sin, d.rows_dev_, n, static_cast<int>(d.cfg_.n_head),
                         d.kv_, static_cast<int>(l), d.pool_, d.stream_);
    d.mark("rope_kv_append");
  }
  void attention(int64_t l) override {
    const float scale = 1.f / std::sqrt(static_cast<float>(d.cfg_.head_dim));
    cuda::attention(d.qkv_, d.rows_dev_, n, static_cast<int>(d.cfg_.n_head), d.kv_, static_cast<int>(l),
                    d.pool_, scale, d.split_, d.attn_part_, d.att_, d.stream_);
    d.mark("attention");
  }
  void activation(int64_t) override {
    if (d.llama_)
      pending_swiglu = true;  // SwiGLU inside the W_out linear
    else
      cuda::gelu_new(d.gu_, static_cast<int64_t>(n) * d.cfg_.ffn_dim, d.stream_);
  }
  void gather() override {
    cuda::gather_rows(d.x_, d.logit_rows_dev_, nl, static_cast<int>(d.cfg_.dim), d.h_, d.stream_);
  }
  void sample() override {
    cuda::apply_token_masks(d.logits_, nl, static_cast<int>(d.cfg_.n_vocab), d.params_dev_,
                            reinterpret_cast<const uint32_t*>(d.meta_dev_ + d.off_masks_), d.stream_);
    cuda::sample_rows(d.logits_, nl, static_cast<int>(d.cfg_.n_vocab), d.params_dev_, d.probs_, d.ids_,
                      d.stream_);
    d.mark("sample");
  }
};

void CudaDecoder::enqueue(int n, int nl, StepOutput out) {
  Ops ops(*this, n, nl, out);
  run_layer_sequence(cfg_, ops, out);
}

void CudaDecoder::run(int n, int nl, StepOutput out) {
  if (!opts_.cuda_graphs || profiling_ || n > kMaxGraphRows || out != StepOutput::kSample) {
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
    run(n, nl, StepOutput::kSample);
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
    enqueue(n, nl, StepOutput::kLogits);
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
    enqueue(n, nl, StepOutput::kHidden);
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
  m.name = absl::StrCat("cuda:", opts_.device, " (", w_->card, ")");
  m.weight_bytes = w_->bytes();
  m.kv_pool_bytes = pool_ ? kv_.block_bytes() * (lim_.n_blocks + 1) : 0;
  m.device_bytes = w_->allocated + device_bytes_;  // the weights (shared with the features' decoder) once
  m.device_total_bytes = w_->device_total;
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
