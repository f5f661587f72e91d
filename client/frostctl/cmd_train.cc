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

// The flags of every submit: priority, idempotency key, --watch, --json.
std::vector<Flag> submit_common_flags(frost::v1::SubmitJobRequest* request, bool* watch, bool* json) {
  return {
      int32_flag("--priority", [request](int32_t v) { request->set_priority(v); })
          .doc("N", "in [-100, 100]; higher runs first (default 0)"),
      string_flag("--idempotency-key", [request](const std::string& v) { request->set_idempotency_key(v); })
          .doc("K", "a retried submit with the same key returns the first job"),
      switch_flag("--watch", [watch] { *watch = true; })
          .doc("then follow the job like `frostctl jobs watch` (exit 4 unless it succeeds)"),
      switch_flag("--json", [json] { *json = true; })
          .doc(
              "print the Job as a JSON line instead of its id (with --watch, then one JobEvent JSON line per "
              "event)"),
  };
}

// `train` before its subcommand: the common flags and the job kinds.
cli::Command train_command(CommonOptions* common) {
  cli::Command c = make_command("train", "[common flags] submit KIND [flags]",
                                "Submits a training job (Training.SubmitJob) and prints its id.", {}, common,
                                "60; --watch: none");
  c.commands = {{"submit prototype", "a prototype head on labelled text (--data PATH | --inline-jsonl FILE)"},
                {"submit kv-repair", "a KV repair operator for a codec/corruption, on calibration text"},
                {"submit kvsplice", "a KVSplice low-rank latent KV cache, on calibration text"}};
  c.footer = "`frostctl train submit KIND --help` lists a kind's flags.";
  return c;
}

