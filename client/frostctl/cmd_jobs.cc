// frostctl jobs: the Training service's read side and cancel. `list` prints a table (or one JSON line per
// job), `get` one "key: value" line per field, `cancel` the state the job is in afterwards, and `watch`
// follows a job to its end (watch_job, shared with `train submit --watch`).
#include <grpcpp/client_context.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"
#include "client/frostctl/format.h"
#include "frost/v1/training.grpc.pb.h"

namespace frost::ctl {

namespace {

using frost::v1::Job;

// Columns of the terminal on stdout ($COLUMNS, else 80, when it cannot be asked).
int terminal_columns() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  int columns = 0;
  if (const char* env = std::getenv("COLUMNS");
      env != nullptr && absl::SimpleAtoi(env, &columns) && columns > 0) {
    return columns;
  }
  return 80;
}

// One line of a terminal redrawn in place with "\r". Each draw pads with spaces over what the previous
// one left, so no escape sequences are needed.
class LiveLine {
 public:
  void draw(const std::string& text) {
    const size_t width = utf8_length(text);
    std::string out = absl::StrCat("\r", text);
    if (width < width_) out.append(width_ - width, ' ');
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    width_ = width;
    open_ = true;
  }
  // Ends the line (the cursor goes to the next one); a no-op when nothing was drawn since.
  void end() {
    if (!open_) return;
    std::fputc('\n', stdout);
    std::fflush(stdout);
    open_ = false;
    width_ = 0;
  }

 private:
  size_t width_ = 0;
  bool open_ = false;
};

// A job's state and, when there is one, the reason: "FAILED: out of memory".
std::string state_and_reason(const Job& job) {
  std::string s = job_state_name(job.state());
  if (!job.reason().empty()) absl::StrAppend(&s, ": ", job.reason());
  return s;
}

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

// A row of the `jobs list` table.
std::vector<std::string> job_row(const Job& job) {
  const frost::v1::JobProgress& p = job.progress();
  const bool progress = !p.stage().empty() || p.step() > 0 || p.steps_total() > 0;
  std::string step = "-";
  if (progress)
    step = p.steps_total() > 0 ? absl::StrCat(p.step(), "/", p.steps_total()) : absl::StrCat(p.step());
  return {job.id(),
          or_dash(job.kind()),
          job_state_name(job.state()),
          or_dash(p.stage()),
          progress ? absl::StrCat(p.epoch()) : "-",
          step,
          p.step() > 0 ? absl::StrFormat("%.4g", p.loss()) : "-",
          or_dash(job.artifact()),
          format_unix_time(job.created_unix())};
}

// Parses the one ID argument of get / cancel / watch; a usage error otherwise.
std::optional<std::string> one_id(const cli::Command& command, const std::vector<std::string>& positional,
                                  int* exit_code) {
  if (positional.size() == 1 && !positional.front().empty()) return positional.front();
  *exit_code = report_usage_error(absl::StrCat(command.name.substr(sizeof("frostctl")),
                                               ": expected one job ID argument, got ", positional.size()),
                                  command);
  return std::nullopt;
}

// `jobs` before its subcommand: the common flags and the list of subcommands.
cli::Command jobs_command(CommonOptions* common) {
  cli::Command c = make_command("jobs", "[common flags] SUBCOMMAND [flags] ARGS",
                                "Lists, shows, cancels or follows training jobs (the Training service).", {},
                                common, "10; watch: none");
  c.commands = {{"list", "jobs, newest first, as a table"},
                {"get ID", "the job, one \"key: value\" line per field"},
                {"cancel ID", "cancel the job; prints the state it is in afterwards"},
                {"watch ID", "follow the job until it ends"}};
  c.footer =
      "`frostctl jobs SUBCOMMAND --help` lists a subcommand's flags. `watch` exits 0 when the job SUCCEEDED, "
      "4 when it ended FAILED, CANCELLED or INTERRUPTED (the reason on stderr), 2 when the call fails.";
  return c;
}

Flag json_flag(bool* json, const char* what) {
  return switch_flag("--json", [json] { *json = true; }).doc(what);
}

int run_list(const std::vector<std::string>& args, CommonOptions common) {
  frost::v1::ListJobsRequest request;
  bool all = false;
  bool json = false;
  std::vector<Flag> flags;
  flags.push_back(value_flag("--state",
                             [&request](const std::string& v) {
                               for (absl::string_view name : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
                                 absl::StatusOr<frost::v1::JobState> state =
                                     parse_job_state(std::string(absl::StripAsciiWhitespace(name)));
                                 if (!state.ok()) {
                                   return absl::InvalidArgumentError(
                                       absl::StrCat("--state: ", state.status().message()));
                                 }
                                 request.add_states(*state);
                               }
                               return absl::OkStatus();
                             })
                      .doc("S",
                           "only jobs in state S: queued, running, succeeded, failed, cancelled, interrupted "
                           "(any case; repeatable or comma-separated)"));
  flags.push_back(string_flag("--kind", [&request](const std::string& v) {
                    request.set_kind(v);
                  }).doc("K", "only jobs of kind K (prototype, kv_repair, kvsplice)"));
  flags.push_back(int32_flag("--page-size", [&request](int32_t v) {
                    request.set_page_size(v);
                  }).doc("N", "jobs per page (server default)"));
  flags.push_back(string_flag("--page-token", [&request](const std::string& v) {
                    request.set_page_token(v);
                  }).doc("T", "the page to start at (printed when there are more)"));
  flags.push_back(switch_flag("--all", [&all] { all = true; }).doc("follow every page"));
  flags.push_back(json_flag(&json, "print one JSON line per job"));
  const cli::Command command =
      make_command("jobs list", "[flags]",
                   "Jobs, newest first, as a table (ID KIND STATE STAGE EPOCH STEP LOSS ARTIFACT CREATED).",
                   std::move(flags), &common, "10");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (!positional->empty()) {
    return report_usage_error(absl::StrCat("jobs list: unexpected argument \"", positional->front(), "\""),
                              command);
  }
  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);

