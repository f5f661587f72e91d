// Model: the device-resident decoder (kernels/cuda/model.h).
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda/check.h"
#include "kernels/cuda/model.h"
#include "kernels/cuda/reference.h"

namespace frost::cuda {
namespace {

#define FROST_CUBLAS_CHECK(expr)                                                                          \
  do {                                                                                                    \
    const cublasStatus_t frost_s_ = (expr);                                                               \
    if (frost_s_ != CUBLAS_STATUS_SUCCESS)                                                                \
      ::frost::cuda::throw_cuda_error(static_cast<int>(frost_s_), cublasGetStatusString(frost_s_), #expr, \
                                      __FILE__, __LINE__);                                                \
  } while (0)

cublasHandle_t handle(void* h) { return static_cast<cublasHandle_t>(h); }

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

}  // namespace

int64_t ModelSpec::n_params() const {
  const int64_t C = dim, V = n_vocab, F = ffn_dim;
  const int64_t fin = arch == Arch::kLlama ? 2 * F : F;
  int64_t per_layer = static_cast<int64_t>(q_dim() + 2 * kv_dim()) * C + static_cast<int64_t>(C) * q_dim() +
                      fin * C + C * F + 2 * C;
  if (arch == Arch::kGpt2) per_layer += (q_dim() + 2 * kv_dim()) + C + fin + C + 2 * C;
  int64_t n =
      V * C + per_layer * n_layer + C + (arch == Arch::kGpt2 ? C + static_cast<int64_t>(max_pos) * C : 0);
  if (!tie_embeddings) n += V * C;
  return n;
}

BlockAllocator::BlockAllocator(int n_blocks) : used_(static_cast<size_t>(n_blocks), false) {
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int BlockAllocator::alloc() {
  if (free_.empty()) return -1;
  const int b = free_.back();
  free_.pop_back();
  used_[static_cast<size_t>(b)] = true;
  return b;
}

void BlockAllocator::release(int b) {
  if (b < 0 || b >= static_cast<int>(used_.size()) || !used_[static_cast<size_t>(b)])
    throw std::logic_error("BlockAllocator: block " + std::to_string(b) + " is not allocated");
  used_[static_cast<size_t>(b)] = false;
  free_.push_back(b);
}

void Model::validate() const {
  const ModelSpec& s = spec_;
  auto bad = [](const std::string& m) { throw std::invalid_argument("cuda model: " + m); };
  if (s.n_vocab <= 0 || s.dim <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 ||
      s.head_dim <= 0 || s.ffn_dim <= 0 || s.max_pos <= 0)
    bad("every dimension must be positive");
  if (s.n_head % s.n_head_kv != 0) bad("n_head must be a multiple of n_head_kv");
  const int g = s.n_head / s.n_head_kv;
  if (g != 1 && g != 2 && g != 4 && g != 8)
    bad("query heads per kv head must be 1, 2, 4 or 8, got " + std::to_string(g));
  if (s.head_dim > 128) bad("head_dim over 128 is not supported, got " + std::to_string(s.head_dim));
  if (s.arch == Arch::kLlama && s.head_dim % 2 != 0) bad("RoPE needs an even head_dim");
  if (s.head_dim % 8 != 0) bad("head_dim must be a multiple of 8, got " + std::to_string(s.head_dim));
  if (s.max_pos > kAttnSplits * kAttnMaxSplit)
    bad("max_pos " + std::to_string(s.max_pos) + " exceeds the " +
        std::to_string(kAttnSplits * kAttnMaxSplit) + " positions the CUDA attention holds");
  if (opts_.block_tokens <= 0 || opts_.max_rows <= 0 || opts_.max_seqs <= 0) bad("options must be positive");
}

Model::Model(const ModelSpec& spec, const ModelOptions& opts) : spec_(spec), opts_(opts) {
  try {
    init();
  } catch (...) {
    release();  // a constructor that throws runs no destructor: give back what was taken
    throw;
  }
}

void Model::init() {
  const ModelSpec& spec = spec_;
  const ModelOptions& opts = opts_;
  validate();
  int n_dev = 0;
  const cudaError_t e = cudaGetDeviceCount(&n_dev);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("cuda model: no usable CUDA driver or device (") +
                             cudaGetErrorString(e) + ")");
  if (opts.device < 0 || opts.device >= n_dev)
    throw std::runtime_error("cuda model: no CUDA device " + std::to_string(opts.device) + " (" +
                             std::to_string(n_dev) + " visible)");
  FROST_CUDA_CHECK(cudaSetDevice(opts.device));
  FROST_CUDA_CHECK(cudaDeviceGetAttribute(&n_sms_, cudaDevAttrMultiProcessorCount, opts.device));
  FROST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cublasHandle_t h = nullptr;
  FROST_CUBLAS_CHECK(cublasCreate(&h));
  cublas_ = h;
  FROST_CUBLAS_CHECK(cublasSetStream(h, stream_));
  FROST_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));  // fp32 stays fp32 (no TF32)
  constexpr int64_t kWs = 32 << 20;
  cublas_ws_ = alloc(kWs, "cuBLAS workspace");
  FROST_CUBLAS_CHECK(cublasSetWorkspace(h, cublas_ws_, kWs));

  kv_.format = opts.kv;
  kv_.n_layer = spec.n_layer;
  kv_.n_head_kv = spec.n_head_kv;
  kv_.head_dim = spec.head_dim;
  kv_.block_tokens = opts.block_tokens;
  max_blocks_ = (spec.max_pos + opts.block_tokens - 1) / opts.block_tokens;
  n_blocks_ = opts.n_blocks > 0 ? opts.n_blocks : opts.max_seqs * max_blocks_;
  pool_ = static_cast<uint8_t*>(alloc(kv_.block_bytes() * n_blocks_, "KV block pool"));

  const int R = opts.max_rows, C = spec.dim, QKV = spec.q_dim() + 2 * spec.kv_dim();
  const int FIN = spec.arch == Arch::kLlama ? 2 * spec.ffn_dim : spec.ffn_dim;
  x_ = static_cast<float*>(alloc(4LL * R * C, "activations"));
  h_ = static_cast<float*>(alloc(4LL * R * C, "activations"));
  qkv_ = static_cast<float*>(alloc(4LL * R * QKV, "activations"));
  att_ = static_cast<float*>(alloc(4LL * R * spec.q_dim(), "activations"));
  gu_ = static_cast<float*>(alloc(4LL * R * FIN, "activations"));
  act_ = static_cast<float*>(alloc(4LL * R * spec.ffn_dim, "activations"));
  logits_ = static_cast<float*>(alloc(4LL * R * spec.n_vocab, "logits"));
  const int64_t widest = std::max<int64_t>(
      {int64_t{C}, int64_t{QKV}, int64_t{FIN}, int64_t{spec.q_dim()}, int64_t{spec.ffn_dim}});
  xb_ = static_cast<uint16_t*>(alloc(2LL * R * widest, "bf16 activations"));
  ids_ = static_cast<int32_t*>(alloc(4LL * R, "sampled ids"));
  attn_part_ = static_cast<float*>(
      alloc(4 * attention_partials_floats(R, spec.n_head, spec.head_dim), "attention partials"));

  // Metadata block: token, seq, pos, logit_rows [R] int32; temperature, min_p [R] f32; u [R] f64; table.
  // set_blocks writes the table straight into the pinned block (steps synchronise before returning, so no
  // copy of it is in flight then).
  const int64_t off_u = align256(4LL * R * 6);
  const int64_t off_table = align256(off_u + 8LL * R);
  meta_bytes_ = off_table + 4LL * opts.max_seqs * max_blocks_;
  FROST_CUDA_CHECK(cudaMallocHost(&meta_host_, static_cast<size_t>(meta_bytes_)));
  std::memset(meta_host_, 0, static_cast<size_t>(meta_bytes_));
  meta_dev_ = static_cast<uint8_t*>(alloc(meta_bytes_, "step metadata"));
  FROST_CUDA_CHECK(cudaMallocHost(&ids_host_, 4 * static_cast<size_t>(R)));
  auto* i32 = reinterpret_cast<int32_t*>(meta_dev_);
  rows_dev_.token = i32;
  rows_dev_.seq = i32 + R;
  rows_dev_.pos = i32 + 2 * R;
  logit_rows_dev_ = i32 + 3 * R;
  temp_dev_ = reinterpret_cast<float*>(i32 + 4 * R);
  minp_dev_ = reinterpret_cast<float*>(i32 + 5 * R);
  u_dev_ = reinterpret_cast<double*>(meta_dev_ + off_u);
  rows_dev_.block_table = reinterpret_cast<int32_t*>(meta_dev_ + off_table);
  table_host_ = reinterpret_cast<int32_t*>(meta_host_ + off_table);
  rows_dev_.max_blocks = max_blocks_;

  if (spec.arch == Arch::kLlama) {  // RoPE tables as core/model/transformer.cc computes them (and the twin)
    std::vector<float> c, s;
    ref::rope_tables(spec.max_pos, spec.head_dim, spec.rope_theta, &c, &s);
    rope_cos_ = upload_f32(c.data(), static_cast<int64_t>(c.size()), "RoPE table");
    rope_sin_ = upload_f32(s.data(), static_cast<int64_t>(s.size()), "RoPE table");
  }
}

