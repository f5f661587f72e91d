#include "server/metrics_collectors.h"

#include <string>

namespace frost::server {
namespace {

prometheus::MetricFamily gauge_family(const std::string& name, const std::string& help, double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric m;
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
  return f;
}

// One labelled sample: label pairs and a value.
struct Sample {
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

prometheus::MetricFamily labelled_family(const std::string& name, const std::string& help,
                                         prometheus::MetricType type, const std::vector<Sample>& samples) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  for (const Sample& smp : samples) {
    prometheus::ClientMetric m;
    for (const auto& [k, v] : smp.labels) m.label.push_back({k, v});
    if (type == prometheus::MetricType::Counter)
      m.counter.value = smp.value;
    else
      m.gauge.value = smp.value;
    f.metric.push_back(std::move(m));
  }
  return f;
}

prometheus::MetricFamily counter_value(const std::string& name, const std::string& help, double value) {
  return labelled_family(name, help, prometheus::MetricType::Counter, std::vector<Sample>{Sample{{}, value}});
}

// A histogram family from an engine snapshot (cumulative bucket counts, Prometheus semantics).
prometheus::MetricFamily histogram_family(const std::string& name, const std::string& help,
                                          const EngineHistogram& h) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = prometheus::MetricType::Histogram;
  prometheus::ClientMetric m;
  m.histogram.sample_count = h.count;
  m.histogram.sample_sum = h.sum;
  for (size_t i = 0; i < h.bounds.size(); ++i) m.histogram.bucket.push_back({h.counts[i], h.bounds[i]});
  m.histogram.bucket.push_back({h.count, std::numeric_limits<double>::infinity()});
  f.metric.push_back(std::move(m));
  return f;
}

std::vector<Sample> by_codec(const EngineStats& s) {
  std::vector<Sample> out;
  for (const auto& [codec, n] : s.finished_by_codec)
    out.push_back({{{"codec", codec}}, static_cast<double>(n)});
  return out;
}

// Speculative decoding in vLLM's spec_decode form (vllm:spec_decode_num_*_total) with frost's prefix, so the
// dashboards and routers that read vLLM's read these: acceptance rate = accepted / draft tokens, mean
// accepted per draft = accepted / drafts. Always exported (zeros while nothing speculates), like vLLM's.
std::vector<prometheus::MetricFamily> spec_decode_families(const EngineStats& s) {
  std::vector<Sample> per_pos;
  for (size_t i = 0; i < s.spec_accepted_per_pos.size(); ++i)
    per_pos.push_back({{{"position", std::to_string(i)}}, static_cast<double>(s.spec_accepted_per_pos[i])});
  return {
      counter_value("frost_spec_decode_num_drafts_total",
                    "Speculative drafts verified: one sequence's drafted tokens checked in one engine step.",
                    static_cast<double>(s.spec_drafts)),
      counter_value("frost_spec_decode_num_draft_tokens_total",
                    "Tokens drafted and verified (jump-forward tokens included).",
                    static_cast<double>(s.spec_draft_tokens)),
      counter_value("frost_spec_decode_num_accepted_tokens_total",
                    "Drafted tokens accepted by verification (each one saved a step); <= draft tokens.",
                    static_cast<double>(s.spec_accepted_tokens)),
      labelled_family("frost_spec_decode_num_accepted_tokens_per_pos_total",
                      "Drafts whose token at this position (0 = the first drafted) was accepted; sums to the "
                      "accepted tokens, and position i never exceeds position i-1.",
                      prometheus::MetricType::Counter, per_pos),
      counter_value("frost_spec_decode_num_forced_tokens_total",
                    "Drafted tokens forced by a structured-output grammar (jump-forward: exactly one token "
                    "allowed), a subset of the draft tokens.",
                    static_cast<double>(s.spec_forced_tokens)),
  };
}

}  // namespace

