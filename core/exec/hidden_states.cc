#include "core/exec/hidden_states.h"

#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/common/torch_status.h"
#include "core/exec/device_factory.h"

namespace frost {
namespace {

constexpr int kBlockTokens = 16;

class DeviceHiddenSource final : public HiddenStateSource {
 public:
  DeviceHiddenSource(std::unique_ptr<DeviceDecoder> d, std::string device, int64_t dim, int64_t max_pos)
      : decoder_(std::move(d)), device_(std::move(device)), dim_(dim), max_pos_(max_pos) {}

  std::string device() const override { return device_; }

  absl::StatusOr<at::Tensor> hidden(const std::vector<int32_t>& tokens) const override {
    const auto n = static_cast<int64_t>(tokens.size());
    if (n < 1 || n > max_pos_)
      return absl::InvalidArgumentError(absl::StrCat("backbone features: ", n, " tokens (1..", max_pos_, ")"));
    DeviceStep step;
    step.token = tokens;
    step.seq.assign(static_cast<size_t>(n), 0);
    step.pos.resize(static_cast<size_t>(n));
    std::iota(step.pos.begin(), step.pos.end(), 0);
    step.logit_rows = step.pos;  // every position's hidden state
    std::vector<int32_t> blocks(static_cast<size_t>((n + kBlockTokens - 1) / kBlockTokens));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::vector<float> h;
    {
      absl::MutexLock lock(&mu_);
      try {
        decoder_->set_blocks(0, blocks.data(), static_cast<int>(blocks.size()));
        h = decoder_->forward_hidden(step);
      } catch (const DeviceError& e) {
        return e.sticky() ? absl::UnavailableError(absl::StrCat("backbone features on ", device_, ": ", e.what()))
                          : absl::InternalError(absl::StrCat("backbone features on ", device_, ": ", e.what()));
      }
    }
    return torch_call([&] {
      at::Tensor t = at::empty({n, dim_}, at::kFloat);
      std::memcpy(t.data_ptr<float>(), h.data(), h.size() * sizeof(float));
      return t;
    });
  }

 private:
  std::unique_ptr<DeviceDecoder> decoder_;  // guarded by mu_ (one stream, one set of step buffers)
  std::string device_;
  int64_t dim_, max_pos_;
  mutable absl::Mutex mu_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const HiddenStateSource>> make_hidden_source(const LoadedModel& model,
                                                                            const ExecutorOptions& opts) {
  if (opts.device.kind == DeviceKind::kCpu) return std::shared_ptr<const HiddenStateSource>();
  const ModelConfig& c = model.config;
  absl::StatusOr<std::shared_ptr<const DeviceWeights>> weights = device_weights_for(model, opts);  // the engine's
  if (!weights.ok()) return weights.status();
  DeviceOptions d;
  d.kv = cuda::KvFormat::kF32;  // the features are the backbone's, whatever format the serving pool uses
  d.cuda_graphs = false;
  absl::StatusOr<std::unique_ptr<DeviceDecoder>> made = make_device_decoder(*std::move(weights), d);
  if (!made.ok()) return made.status();
  std::unique_ptr<DeviceDecoder> decoder = *std::move(made);
  const int max_blocks = static_cast<int>((c.max_pos + kBlockTokens - 1) / kBlockTokens);
  cuda::KvLayout layout;
  layout.format = d.kv;
  layout.n_layer = static_cast<int>(c.n_layer);
  layout.n_head_kv = static_cast<int>(c.n_head_kv);
  layout.head_dim = static_cast<int>(c.head_dim);
  layout.block_tokens = kBlockTokens;
  try {
    decoder->allocate(layout, max_blocks, static_cast<int>(c.max_pos), 1, max_blocks);
  } catch (const DeviceError& e) {
    return absl::ResourceExhaustedError(absl::StrCat("model.device ", opts.device.name(), ": backbone features: ",
                                                     e.what()));
  }
  return std::shared_ptr<const HiddenStateSource>(
      std::make_shared<DeviceHiddenSource>(std::move(decoder), opts.device.name(), c.dim, c.max_pos));
}

}  // namespace frost
