#pragma once
// frostctl's commands. Each takes the arguments after its name and the common options given before it (the
// command's own flags may set them again), and returns the process exit code (common.h). Each prints the
// help generated from its flag table (make_command) for -h / --help. Commands calling services that need the
// admin token (train, jobs, artifacts, server-info) send it like every other call: from --token-file or
// $FROST_TOKEN (common.h).
#include <grpcpp/channel.h>

#include <memory>
#include <string>
#include <vector>

#include "client/frostctl/common.h"

namespace frost::ctl {

// generate [flags] PROMPT: streams the completion to stdout, a summary line to stderr.
int run_generate(const std::vector<std::string>& args, CommonOptions common);
// tokenize [--no-bos] TEXT: prints the token ids on one line.
int run_tokenize(const std::vector<std::string>& args, CommonOptions common);
// embed [--json] TEXT...: Generation.Embed; one line of values per text.
int run_embed(const std::vector<std::string>& args, CommonOptions common);
// info: prints the served model's ModelInfo.
int run_info(const std::vector<std::string>& args, CommonOptions common);
// health [--service NAME]: prints the serving status; exit 0 only when SERVING.
int run_health(const std::vector<std::string>& args, CommonOptions common);
// train submit prototype [flags]: Training.SubmitJob; prints the job id, then follows it with --watch.
int run_train(const std::vector<std::string>& args, CommonOptions common);
// jobs list|get|cancel|watch: Training.ListJobs / GetJob / CancelJob / WatchJob.
int run_jobs(const std::vector<std::string>& args, CommonOptions common);
// artifacts list|activate|delete: Admin.ListArtifacts / ActivateArtifact / DeleteArtifact.
int run_artifacts(const std::vector<std::string>& args, CommonOptions common);
// server-info: prints Admin.GetServerInfo.
int run_server_info(const std::vector<std::string>& args, CommonOptions common);
// predict [--top-k N] TEXT... | --file PATH: Prediction.Predict; value, range, flags, top prototypes per
// text.
int run_predict(const std::vector<std::string>& args, CommonOptions common);

// Follows job `id` with Training.WatchJob until it ends (`jobs watch`, `train submit --watch`): a live
// progress line when stdout is a terminal, one line per event otherwise, one JSON line per JobEvent with
// `json`. No deadline unless common.timeout_s is set. Returns kExitOk when the job SUCCEEDED,
// kExitJobFailed (the reason on stderr) when it ended FAILED, CANCELLED or INTERRUPTED, kExitRpcError when
// the call failed or the stream ended before the job did. common.token must be resolved.
int watch_job(const std::shared_ptr<grpc::Channel>& channel, const std::string& id,
              const CommonOptions& common, bool json);

}  // namespace frost::ctl
