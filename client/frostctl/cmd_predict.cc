// frostctl predict: Prediction.Predict. For each text, "key: value" lines (value, range, the out-of-
// distribution and consistency flags, the artifact that served it), then the table of its top prototypes;
// a blank line between texts. --json prints the PredictResponse as one JSON line instead.
#include <grpcpp/client_context.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"
#include "client/frostctl/format.h"
#include "frost/v1/prediction.grpc.pb.h"

namespace frost::ctl {

namespace {

// Deadline of Predict: a request may hold many texts.
constexpr double kPredictTimeoutS = 60;
// Largest --file read.
constexpr size_t kMaxTextFileBytes = size_t{256} << 20;
// Code points of a prototype's text shown in the table (ellipsis included).
constexpr size_t kPrototypeTextChars = 60;

const char* yes_no(bool b) { return b ? "yes" : "no"; }

void print_result(const std::string& text, const frost::v1::PredictionResult& r,
                  const frost::v1::PredictResponse& response) {
  std::printf("text: %s\n", utf8_truncate(one_line(text), kPrototypeTextChars).c_str());
  std::printf("value: %.6g\n", r.value());
  std::printf("range: [%g, %g]\n", response.label_min(), response.label_max());
  std::printf("out_of_distribution: %s\n", yes_no(r.out_of_distribution()));
  std::printf("population_consistency: %.3f\n", r.population_consistency());
  std::printf("agreement_consistency: %.3f\n", r.agreement_consistency());
  std::printf("restr_fallback: %s\n", yes_no(r.restr_fallback()));
  std::printf("label_reliance: %.4f\n", r.label_reliance());
  std::printf("artifact: %s\n", response.artifact().empty() ? "-" : response.artifact().c_str());
  if (r.prototypes_size() == 0) return;
  std::vector<std::vector<std::string>> rows;
  for (const frost::v1::PrototypeRef& p : r.prototypes()) {
    rows.push_back({absl::StrFormat("%.3f", p.weight()), absl::StrFormat("%g", p.label()),
                    absl::StrCat(p.dataset_index()), utf8_truncate(one_line(p.text()), kPrototypeTextChars)});
  }
  std::fputs(render_table({"WEIGHT", "LABEL", "INDEX", "TEXT"}, rows).c_str(), stdout);
}

}  // namespace

int run_predict(const std::vector<std::string>& args, CommonOptions common) {
  frost::v1::PredictRequest request;
  std::optional<std::string> file;
  bool json = false;
  const cli::Command command = make_command(
      "predict", "[flags] TEXT...\n[flags] --file PATH",
      "Predicts a value per text (Prediction.Predict), with the prototypes that explain it. A TEXT of \"-\" "
      "reads stdin as one text.",
      {string_flag("--file", [&file](const std::string& v) { file = v; })
           .doc("PATH",
                "one text per line (blank lines skipped; \"-\" reads stdin), instead of TEXT arguments"),
       int32_flag("--top-k", [&request](int32_t v) { request.set_top_k(v); })
           .doc("N", "prototypes shown per text (server default 3)"),
       switch_flag("--json", [&json] { json = true; }).doc("print the PredictResponse as a JSON line")},
      &common, "60");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (file && !positional->empty()) {
    return report_usage_error("predict: give the texts either with --file or as arguments, not both",
                              command);
  }
  if (!file && positional->empty()) return report_usage_error("predict: no TEXT given", command);
  int stdin_uses = file == "-" ? 1 : 0;
  for (const std::string& arg : *positional) stdin_uses += arg == "-" ? 1 : 0;
  if (stdin_uses > 1) return report_usage_error("predict: stdin (\"-\") can be read only once", command);
  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);

  std::vector<std::string> texts;
  if (file) {
    absl::StatusOr<std::string> content = read_file(*file, kMaxTextFileBytes);
    if (!content.ok()) {
      return report_input_error(
          absl::InvalidArgumentError(absl::StrCat("--file: ", content.status().message())));
    }
    texts = text_lines(*content);
    if (texts.empty()) {
      return report_input_error(
          absl::InvalidArgumentError(absl::StrCat("--file: \"", *file, "\" holds no text")));
    }
  } else {
    for (const std::string& arg : *positional) texts.push_back(arg == "-" ? read_stdin() : arg);
  }
  // Protobuf refuses to carry non-UTF-8 strings; say which text it is rather than fail in serialization.
  for (size_t i = 0; i < texts.size(); ++i) {
    if (!is_valid_utf8(texts[i])) {
      return report_input_error(absl::InvalidArgumentError(absl::StrCat(
          "predict: text ", i + 1, file ? absl::StrCat(" of \"", *file, "\"") : "", " is not valid UTF-8")));
    }
    request.add_texts(texts[i]);
  }

  std::unique_ptr<frost::v1::Prediction::Stub> stub = frost::v1::Prediction::NewStub(make_channel(common));
  grpc::ClientContext ctx;
  prepare_context(common, kPredictTimeoutS, &ctx);
  frost::v1::PredictResponse response;
  const grpc::Status status = stub->Predict(&ctx, request, &response);
  if (!status.ok()) return report_rpc_error(status);
  if (json) {
    print_json_line(response);
    return kExitOk;
  }
  for (int i = 0; i < response.results_size(); ++i) {
    if (i > 0) std::printf("\n");
    const std::string& text = static_cast<size_t>(i) < texts.size() ? texts[static_cast<size_t>(i)] : "";
    print_result(text, response.results(i), response);
  }
  if (static_cast<size_t>(response.results_size()) != texts.size()) {
    std::fflush(stdout);
    std::fprintf(stderr, "frostctl: %zu texts sent, %d results received\n", texts.size(),
                 response.results_size());
    return kExitRpcError;
  }
  return kExitOk;
}

}  // namespace frost::ctl