Model::Model(const ModelSpec& spec, const HostWeights& w, const ModelOptions& opts) : Model(spec, opts) {
  const int64_t C = spec.dim, V = spec.n_vocab, F = spec.ffn_dim, Q = spec.q_dim(),
                QKV = Q + 2 * spec.kv_dim();
  const int64_t FIN = spec.arch == Arch::kLlama ? 2 * F : F;
  const bool gpt2 = spec.arch == Arch::kGpt2;
  auto need = [](const float* p, const std::string& what) {
    if (!p) throw std::invalid_argument("cuda model: weight " + what + " is missing");
    return p;
  };
  if (static_cast<int>(w.layers.size()) != spec.n_layer)
    throw std::invalid_argument("cuda model: " + std::to_string(w.layers.size()) +
                                " layers of weights for n_layer " + std::to_string(spec.n_layer));
  tok_embed_ = upload_w(need(w.tok_embed, "tok_embed"), V * C, "tok_embed");
  if (gpt2)
    pos_embed_ =
        upload_f32(need(w.pos_embed, "pos_embed"), static_cast<int64_t>(spec.max_pos) * C, "pos_embed");
  auto lin = [&](const float* wp, const float* bp, int64_t n_out, int64_t n_in, const std::string& what) {
    Linear L;
    L.w = upload_w(need(wp, what), n_out * n_in, what.c_str());
    L.b = bp ? upload_f32(bp, n_out, what.c_str()) : nullptr;
    L.n_out = static_cast<int>(n_out);
    L.n_in = static_cast<int>(n_in);
    return L;
  };
  for (int l = 0; l < spec.n_layer; ++l) {
    const HostLayer& hl = w.layers[static_cast<size_t>(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer L;
    L.attn_norm_w = upload_f32(need(hl.attn_norm_w, p + "attn_norm_w"), C, "norm");
    L.mlp_norm_w = upload_f32(need(hl.mlp_norm_w, p + "mlp_norm_w"), C, "norm");
    if (gpt2) {
      L.attn_norm_b = upload_f32(need(hl.attn_norm_b, p + "attn_norm_b"), C, "norm");
      L.mlp_norm_b = upload_f32(need(hl.mlp_norm_b, p + "mlp_norm_b"), C, "norm");
    }
    L.qkv = lin(hl.wqkv, hl.bqkv, QKV, C, p + "wqkv");
    L.o = lin(hl.wo, hl.bo, C, Q, p + "wo");
    L.in = lin(hl.w_in, hl.b_in, FIN, C, p + "w_in");
    L.out = lin(hl.w_out, hl.b_out, C, F, p + "w_out");
    layers_.push_back(L);
  }
  final_norm_w_ = upload_f32(need(w.final_norm_w, "final_norm_w"), C, "norm");
  if (gpt2) final_norm_b_ = upload_f32(need(w.final_norm_b, "final_norm_b"), C, "norm");
  if (w.lm_head && w.lm_head != w.tok_embed) {
    lm_head_ = lin(w.lm_head, nullptr, V, C, "lm_head");
  } else {
    lm_head_.w = tok_embed_;
    lm_head_.n_out = static_cast<int>(V);
    lm_head_.n_in = static_cast<int>(C);
  }
  FROST_CUDA_CHECK(cudaDeviceSynchronize());
}

std::unique_ptr<Model> Model::random(const ModelSpec& spec, const ModelOptions& opts, uint64_t seed) {
  std::unique_ptr<Model> m(new Model(spec, opts));
  const int64_t C = spec.dim, V = spec.n_vocab, F = spec.ffn_dim, Q = spec.q_dim(),
                QKV = Q + 2 * spec.kv_dim();
  const int64_t FIN = spec.arch == Arch::kLlama ? 2 * F : F;
  const bool gpt2 = spec.arch == Arch::kGpt2;
  const DType wd = opts.weights;
  const int64_t wsz = wd == DType::kF32 ? 4 : 2;
  uint64_t k = seed;
  auto fill = [&](int64_t n, DType dt, float std, float mean, const char* what) {
    void* p = m->alloc(n * (dt == DType::kF32 ? 4 : 2), what);
    fill_uniform(p, dt, n, ++k, std * std::sqrt(3.f), mean, m->stream_);
    return p;
  };
  auto lin = [&](int64_t n_out, int64_t n_in, bool bias) {
    Linear L;
    L.w = fill(n_out * n_in, wd, 1.f / std::sqrt(static_cast<float>(n_in)), 0.f, "weights");
    m->weight_bytes_ += n_out * n_in * wsz;
    if (bias) {
      L.b = static_cast<const float*>(fill(n_out, DType::kF32, 0.02f, 0.f, "weights"));
      m->weight_bytes_ += 4 * n_out;
    }
    L.n_out = static_cast<int>(n_out);
    L.n_in = static_cast<int>(n_in);
    return L;
  };
  auto vec = [&](float std, float mean) {
    m->weight_bytes_ += 4 * C;
    return static_cast<const float*>(fill(C, DType::kF32, std, mean, "weights"));
  };
  m->tok_embed_ = fill(V * C, wd, 0.05f, 0.f, "weights");
  m->weight_bytes_ += V * C * wsz;
  if (gpt2) {
    m->pos_embed_ = static_cast<const float*>(
        fill(static_cast<int64_t>(spec.max_pos) * C, DType::kF32, 0.1f, 0.f, "weights"));
    m->weight_bytes_ += 4LL * spec.max_pos * C;
  }
  for (int l = 0; l < spec.n_layer; ++l) {
    Layer L;
    L.attn_norm_w = vec(0.1f, 1.f);
    L.mlp_norm_w = vec(0.1f, 1.f);
    if (gpt2) {
      L.attn_norm_b = vec(0.02f, 0.f);
      L.mlp_norm_b = vec(0.02f, 0.f);
    }
    L.qkv = lin(QKV, C, gpt2);
    L.o = lin(C, Q, gpt2);
    L.in = lin(FIN, C, gpt2);
    L.out = lin(C, F, gpt2);
    m->layers_.push_back(L);
  }
  m->final_norm_w_ = vec(0.1f, 1.f);
  if (gpt2) m->final_norm_b_ = vec(0.02f, 0.f);
  if (spec.tie_embeddings) {
    m->lm_head_.w = m->tok_embed_;
    m->lm_head_.n_out = static_cast<int>(V);
    m->lm_head_.n_in = static_cast<int>(C);
  } else {
    m->lm_head_ = lin(V, C, false);
  }
  FROST_CUDA_CHECK(cudaStreamSynchronize(m->stream_));
  return m;
}

Model::~Model() { release(); }

void Model::release() {
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

void* Model::alloc(int64_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  if (e != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    throw std::runtime_error("cuda model: out of device memory allocating " + std::to_string(bytes) +
                             " bytes for " + what + " (" + std::to_string(free_b) + " of " +
                             std::to_string(total_b) + " bytes free; this model had allocated " +
                             std::to_string(device_bytes_) + ")");
  }
  allocations_.push_back(p);
  device_bytes_ += bytes;
  return p;
}

const float* Model::upload_f32(const float* host, int64_t n, const char* what) {
  auto* d = static_cast<float*>(alloc(4 * n, what));
  FROST_CUDA_CHECK(cudaMemcpy(d, host, static_cast<size_t>(4 * n), cudaMemcpyHostToDevice));
  weight_bytes_ += 4 * n;
  return d;
}

const void* Model::upload_w(const float* host, int64_t n, const char* what) {
  if (opts_.weights == DType::kF32) return upload_f32(host, n, what);
  std::vector<uint16_t> b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    b[static_cast<size_t>(i)] = ref::bf16_bits(host[i]);  // the twin rounds the same way
  void* d = alloc(2 * n, what);
  FROST_CUDA_CHECK(cudaMemcpy(d, b.data(), static_cast<size_t>(2 * n), cudaMemcpyHostToDevice));
  weight_bytes_ += 2 * n;
  return d;
}

void Model::set_blocks(int seq, const std::vector<int32_t>& blocks) {
  if (seq < 0 || seq >= opts_.max_seqs)
    throw std::invalid_argument("cuda model: sequence slot " + std::to_string(seq) + " out of [0, " +
                                std::to_string(opts_.max_seqs) + ")");
  if (static_cast<int>(blocks.size()) > max_blocks_)
    throw std::invalid_argument("cuda model: " + std::to_string(blocks.size()) + " blocks exceed the " +
                                std::to_string(max_blocks_) + " a sequence can hold");
  for (int32_t b : blocks)
    if (b < 0 || b >= n_blocks_)
      throw std::invalid_argument("cuda model: block " + std::to_string(b) + " out of the pool's " +
                                  std::to_string(n_blocks_));
  std::copy(blocks.begin(), blocks.end(), table_host_ + static_cast<int64_t>(seq) * max_blocks_);
}

void Model::stage(const Step& step, const std::vector<RowSampling>* sampling) {
  const int R = opts_.max_rows, n = static_cast<int>(step.token.size());
  if (n <= 0 || n > R)
    throw std::invalid_argument("cuda model: a step has 1.." + std::to_string(R) + " rows, got " +
                                std::to_string(n));
  if (step.seq.size() != step.token.size() || step.pos.size() != step.token.size())
    throw std::invalid_argument("cuda model: token, seq and pos must have one entry per row");
  const int nl = static_cast<int>(step.logit_rows.size());
  if (nl <= 0 || nl > n)
    throw std::invalid_argument("cuda model: 1.." + std::to_string(n) + " logit rows, got " +
                                std::to_string(nl));
  if (sampling && static_cast<int>(sampling->size()) != nl)
    throw std::invalid_argument("cuda model: one sampling entry per logit row");
  for (int r = 0; r < n; ++r) {
    const int32_t t = step.token[r], s = step.seq[r], p = step.pos[r];
    if (t < 0 || t >= spec_.n_vocab)
      throw std::invalid_argument("cuda model: token " + std::to_string(t) + " out of [0, " +
                                  std::to_string(spec_.n_vocab) + ")");
    if (s < 0 || s >= opts_.max_seqs)
      throw std::invalid_argument("cuda model: sequence slot " + std::to_string(s) + " out of range");
    if (p < 0 || p >= spec_.max_pos)
      throw std::invalid_argument("cuda model: position " + std::to_string(p) + " out of [0, " +
                                  std::to_string(spec_.max_pos) + ")");
  }
  for (int32_t lr : step.logit_rows)
    if (lr < 0 || lr >= n)
      throw std::invalid_argument("cuda model: logit row " + std::to_string(lr) + " out of range");
  split_ = attention_split(*std::max_element(step.pos.begin(), step.pos.end()) + 1, n, spec_.n_head_kv,
                           4 * n_sms_);
  auto* i32 = reinterpret_cast<int32_t*>(meta_host_);
  std::copy(step.token.begin(), step.token.end(), i32);
  std::copy(step.seq.begin(), step.seq.end(), i32 + R);
  std::copy(step.pos.begin(), step.pos.end(), i32 + 2 * R);
  std::copy(step.logit_rows.begin(), step.logit_rows.end(), i32 + 3 * R);
  auto* temp = reinterpret_cast<float*>(i32 + 4 * R);
  auto* minp = reinterpret_cast<float*>(i32 + 5 * R);
  auto* u = reinterpret_cast<double*>(meta_host_ + (reinterpret_cast<uint8_t*>(u_dev_) - meta_dev_));
  for (int i = 0; i < nl; ++i) {
    const RowSampling rs = sampling ? (*sampling)[static_cast<size_t>(i)] : RowSampling{};
    temp[i] = rs.temperature;
    minp[i] = rs.min_p;
    u[i] = rs.u;
  }
}

void Model::norm(const float* x, const float* w, const float* b, int rows, float* out) {
  if (spec_.arch == Arch::kGpt2)
    layernorm(x, w, b, rows, spec_.dim, spec_.norm_eps, out, stream_);
  else
    rmsnorm(x, w, rows, spec_.dim, spec_.norm_eps, out, stream_);
}

void Model::linear(const Linear& L, const float* x, int rows, float* y, bool accumulate, GemvInput in,
                   const float* norm_w, float* scratch) {
  if (opts_.gemv && rows <= kGemvMaxRows) {
    gemv(L.w, opts_.weights, x, rows, L.n_out, L.n_in, L.b, accumulate, y, stream_, in, norm_w,
         spec_.norm_eps);
    return;
  }
  if (in == GemvInput::kRmsNorm) {
    rmsnorm(x, norm_w, rows, L.n_in, spec_.norm_eps, scratch, stream_);
    x = scratch;
  } else if (in == GemvInput::kSwiGlu) {
    swiglu(x, rows, L.n_in, scratch, stream_);
    x = scratch;
  }
  // Row-major y[rows, n_out] = x[rows, n_in] · Wᵀ is, column-major, yᵀ = W · xᵀ with W read transposed.
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  if (opts_.weights == DType::kF32) {
    FROST_CUBLAS_CHECK(cublasGemmEx(handle(cublas_), CUBLAS_OP_T, CUBLAS_OP_N, L.n_out, rows, L.n_in, &alpha,
                                    L.w, CUDA_R_32F, L.n_in, x, CUDA_R_32F, L.n_in, &beta, y, CUDA_R_32F,
                                    L.n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    to_bf16(x, static_cast<int64_t>(rows) * L.n_in, xb_, stream_);
    FROST_CUBLAS_CHECK(cublasGemmEx(handle(cublas_), CUBLAS_OP_T, CUBLAS_OP_N, L.n_out, rows, L.n_in, &alpha,
                                    L.w, CUDA_R_16BF, L.n_in, xb_, CUDA_R_16BF, L.n_in, &beta, y, CUDA_R_32F,
                                    L.n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (L.b) add_bias(y, L.b, rows, L.n_out, stream_);
}

void Model::enqueue(int n, int nl, int mode) {
  const ModelSpec& s = spec_;
  mark(nullptr);
  FROST_CUDA_CHECK(cudaMemcpyAsync(meta_dev_, meta_host_, static_cast<size_t>(meta_bytes_),
                                   cudaMemcpyHostToDevice, stream_));
  mark("upload");
  const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  embed(tok_embed_, opts_.weights, pos_embed_, rows_dev_, n, s.dim, x_, stream_);
  mark("embed");
  // LLaMA: the RMSNorms and SwiGLU ride inside the linear layers that read them (fused into the GEMV at
  // batch ≤ kGemvMaxRows; their own kernels before cuBLAS above). GPT-2: LayerNorm and GELU kernels.
  const bool llama = s.arch == Arch::kLlama;
  for (int l = 0; l < s.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    if (llama) {
      linear(L.qkv, x_, n, qkv_, false, GemvInput::kRmsNorm, L.attn_norm_w, h_);
    } else {
      norm(x_, L.attn_norm_w, L.attn_norm_b, n, h_);
      linear(L.qkv, h_, n, qkv_, false);
    }
    mark("norm_qkv");
    rope_kv_append(qkv_, rope_cos_, rope_sin_, rows_dev_, n, s.n_head, kv_, l, pool_, stream_);
    mark("rope_kv_append");
    attention(qkv_, rows_dev_, n, s.n_head, kv_, l, pool_, scale, split_, attn_part_, att_, stream_);
    mark("attention");
    linear(L.o, att_, n, x_, true);
    mark("o");
    if (llama) {
      linear(L.in, x_, n, gu_, false, GemvInput::kRmsNorm, L.mlp_norm_w, h_);
      mark("norm_mlp_in");
      linear(L.out, gu_, n, x_, true, GemvInput::kSwiGlu, nullptr, act_);
    } else {
      norm(x_, L.mlp_norm_w, L.mlp_norm_b, n, h_);
      linear(L.in, h_, n, gu_, false);
      mark("norm_mlp_in");
      gelu_new(gu_, static_cast<int64_t>(n) * s.ffn_dim, stream_);
      linear(L.out, gu_, n, x_, true);
    }
    mark("act_mlp_out");
  }
  gather_rows(x_, logit_rows_dev_, nl, s.dim, h_, stream_);
  if (llama) {  // the residual stream is spent: x_ takes the normed rows when the norm runs alone
    linear(lm_head_, h_, nl, logits_, false, GemvInput::kRmsNorm, final_norm_w_, x_);
  } else {
    norm(h_, final_norm_w_, final_norm_b_, nl, x_);
    linear(lm_head_, x_, nl, logits_, false);
  }
  mark("norm_lm_head");
  if (mode == 1) {
    sample(logits_, nl, s.n_vocab, temp_dev_, minp_dev_, u_dev_, ids_, stream_);
    FROST_CUDA_CHECK(
        cudaMemcpyAsync(ids_host_, ids_, 4 * static_cast<size_t>(nl), cudaMemcpyDeviceToHost, stream_));
    mark("sample");
  }
}

void Model::mark(const char* stage) {
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

void Model::collect_profile() {
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

std::vector<std::pair<std::string, double>> Model::take_profile() { return std::exchange(profile_, {}); }

void Model::run(int n, int nl, int mode) {
  if (!opts_.cuda_graphs || mode != 1 || profiling_) {
    enqueue(n, nl, mode);
    return;
  }
  const auto key = std::make_tuple(n, nl, split_.split_len, split_.n_splits);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    cudaGraph_t g = nullptr;
    FROST_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue(n, nl, mode);
    } catch (...) {
      cudaStreamEndCapture(stream_, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    FROST_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    cudaGraphExec_t exec = nullptr;
    FROST_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    cudaGraphDestroy(g);
    it = graphs_.emplace(key, exec).first;
  }
  FROST_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
}

std::vector<float> Model::forward_logits(const Step& step) {
  stage(step, nullptr);
  const int n = static_cast<int>(step.token.size()), nl = static_cast<int>(step.logit_rows.size());
  run(n, nl, 0);
  std::vector<float> out(static_cast<size_t>(nl) * spec_.n_vocab);
  FROST_CUDA_CHECK(cudaMemcpyAsync(out.data(), logits_, 4 * out.size(), cudaMemcpyDeviceToHost, stream_));
  FROST_CUDA_CHECK(cudaStreamSynchronize(stream_));
  collect_profile();
  return out;
}

std::vector<int32_t> Model::forward_sample(const Step& step, const std::vector<RowSampling>& sampling) {
  stage(step, &sampling);
  const int n = static_cast<int>(step.token.size()), nl = static_cast<int>(step.logit_rows.size());
  run(n, nl, 1);
  FROST_CUDA_CHECK(cudaStreamSynchronize(stream_));
  collect_profile();
  return std::vector<int32_t>(ids_host_, ids_host_ + nl);
}

std::vector<int32_t> Model::forward_greedy(const Step& step) {
  return forward_sample(step, std::vector<RowSampling>(step.logit_rows.size()));
}

}  // namespace frost::cuda