  std::unique_ptr<frost::v1::Training::Stub> stub = frost::v1::Training::NewStub(make_channel(common));
  std::vector<std::vector<std::string>> rows;
  std::string next_page_token;
  while (true) {
    grpc::ClientContext ctx;  // one deadline per page
    prepare_context(common, kDefaultTimeoutS, &ctx);
    frost::v1::ListJobsResponse response;
    const grpc::Status status = stub->ListJobs(&ctx, request, &response);
    if (!status.ok()) return report_rpc_error(status);
    for (const Job& job : response.jobs()) {
      if (json) {
        print_json_line(job);
      } else {
        rows.push_back(job_row(job));
      }
    }
    next_page_token = response.next_page_token();
    if (!all || next_page_token.empty()) break;
    if (next_page_token == request.page_token()) {
      std::fprintf(stderr, "frostctl: the server returned the same page token twice; stopping\n");
      return kExitRpcError;
    }
    request.set_page_token(next_page_token);
  }
  if (!json) {
    std::fputs(
        render_table({"ID", "KIND", "STATE", "STAGE", "EPOCH", "STEP", "LOSS", "ARTIFACT", "CREATED"}, rows)
            .c_str(),
        stdout);
  }
  if (!all && !next_page_token.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "frostctl: more jobs: --all lists every page, --page-token %s the next one\n",
                 next_page_token.c_str());
  }
  return kExitOk;
}

// `jobs get` without --json.
void print_job(const Job& job) {
  const std::string progress = progress_text(job.progress());
  std::printf("id: %s\n", job.id().c_str());
  std::printf("kind: %s\n", or_dash(job.kind()).c_str());
  std::printf("state: %s\n", job_state_name(job.state()).c_str());
  std::printf("reason: %s\n", or_dash(job.reason()).c_str());
  std::printf("priority: %d\n", job.priority());
  std::printf("idempotency_key: %s\n", or_dash(job.idempotency_key()).c_str());
  std::printf("created: %s\n", format_unix_time(job.created_unix()).c_str());
  std::printf("started: %s\n", format_unix_time(job.started_unix()).c_str());
  std::printf("finished: %s\n", format_unix_time(job.finished_unix()).c_str());
  std::printf("progress: %s\n", or_dash(progress).c_str());
  std::printf("attempts: %d\n", job.attempts());
  std::printf("artifact: %s\n", or_dash(job.artifact()).c_str());
  std::printf("spec: %s\n", or_dash(job.spec_json()).c_str());
  if (job.report_json().empty()) {
    std::printf("report: -\n");
  } else {
    // The pretty-printed JSON, indented under its key.
    std::printf("report:\n");
    for (absl::string_view line : absl::StrSplit(pretty_json(job.report_json()), '\n')) {
      std::printf("  %.*s\n", static_cast<int>(line.size()), line.data());
    }
  }
}