std::vector<prometheus::MetricFamily> EngineCollector::Collect() const {
  EngineStats s;
  {
    absl::MutexLock lock(&mu_);
    if (source_) s = source_();
  }
  const ExecutorStats& x = s.executor;
  const std::string dev = x.device.empty() ? "cpu" : x.device;
  std::vector<prometheus::MetricFamily> families = {
      labelled_family(
          "frost_device_memory_bytes",
          "Memory of the device that runs the engine's steps (model.device), by kind: weights (as the device reads "
          "them), kv_pool (the KV block pool), kv_pool_used (blocks held by running sequences), allocated "
          "(everything the engine allocated there) and capacity (the device's memory; 0 on the CPU).",
          prometheus::MetricType::Gauge,
          std::vector<Sample>{
              {{{"device", dev}, {"kind", "weights"}}, static_cast<double>(x.weight_bytes)},
              {{{"device", dev}, {"kind", "kv_pool"}}, static_cast<double>(x.kv_pool_bytes)},
              {{{"device", dev}, {"kind", "kv_pool_used"}}, static_cast<double>(s.kv_bytes_in_use)},
              {{{"device", dev}, {"kind", "allocated"}}, static_cast<double>(x.device_bytes)},
              {{{"device", dev}, {"kind", "capacity"}}, static_cast<double>(x.device_total_bytes)}}),
      labelled_family("frost_device_healthy",
                      "1 while the device runs steps; 0 after a sticky device error (readiness NOT_SERVING).",
                      prometheus::MetricType::Gauge,
                      std::vector<Sample>{Sample{{{"device", dev}}, x.healthy ? 1.0 : 0.0}}),
      labelled_family("frost_device_sampled_rows_total",
                      "Logits rows by where their token was drawn: on the device (its sampler), or on the host "
                      "(penalties, logprobs, or a CPU device).",
                      prometheus::MetricType::Counter,
                      std::vector<Sample>{{{{"where", "device"}}, static_cast<double>(x.rows_sampled_on_device)},
                                          {{{"where", "host"}}, static_cast<double>(x.rows_sampled_on_host)}}),
      gauge_family("frost_device_cuda_graphs", "CUDA graphs captured by the CUDA decoder (bounded shape buckets).",
                   x.graphs),
      // The endpoint picker's model-server protocol (deploy/k8s/README.md, "Behind the gateway"): the picker
      // (llm-d-router's core-metrics-extractor) reads queued requests from frost_requests_waiting, running
      // ones from frost_requests_running, KV utilisation (the fraction 0..1 of the pool's blocks held by
      // running sequences, as vLLM's kv_cache_usage_perc) from frost_kv_cache_usage_ratio and the block size
      // and count from the labels of frost_kv_cache_config_info. Under frost's own names, not vLLM's: the
      // picker maps names per engine (engineConfigs, pods labelled llm-d.ai/engine-type: frost; written in
      // deploy/k8s/overlays/gateway and checked against this endpoint by tests/deploy/k8s_gateway_test.py),
      // so a vllm:* copy would only double the series and make vLLM dashboards and alerts take frost for
      // vLLM, whose vllm: namespace promises far more than these four gauges.
      gauge_family("frost_requests_running", "Generate requests decoding now (engine running slots in use).",
                   s.n_running),
      gauge_family("frost_requests_waiting", "Generate requests admitted and waiting for a running slot.",
                   s.n_waiting),
      gauge_family("frost_engine_max_running",
                   "Running slots (engine.max_running): frost_requests_running / this is slot saturation.",
                   s.max_running),
      gauge_family("frost_engine_max_waiting",
                   "Admission queue length (engine.max_waiting): beyond running + this, Generate is refused "
                   "RESOURCE_EXHAUSTED.",
                   s.max_waiting),
      gauge_family("frost_kv_cache_bytes_in_use", "Bytes of KV cache blocks held by running sequences.",
                   static_cast<double>(s.kv_bytes_in_use)),
      gauge_family("frost_kv_cache_bytes_needed",
                   "Bytes the running sequences' positions occupy without block rounding (in use / needed = "
                   "the paging overhead).",
                   static_cast<double>(s.kv_bytes_needed)),
      gauge_family("frost_kv_cache_usage_ratio",
                   "KV cache blocks held by running sequences / blocks in the pool.",
                   s.kv_blocks_total > 0
                       ? static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total)
                       : 0.0),
      labelled_family("frost_kv_cache_blocks",
                      "KV cache blocks by state: used (held by running sequences), cached (unheld, kept for "
                      "prefix reuse, evicted least recently used first), free.",
                      prometheus::MetricType::Gauge,
                      std::vector<Sample>{{{{"state", "used"}}, static_cast<double>(s.kv_blocks_used)},
                                          {{{"state", "cached"}}, static_cast<double>(s.kv_blocks_cached)},
                                          {{{"state", "free"}}, static_cast<double>(s.kv_blocks_free)}}),
      // An info gauge (value 1) as the picker's cacheInfoSpec reads it: integers in labels. block_size is
      // positions per block with the default codec (compact codecs fit more than engine.kv_block_tokens), the
      // unit the prefix cache reuses; num_blocks the pool's blocks (vLLM says num_gpu_blocks; frost's pool
      // is on the CPU too, so the overlay names this label in cacheNumBlocksLabelName).
      labelled_family("frost_kv_cache_config_info",
                      "The KV block pool's shape (value 1): block_size = positions per block with the "
                      "default codec, num_blocks = blocks in the pool.",
                      prometheus::MetricType::Gauge,
                      std::vector<Sample>{Sample{{{"block_size", std::to_string(s.kv_block_positions)},
                                                  {"num_blocks", std::to_string(s.kv_blocks_total)}},
                                                 1.0}}),
      gauge_family("frost_kv_cache_pool_bytes", "Bytes of the KV block pool (blocks × block bytes).",
                   static_cast<double>(s.kv_pool_bytes)),
      gauge_family("frost_kv_cache_block_bytes", "Bytes of one KV cache block.",
                   static_cast<double>(s.kv_block_bytes)),
      counter_value("frost_prefix_cache_queries_tokens_total",
                    "Tokens looked up in the prefix cache when a sequence was admitted.",
                    static_cast<double>(s.prefix_queries_tokens)),
      counter_value("frost_prefix_cache_hits_tokens_total",
                    "Of those, tokens whose KV blocks were found cached and reused.",
                    static_cast<double>(s.prefix_hits_tokens)),
      counter_value("frost_preemptions_total",
                    "Running sequences preempted because the KV pool ran out of blocks (recomputed later).",
                    static_cast<double>(s.n_preemptions)),
      histogram_family("frost_batch_size", "Sequences per engine step.", s.batch_size),
      labelled_family(
          "frost_engine_step_seconds_total",
          "Engine seconds by phase of a step: draft (speculative decoding's drafters), schedule, forward "
          "(the batched model pass), sample, "
          "emit (stop checks, detokenization, queueing the events) on the engine thread; deliver "
          "(the stream callbacks into gRPC) on the delivery thread, concurrently with the next step.",
          prometheus::MetricType::Counter,
          std::vector<Sample>{{{{"phase", "draft"}}, s.t_draft_s},
                              {{{"phase", "schedule"}}, s.t_schedule_s},
                              {{{"phase", "forward"}}, s.t_forward_s},
                              {{{"phase", "sample"}}, s.t_sample_s},
                              {{{"phase", "emit"}}, s.t_emit_s},
                              {{{"phase", "deliver"}}, s.t_deliver_s}}),
      counter_value("frost_engine_steps_total", "Batched engine steps run.", static_cast<double>(s.n_steps)),
      histogram_family("frost_batch_tokens", "Tokens per engine step (decode rows + prompt chunks).",
                       s.batch_tokens),
      gauge_family("frost_kv_cache_bytes_per_token",
                   "KV cache bytes per token position (all layers) with the "
                   "default codec.",
                   static_cast<double>(s.kv_bytes_per_token)),
      labelled_family("frost_kv_codec_info", "The default KV storage codec (value 1).",
                      prometheus::MetricType::Gauge,
                      std::vector<Sample>{Sample{{{"codec", s.kv_codec}}, 1.0}}),
      labelled_family("frost_kv_sequences_total", "Finished Generate sequences by the KV codec they stored.",
                      prometheus::MetricType::Counter, by_codec(s)),
      labelled_family(
          "frost_kv_repair_active",
          "The KV repair operator applied to new sequences of its codec (value 1; absent = none).",
          prometheus::MetricType::Gauge,
          s.kv_repair_active.empty()
              ? std::vector<Sample>{}
              : std::vector<Sample>{Sample{{{"artifact", s.kv_repair_active}, {"codec", s.kv_repair_codec}},
                                           1.0}}),
      counter_value("frost_kv_repair_sequences_total",
                    "Finished Generate sequences that ran with a KV repair operator.",
                    static_cast<double>(s.n_repaired)),
      labelled_family(
          "frost_kv_splice_active",
          "The KVSplice new kv.codec=kvsplice sequences store their KV with (value 1; absent = none).",
          prometheus::MetricType::Gauge,
          s.kv_splice_active.empty()
              ? std::vector<Sample>{}
              : std::vector<Sample>{Sample{{{"artifact", s.kv_splice_active}, {"rank", s.kv_splice_rank}},
                                           1.0}}),
      counter_value("frost_kv_splice_sequences_total",
                    "Finished Generate sequences that stored their KV with a KVSplice (codec kvsplice).",
                    static_cast<double>(s.n_spliced)),
      labelled_family(
          "frost_constraint_compiles_total",
          "Structured-output constraint compiles by outcome: compiled, refused (syntax, limits, time budget "
          "engine.constraint_compile_timeout_ms; timeout counts the budget's share), cancelled (nobody waited any "
          "more, or shutdown), queue_full (refused at once), cache_hit (answered from the compile cache), shared "
          "(joined a compile of the same constraint under way).",
          prometheus::MetricType::Counter,
          std::vector<Sample>{
              {{{"outcome", "compiled"}}, static_cast<double>(s.constraints.compiles - s.constraints.refused)},
              {{{"outcome", "refused"}}, static_cast<double>(s.constraints.refused)},
              {{{"outcome", "timeout"}}, static_cast<double>(s.constraints.timeouts)},
              {{{"outcome", "cancelled"}}, static_cast<double>(s.constraints.cancelled)},
              {{{"outcome", "queue_full"}}, static_cast<double>(s.constraints.queue_full)},
              {{{"outcome", "cache_hit"}}, static_cast<double>(s.constraints.cache_hits)},
              {{{"outcome", "shared"}}, static_cast<double>(s.constraints.shared)}}),
      counter_value("frost_constraint_compile_seconds_total", "Wall seconds spent in constraint compiles.",
                    s.constraints.compile_seconds),
      labelled_family("frost_constraint_compiles", "Constraint compiles running and waiting for a thread now.",
                      prometheus::MetricType::Gauge,
                      std::vector<Sample>{{{{"state", "running"}}, static_cast<double>(s.constraints.running)},
                                          {{{"state", "queued"}}, static_cast<double>(s.constraints.queued)}}),
      gauge_family("frost_constraint_cache_bytes",
                   "Bytes the constraint compile cache holds (texts, grammars, their cached token masks), bounded "
                   "by engine.constraint_cache_bytes.",
                   static_cast<double>(s.constraints.cache_bytes)),
  };
  for (prometheus::MetricFamily& f : spec_decode_families(s)) families.push_back(std::move(f));
  return families;
}