cli::Command prototype_command(SubmitOptions* o, CommonOptions* common) {
  frost::v1::PrototypeJobSpec* spec = o->request.mutable_prototype();
  std::vector<Flag> own = {
      string_flag("--data", [o](const std::string& v) { o->data = v; })
          .doc("PATH", "training JSONL on the server, under its jobs.data_root"),
      string_flag("--inline-jsonl", [o](const std::string& v) { o->inline_jsonl = v; })
          .doc("FILE",
               "local JSONL file sent with the request, one {\"text\": ..., \"label\": ..., \"id\": ...} "
               "object per line (id optional)"),
      string_flag("--test", [spec](const std::string& v) { spec->set_test_path(v); })
          .doc("PATH", "held-out JSONL on the server (default: --holdout of the training rows)"),
      double_flag("--holdout", [spec](double v) { spec->set_holdout_fraction(v); })
          .doc("F", "held-out fraction in [0, 0.5]; 0 = no evaluation (server default 0.1)"),
      double_flag("--label-min", [o](double v) { o->label_min = v; })
          .doc("A", "lower label bound, with --label-max (default: meta.json beside --data)"),
      double_flag("--label-max", [o](double v) { o->label_max = v; }).doc("B", "upper label bound"),
      value_flag("--set",
                 [spec](const std::string& v) {
                   absl::StatusOr<std::pair<std::string, std::string>> kv = parse_key_value(v);
                   if (!kv.ok())
                     return absl::InvalidArgumentError(absl::StrCat("--set: ", kv.status().message()));
                   if (!spec->mutable_config()->insert({kv->first, kv->second}).second) {
                     return absl::InvalidArgumentError(
                         absl::StrCat("--set: key \"", kv->first, "\" given twice"));
                   }
                   return absl::OkStatus();
                 })
          .doc("KEY=VALUE", "prototype config override (repeatable)"),
      switch_flag("--activate", [spec] { spec->set_activate(true); })
          .doc("activate the artifact when the job succeeds"),
  };
  std::vector<Flag> submit = submit_common_flags(&o->request, &o->watch, &o->json);
  own.insert(own.end(), submit.begin(), submit.end());
  return make_command("train submit prototype", "(--data PATH | --inline-jsonl FILE) [flags]",
                      "Submits a prototype training job and prints its id. (kv-repair and kvsplice jobs: "
                      "`frostctl train submit kv-repair --help`, `... kvsplice --help`.)",
                      std::move(own), common, "60; --watch: none");
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

// What --help says of each KV job kind.
struct KvKindHelp {
  const char* description;
  const char* set_help;
  const char* activate_help;
};

// `train submit kv-repair | kvsplice`: the flags both KV job specs share (calibration and held-out text,
// window counts, --set config, --activate) plus the submit flags, and `extra` for the kind's own; then
// submits (and watches).
template <typename Spec>
int run_submit_kv(const char* kind, const KvKindHelp& help, frost::v1::SubmitJobRequest& request, Spec* spec,
                  const std::vector<std::string>& args, CommonOptions common,
                  const std::vector<Flag>& extra) {
  bool watch = false, json = false;
  std::vector<Flag> own = {
      string_flag("--calib", [spec](const std::string& v) { spec->set_calib_path(v); })
          .doc("PATH",
               "calibration text on the server: JSONL, one {\"text\": ...} per line (alias --data; optional "
               "with --set self_sample_windows=N)"),
      string_flag("--data", [spec](const std::string& v) { spec->set_calib_path(v); })
          .doc("PATH", "alias of --calib"),
      string_flag("--test", [spec](const std::string& v) { spec->set_test_path(v); })
          .doc("PATH", "held-out JSONL on the server (default: text sampled from the model)"),
      int32_flag("--calib-windows", [spec](int32_t v) { spec->set_calib_windows(v); })
          .doc("N", "windows of `window` tokens to train / calibrate on (default 64)"),
      int32_flag("--eval-windows", [spec](int32_t v) { spec->set_eval_windows(v); })
          .doc("N", "windows to evaluate on (default 16)"),
      value_flag("--set", [spec](const std::string& v) { return set_config(spec->mutable_config(), v); })
          .doc("KEY=VALUE", help.set_help),
      switch_flag("--activate", [spec] { spec->set_activate(true); }).doc(help.activate_help),
  };
  own.insert(own.end(), extra.begin(), extra.end());
  std::vector<Flag> submit = submit_common_flags(&request, &watch, &json);
  own.insert(own.end(), submit.begin(), submit.end());
  const cli::Command command = make_command(absl::StrCat("train submit ", kind), "[flags]", help.description,
                                            std::move(own), &common, "60; --watch: none");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (!positional->empty()) {
    return report_usage_error(
        absl::StrCat("train submit ", kind, ": unexpected argument \"", positional->front(), "\""), command);
  }
  return submit_and_watch(request, json, watch, common);
}

int run_submit_kv_repair(const std::vector<std::string>& args, CommonOptions common) {
  frost::v1::SubmitJobRequest request;
  const KvKindHelp help = {
      "Submits a KV repair job: trains a repair operator for a KV codec / corruption on calibration text, "
      "and prints the job id.",
      "kv_repair config (repeatable): codec, corruption, layers, option, rank, apply_to, steps, batch, lr, "
      "window, ... (see frost-bench kv-repair)",
      "activate the operator when the job succeeds"};
  return run_submit_kv("kv-repair", help, request, request.mutable_kv_repair(), args, common, {});
}

int run_submit_kvsplice(const std::vector<std::string>& args, CommonOptions common) {
  frost::v1::SubmitJobRequest request;
  frost::v1::KvSpliceJobSpec* spec = request.mutable_kvsplice();
  const KvKindHelp help = {
      "Submits a KVSplice job: calibrates a learned low-rank latent KV cache on calibration text, and prints "
      "the job id.",
      "kvsplice config (repeatable): rank (unset = the Fisher-suggested rank), k_rank, v_rank (K or V latent "
      "size; unset = rank), latent (fp16 | int8), pca_metric (attention | euclidean), window, steps, batch, "
      "lr, pca_windows, self_sample_windows, fisher_threshold, fim_rank, seed",
      "then Generate serves kv.codec kvsplice with it (frostctl generate --kv-codec kvsplice)"};
  return run_submit_kv("kvsplice", help, request, spec, args, common,
                       {int32_flag("--fisher-windows", [spec](int32_t v) {
                          spec->set_fisher_windows(v);
                        }).doc("N", "windows to run the Fisher analysis on (default 16)")});
}

int run_submit(const std::vector<std::string>& args, CommonOptions common) {
  if (!args.empty() && args.front() == "kv-repair")
    return run_submit_kv_repair(std::vector<std::string>(args.begin() + 1, args.end()), common);
  if (!args.empty() && args.front() == "kvsplice")
    return run_submit_kvsplice(std::vector<std::string>(args.begin() + 1, args.end()), common);
  SubmitOptions o;
  const cli::Command command = prototype_command(&o, &common);
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (positional->empty()) {
    return report_usage_error("train submit: expected the job kind (prototype | kv-repair | kvsplice)",
                              train_command(&common));
  }
  if (positional->front() != "prototype") {
    return report_usage_error(absl::StrCat("train submit: unknown job kind \"", positional->front(),
                                           "\" (expected prototype | kv-repair | kvsplice)"),
                              train_command(&common));
  }
  if (positional->size() > 1) {
    return report_usage_error(absl::StrCat("train submit: unexpected argument \"", (*positional)[1], "\""),
                              command);
  }
  if (o.data.has_value() == o.inline_jsonl.has_value()) {
    return report_usage_error(
        "train submit: give the training data with exactly one of --data and --inline-jsonl", command);
  }
  if (o.label_min.has_value() != o.label_max.has_value()) {
    return report_usage_error("train submit: give --label-min and --label-max together", command);
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
  const cli::Command group = train_command(&common);
  const std::optional<Subcommand> sub = parse_subcommand(args, group, &exit_code);
  if (!sub) return exit_code;
  if (sub->name == "submit") return run_submit(sub->args, common);
  return report_usage_error(absl::StrCat("train: unknown subcommand \"", sub->name, "\" (expected submit)"),
                            group);
}

}  // namespace frost::ctl