// get and cancel: one unary call answered by a Job.
int run_get_or_cancel(const std::vector<std::string>& args, CommonOptions common, bool cancel) {
  bool json = false;
  const cli::Command command =
      cancel ? make_command(
                   "jobs cancel", "[flags] ID",
                   "Cancels the job and prints the state it is in afterwards (a running job stops at its "
                   "next step).",
                   {json_flag(&json, "print the Job as a JSON line")}, &common, "10")
             : make_command("jobs get", "[flags] ID", "Prints the job, one \"key: value\" line per field.",
                            {json_flag(&json, "print the Job as a JSON line")}, &common, "10");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  const std::optional<std::string> id = one_id(command, *positional, &exit_code);
  if (!id) return exit_code;
  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);

  std::unique_ptr<frost::v1::Training::Stub> stub = frost::v1::Training::NewStub(make_channel(common));
  grpc::ClientContext ctx;
  prepare_context(common, kDefaultTimeoutS, &ctx);
  Job job;
  grpc::Status status;
  if (cancel) {
    frost::v1::CancelJobRequest request;
    request.set_id(*id);
    status = stub->CancelJob(&ctx, request, &job);
  } else {
    frost::v1::GetJobRequest request;
    request.set_id(*id);
    status = stub->GetJob(&ctx, request, &job);
  }
  if (!status.ok()) return report_rpc_error(status);
  if (json) {
    print_json_line(job);
  } else if (cancel) {
    std::printf("%s\n", state_and_reason(job).c_str());
    if (!is_terminal_state(job.state())) {
      std::fflush(stdout);
      std::fprintf(stderr, "frostctl: job %s stops at its next step; `frostctl jobs watch %s` follows it\n",
                   job.id().c_str(), job.id().c_str());
    }
  } else {
    print_job(job);
  }
  return kExitOk;
}

int run_watch(const std::vector<std::string>& args, CommonOptions common) {
  bool json = false;
  const cli::Command command = make_command(
      "jobs watch", "[flags] ID",
      "Follows the job until it ends: a live progress line on a terminal, one line per event otherwise.",
      {json_flag(&json, "one JobEvent JSON line per event")}, &common, "none",
      "Exit 0 when the job SUCCEEDED, 4 when it ended FAILED, CANCELLED or INTERRUPTED (the reason on "
      "stderr), 2 when the call fails.");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  const std::optional<std::string> id = one_id(command, *positional, &exit_code);
  if (!id) return exit_code;
  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);
  return watch_job(make_channel(common), *id, common, json);
}

}  // namespace

int watch_job(const std::shared_ptr<grpc::Channel>& channel, const std::string& id,
              const CommonOptions& common, bool json) {
  std::unique_ptr<frost::v1::Training::Stub> stub = frost::v1::Training::NewStub(channel);
  grpc::ClientContext ctx;
  prepare_context(common, /*default_timeout_s=*/std::nullopt, &ctx);
  frost::v1::WatchJobRequest request;
  request.set_id(id);
  std::unique_ptr<grpc::ClientReader<frost::v1::JobEvent>> reader = stub->WatchJob(&ctx, request);

  const bool live = !json && isatty(STDOUT_FILENO);
  LiveLine line;
  frost::v1::JobEvent event;
  std::optional<Job> last;
  while (reader->Read(&event)) {
    last = event.job();
    const bool done = is_terminal_state(last->state());
    if (json) {
      print_json_line(event);
    } else if (live && !done) {
      // One column short of the width: writing the last column makes some terminals wrap.
      line.draw(render_progress_line(*last, terminal_columns() - 1));
    } else if (live) {
      line.draw(job_event_line(*last));
      line.end();
    } else {
      std::printf("%s\n", job_event_line(*last).c_str());
      std::fflush(stdout);
    }
    if (done) break;
  }
  line.end();
  const bool finished = last && is_terminal_state(last->state());
  // The server ends the stream after the terminal state; do not wait on one that does not.
  if (finished) ctx.TryCancel();
  const grpc::Status status = reader->Finish();
  if (!finished) {
    if (!status.ok()) return report_rpc_error(status);
    std::fprintf(stderr, "frostctl: the watch of job %s ended before the job did\n", id.c_str());
    return kExitRpcError;
  }
  if (last->state() == frost::v1::JOB_STATE_SUCCEEDED) return kExitOk;
  std::fflush(stdout);
  std::fprintf(stderr, "frostctl: job %s %s\n", id.c_str(), state_and_reason(*last).c_str());
  return kExitJobFailed;
}

int run_jobs(const std::vector<std::string>& args, CommonOptions common) {
  int exit_code = kExitOk;
  const cli::Command group = jobs_command(&common);
  const std::optional<Subcommand> sub = parse_subcommand(args, group, &exit_code);
  if (!sub) return exit_code;
  if (sub->name == "list") return run_list(sub->args, common);
  if (sub->name == "get") return run_get_or_cancel(sub->args, common, /*cancel=*/false);
  if (sub->name == "cancel") return run_get_or_cancel(sub->args, common, /*cancel=*/true);
  if (sub->name == "watch") return run_watch(sub->args, common);
  return report_usage_error(absl::StrCat("jobs: unknown subcommand \"", sub->name, "\""), group);
}

}  // namespace frost::ctl