std::vector<prometheus::MetricFamily> JobsCollector::Collect() const {
  JobsStats s;
  {
    absl::MutexLock lock(&mu_);
    if (!source_) return {};
    s = source_();
  }
  auto labelled = [](const std::string& name, const std::string& help, prometheus::MetricType type,
                     const std::string& label, const std::map<std::string, int64_t>& values) {
    prometheus::MetricFamily f;
    f.name = name;
    f.help = help;
    f.type = type;
    for (const auto& [k, v] : values) {
      prometheus::ClientMetric m;
      m.label.push_back({label, k});
      if (type == prometheus::MetricType::Counter)
        m.counter.value = static_cast<double>(v);
      else
        m.gauge.value = static_cast<double>(v);
      f.metric.push_back(std::move(m));
    }
    return f;
  };
  auto counter = [](const std::string& name, const std::string& help, double v) {
    prometheus::MetricFamily f;
    f.name = name;
    f.help = help;
    f.type = prometheus::MetricType::Counter;
    prometheus::ClientMetric m;
    m.counter.value = v;
    f.metric.push_back(std::move(m));
    return f;
  };
  return {
      labelled("frost_jobs", "Training jobs in the journal by state.", prometheus::MetricType::Gauge, "state",
               s.jobs_by_state),
      gauge_family("frost_jobs_available",
                   "1 when training jobs can be submitted (jobs enabled and jobs.state_dir usable), else 0.",
                   s.jobs_available ? 1 : 0),
      gauge_family("frost_job_running", "1 while a training job runs.", s.job_running ? 1 : 0),
      gauge_family("frost_job_loss", "Last reported training loss of the running job.", s.job_loss),
      gauge_family("frost_job_examples_per_second", "Training throughput of the running job.",
                   s.job_examples_per_s),
      labelled("frost_store_bytes", "Bytes of loaded artifact tensors by device.",
               prometheus::MetricType::Gauge, "device", s.store_bytes),
      counter("frost_artifact_swaps_total", "Artifact activations that swapped a new version in.",
              static_cast<double>(s.artifact_swaps)),
      counter("frost_artifact_swap_failures_total",
              "Artifact activations refused (corrupt, incomplete or mismatched artifact).",
              static_cast<double>(s.artifact_swap_failures)),
  };
}

}  // namespace frost::server
