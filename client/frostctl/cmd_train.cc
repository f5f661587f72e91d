// frostctl train submit: Training.SubmitJob for a prototype, kv_repair or kvsplice job. Prototype training
// data is either a JSONL file on the server (--data, under its jobs.data_root) or a local JSONL file sent
// inline (--inline-jsonl, checked here first so a bad line is reported as file:line). kv-repair and kvsplice
// calibration text is a JSONL file on the server. Prints the job id (or the Job as a JSON line), then, with
// --watch, follows the job like `jobs watch`.
#include <grpcpp/client_context.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"
#include "client/frostctl/format.h"
#include "frost/v1/training.grpc.pb.h"

namespace frost::ctl {

const char kTrainUsage[] =
    "usage: frostctl train submit prototype (--data PATH | --inline-jsonl FILE) [flags]\n"
    "  --data PATH               training JSONL on the server, under its jobs.data_root\n"
    "  --inline-jsonl FILE       local JSONL file sent with the request, one\n"
    "                            {\"text\": ..., \"label\": ..., \"id\": ...} object per line (id optional)\n"
    "  --test PATH               held-out JSONL on the server (default: --holdout of the training rows)\n"
    "  --holdout F               held-out fraction in [0, 0.5]; 0 = no evaluation (server default 0.1)\n"
    "  --label-min A --label-max B\n"
    "                            label bounds, both or neither (default: meta.json beside --data)\n"
    "  --set KEY=VALUE           prototype config override (repeatable)\n"
    "  --priority N              in [-100, 100]; higher runs first (default 0)\n"
    "  --idempotency-key K       a retried submit with the same key returns the first job\n"
    "  --activate                activate the artifact when the job succeeds\n"
    "  --watch                   then follow the job like `frostctl jobs watch` (exit 4 unless it\n"
    "                            succeeds)\n"
    "  --json                    print the Job as a JSON line instead of its id (with --watch, then\n"
    "                            one JobEvent JSON line per event)\n"
    "  --addr HOST:PORT  --timeout SECONDS (default 60; --watch: none)  --token-file PATH\n"
    "\n"
    "       frostctl train submit kv-repair [--data PATH] [flags]\n"
    "  --data PATH               calibration text on the server: JSONL, one {\"text\": ...} per line\n"
    "                            (alias --calib; optional with --set self_sample_windows=N)\n"
    "  --test PATH               held-out JSONL on the server (default: text sampled from the model)\n"
    "  --calib-windows N --eval-windows N\n"
    "                            windows of `window` tokens to train / evaluate on (default 64 / 16)\n"
    "  --set KEY=VALUE           kv_repair config (repeatable): codec, corruption, layers, option, rank,\n"
    "                            apply_to, steps, batch, lr, window, ... (see frost-bench kv-repair)\n"
    "  --priority --idempotency-key --activate --watch --json, and the connection flags, as above\n"
    "\n"
    "       frostctl train submit kvsplice [--calib PATH] [flags]\n"
    "  --calib PATH              calibration text on the server: JSONL, one {\"text\": ...} per line\n"
    "                            (alias --data; optional with --set self_sample_windows=N)\n"
    "  --test PATH               held-out JSONL on the server (default: text sampled from the model)\n"
    "  --calib-windows N --eval-windows N --fisher-windows N\n"
    "                            windows to calibrate / evaluate / run the Fisher analysis on\n"
    "                            (default 64 / 16 / 16)\n"
    "  --set KEY=VALUE           kvsplice config (repeatable): rank (unset = the Fisher-suggested rank),\n"
    "                            k_rank, v_rank (K or V latent size; unset = rank), latent (fp16 |\n"
    "                            int8), pca_metric (attention | euclidean),\n"
    "                            window, steps, batch, lr, pca_windows, self_sample_windows,\n"
    "                            fisher_threshold, fim_rank, seed\n"
    "  --activate                then Generate serves kv.codec kvsplice with it (frostctl generate\n"
    "                            --kv-codec kvsplice)\n"
    "  --priority --idempotency-key --watch --json, and the connection flags, as above\n";

namespace {

// Deadline of the submit call: it may carry an inline data set.
constexpr double kSubmitTimeoutS = 60;
// Largest --inline-jsonl file read (the server's jobs.max_inline_bytes is usually far smaller).
constexpr size_t kMaxInlineFileBytes = size_t{1} << 30;

struct SubmitOptions {
  frost::v1::SubmitJobRequest request;
  std::optional<std::string> data;          // --data
  std::optional<std::string> inline_jsonl;  // --inline-jsonl
  std::optional<double> label_min, label_max;
  bool watch = false;
  bool json = false;
};

std::vector<Flag> submit_flags(SubmitOptions* o, CommonOptions* common) {
  frost::v1::PrototypeJobSpec* spec = o->request.mutable_prototype();
  std::vector<Flag> flags = common_flags(common);
  std::vector<Flag> own = {
      string_flag("--data", [o](const std::string& v) { o->data = v; }),
      string_flag("--inline-jsonl", [o](const std::string& v) { o->inline_jsonl = v; }),
      string_flag("--test", [spec](const std::string& v) { spec->set_test_path(v); }),
      double_flag("--holdout", [spec](double v) { spec->set_holdout_fraction(v); }),
      double_flag("--label-min", [o](double v) { o->label_min = v; }),
      double_flag("--label-max", [o](double v) { o->label_max = v; }),
      Flag{"--set", true,
           [spec](const std::string& v) {
             absl::StatusOr<std::pair<std::string, std::string>> kv = parse_key_value(v);
             if (!kv.ok()) return absl::InvalidArgumentError(absl::StrCat("--set: ", kv.status().message()));
             if (!spec->mutable_config()->insert({kv->first, kv->second}).second) {
               return absl::InvalidArgumentError(absl::StrCat("--set: key \"", kv->first, "\" given twice"));
             }
             return absl::OkStatus();
           }},
      int32_flag("--priority", [o](int32_t v) { o->request.set_priority(v); }),
      string_flag("--idempotency-key", [o](const std::string& v) { o->request.set_idempotency_key(v); }),
      switch_flag("--activate", [spec] { spec->set_activate(true); }),
      switch_flag("--watch", [o] { o->watch = true; }),
      switch_flag("--json", [o] { o->json = true; }),
  };
  flags.insert(flags.end(), own.begin(), own.end());
  return flags;
}

absl::Status set_config(google::protobuf::Map<std::string, std::string>* m, const std::string& v) {
  absl::StatusOr<std::pair<std::string, std::string>> kv = parse_key_value(v);
  if (!kv.ok()) return absl::InvalidArgumentError(absl::StrCat("--set: ", kv.status().message()));
  if (!m->insert({kv->first, kv->second}).second)
    return absl::InvalidArgumentError(absl::StrCat("--set: key \"", kv->first, "\" given twice"));
  return absl::OkStatus();
}

int submit_and_watch(const frost::v1::SubmitJobRequest& request, bool json, bool watch,
                     CommonOptions common) {
  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);
  const std::shared_ptr<grpc::Channel> channel = make_channel(common);
  std::unique_ptr<frost::v1::Training::Stub> stub = frost::v1::Training::NewStub(channel);
  grpc::ClientContext ctx;
  prepare_context(common, kSubmitTimeoutS, &ctx);
  frost::v1::Job job;
  const grpc::Status status = stub->SubmitJob(&ctx, request, &job);
  if (!status.ok()) return report_rpc_error(status);
  if (json) {
    print_json_line(job);
  } else {
    std::printf("%s\n", job.id().c_str());
    std::fflush(stdout);
  }
  if (!watch) return kExitOk;
  return watch_job(channel, job.id(), common, json);
}

// `train submit kv-repair | kvsplice`: the flags both KV job specs share (calibration and held-out text,
// window counts, --set config, --activate) plus the submit flags, and `extra` for the kind's own; then
// submits (and watches).
template <typename Spec>
int run_submit_kv(const char* kind, frost::v1::SubmitJobRequest& request, Spec* spec,
                  const std::vector<std::string>& args, CommonOptions common,
                  const std::vector<Flag>& extra) {
  bool watch = false, json = false;
  std::vector<Flag> flags = common_flags(&common);
  std::vector<Flag> own = {
      string_flag("--calib", [spec](const std::string& v) { spec->set_calib_path(v); }),
      string_flag("--data", [spec](const std::string& v) { spec->set_calib_path(v); }),
      string_flag("--test", [spec](const std::string& v) { spec->set_test_path(v); }),
      int32_flag("--calib-windows", [spec](int32_t v) { spec->set_calib_windows(v); }),
      int32_flag("--eval-windows", [spec](int32_t v) { spec->set_eval_windows(v); }),
      Flag{"--set", true, [spec](const std::string& v) { return set_config(spec->mutable_config(), v); }},
      int32_flag("--priority", [&request](int32_t v) { request.set_priority(v); }),
      string_flag("--idempotency-key", [&request](const std::string& v) { request.set_idempotency_key(v); }),
      switch_flag("--activate", [spec] { spec->set_activate(true); }),
      switch_flag("--watch", [&watch] { watch = true; }),
      switch_flag("--json", [&json] { json = true; }),
  };
  flags.insert(flags.end(), own.begin(), own.end());
  flags.insert(flags.end(), extra.begin(), extra.end());
  absl::StatusOr<std::vector<std::string>> positional = parse_flags(args, flags);
  if (!positional.ok()) return report_usage_error(positional.status(), kTrainUsage);
  if (!positional->empty()) {
    return report_usage_error(
        absl::StrCat("train submit ", kind, ": unexpected argument \"", positional->front(), "\""),
        kTrainUsage);
  }
  return submit_and_watch(request, json, watch, common);
}

int run_submit_kv_repair(const std::vector<std::string>& args, CommonOptions common) {
  frost::v1::SubmitJobRequest request;
  return run_submit_kv("kv-repair", request, request.mutable_kv_repair(), args, common, {});
}

int run_submit_kvsplice(const std::vector<std::string>& args, CommonOptions common) {
  frost::v1::SubmitJobRequest request;
  frost::v1::KvSpliceJobSpec* spec = request.mutable_kvsplice();
  return run_submit_kv("kvsplice", request, spec, args, common,
                       {int32_flag("--fisher-windows", [spec](int32_t v) { spec->set_fisher_windows(v); })});
}

int run_submit(const std::vector<std::string>& args, CommonOptions common) {
  if (!args.empty() && args.front() == "kv-repair")
    return run_submit_kv_repair(std::vector<std::string>(args.begin() + 1, args.end()), common);
  if (!args.empty() && args.front() == "kvsplice")
    return run_submit_kvsplice(std::vector<std::string>(args.begin() + 1, args.end()), common);
  SubmitOptions o;
  absl::StatusOr<std::vector<std::string>> positional = parse_flags(args, submit_flags(&o, &common));
  if (!positional.ok()) return report_usage_error(positional.status(), kTrainUsage);
  if (positional->empty()) {
    return report_usage_error("train submit: expected the job kind (prototype | kv-repair | kvsplice)",
                              kTrainUsage);
  }
  if (positional->front() != "prototype") {
    return report_usage_error(absl::StrCat("train submit: unknown job kind \"", positional->front(),
                                           "\" (expected prototype | kv-repair | kvsplice)"),
                              kTrainUsage);
  }
  if (positional->size() > 1) {
    return report_usage_error(absl::StrCat("train submit: unexpected argument \"", (*positional)[1], "\""),
                              kTrainUsage);
  }
  if (o.data.has_value() == o.inline_jsonl.has_value()) {
    return report_usage_error(
        "train submit: give the training data with exactly one of --data and --inline-jsonl", kTrainUsage);
  }
  if (o.label_min.has_value() != o.label_max.has_value()) {
    return report_usage_error("train submit: give --label-min and --label-max together", kTrainUsage);
  }
  frost::v1::PrototypeJobSpec* spec = o.request.mutable_prototype();
  std::optional<LabelRange> range;
  if (o.label_min) {
    spec->set_label_min(*o.label_min);
    spec->set_label_max(*o.label_max);
    range = LabelRange{*o.label_min, *o.label_max};
  }

  if (o.data) {
    spec->set_train_path(*o.data);
  } else {
    absl::StatusOr<std::string> content = read_file(*o.inline_jsonl, kMaxInlineFileBytes);
    if (!content.ok()) {
      return report_input_error(
          absl::InvalidArgumentError(absl::StrCat("--inline-jsonl: ", content.status().message())));
    }
    // Rows outside the bounds are only caught here when the bounds are given: otherwise they come from the
    // server (meta.json is beside --data only).
    absl::StatusOr<frost::v1::InlineRows> rows = parse_inline_jsonl(*content, *o.inline_jsonl, range);
    if (!rows.ok()) {
      return report_input_error(
          absl::InvalidArgumentError(absl::StrCat("--inline-jsonl: ", rows.status().message())));
    }
    *spec->mutable_inline_rows() = std::move(*rows);
  }

  return submit_and_watch(o.request, o.json, o.watch, common);
}

}  // namespace

int run_train(const std::vector<std::string>& args, CommonOptions common) {
  int exit_code = kExitOk;
  const std::optional<Subcommand> sub = parse_subcommand(args, "train", kTrainUsage, &common, &exit_code);
  if (!sub) return exit_code;
  if (wants_help(sub->args)) {
    std::fputs(kTrainUsage, stdout);
    return kExitOk;
  }
  if (sub->name == "submit") return run_submit(sub->args, common);
  return report_usage_error(absl::StrCat("train: unknown subcommand \"", sub->name, "\" (expected submit)"),
                            kTrainUsage);
}

}  // namespace frost::ctl
