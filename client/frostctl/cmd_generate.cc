// frostctl generate: one Generation.Generate call. The completion text goes to stdout as each chunk arrives;
// logprobs (when asked for) and the summary line go to stderr, so stdout holds exactly the completion. With
// --json every response message is one JSON line on stdout instead, and nothing else is printed.
#include <grpcpp/client_context.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"
#include "frost/v1/generation.grpc.pb.h"

namespace frost::ctl {

namespace {

// Parsed command line: the request, filled with only the fields the user gave, and how to print the stream.
struct GenerateOptions {
  frost::v1::GenerateRequest request;
  bool json = false;
  bool print_logprobs = false;
  std::optional<std::string> prompt;  // --prompt
};

cli::Command generate_command(GenerateOptions* o, CommonOptions* common) {
  frost::v1::GenerateRequest* req = &o->request;
  frost::v1::SamplingParams* sp = req->mutable_sampling();
  std::vector<Flag> own = {
      string_flag("--prompt", [o](const std::string& v) { o->prompt = v; }).doc("TEXT", "the prompt"),
      int32_flag("--max-tokens", [sp](int32_t v) { sp->set_max_new_tokens(v); })
          .doc("N", "tokens to generate at most"),
      int32_flag("--max-new-tokens", [sp](int32_t v) { sp->set_max_new_tokens(v); })
          .doc("N", "alias of --max-tokens"),
      float_flag("--temperature", [sp](float v) { sp->set_temperature(v); }).doc("T", "0 = greedy"),
      int32_flag("--top-k", [sp](int32_t v) { sp->set_top_k(v); })
          .doc("K", "sample among the K likeliest tokens"),
      float_flag("--top-p", [sp](float v) { sp->set_top_p(v); })
          .doc("P", "nucleus sampling: the smallest set of probability mass P"),
      float_flag("--min-p", [sp](float v) { sp->set_min_p(v); })
          .doc("P", "drop tokens less likely than P times the likeliest"),
      float_flag("--repetition-penalty", [sp](float v) { sp->set_repetition_penalty(v); })
          .doc("R", "divide the logits of tokens already seen by R (1 = off)"),
      float_flag("--presence-penalty", [sp](float v) { sp->set_presence_penalty(v); })
          .doc("X", "subtract X from the logits of tokens already generated"),
      float_flag("--frequency-penalty", [sp](float v) { sp->set_frequency_penalty(v); })
          .doc("X", "subtract X per earlier occurrence of a generated token"),
      uint64_flag("--seed", [sp](uint64_t v) { sp->set_seed(v); }).doc("S", "same seed, same tokens"),
      string_flag("--stop", [sp](const std::string& v) { sp->add_stop(v); })
          .doc("STR", "stop string (repeatable)"),
      int32_flag("--stop-token-id", [sp](int32_t v) { sp->add_stop_token_ids(v); })
          .doc("ID", "stop token id (repeatable)"),
      switch_flag("--ignore-eos", [sp] { sp->set_ignore_eos(true); }).doc("keep generating after EOS"),
      int32_flag("--logprobs",
                 [sp, o](int32_t v) {
                   sp->set_logprobs(v);
                   o->print_logprobs = true;
                 })
          .doc("N", "per-token logprobs with N alternatives to stderr (0: the sampled token only)"),
      string_flag("--kv-codec", [req](const std::string& v) { req->mutable_kv()->set_codec(v); })
          .doc("CODEC",
               "KV cache storage for this request: fp32|fp16|bf16|int8|int4|kvsplice (kvsplice: the server's "
               "active KVSplice, a learned low-rank latent)"),
      value_flag("--kv-repair",
                 [req](const std::string& v) {
                   if (v == "auto")
                     req->mutable_kv()->set_repair(frost::v1::KV_REPAIR_MODE_AUTO);
                   else if (v == "on")
                     req->mutable_kv()->set_repair(frost::v1::KV_REPAIR_MODE_ON);
                   else if (v == "off")
                     req->mutable_kv()->set_repair(frost::v1::KV_REPAIR_MODE_OFF);
                   else
                     return absl::InvalidArgumentError(
                         absl::StrCat("--kv-repair: \"", v, "\" (expected auto|on|off)"));
                   return absl::OkStatus();
                 })
          .doc("auto|on|off",
               "KV repair for this request (default auto: when the active operator matches the codec)"),
      value_flag("--spec-method",
                 [req](const std::string& v) {
                   // "server" leaves the field unset, as if the flag were not given (the server's default).
                   if (v == "server")
                     req->mutable_speculative()->set_method(frost::v1::SPEC_METHOD_UNSPECIFIED);
                   else if (v == "off")
                     req->mutable_speculative()->set_method(frost::v1::SPEC_METHOD_OFF);
                   else if (v == "ngram")
                     req->mutable_speculative()->set_method(frost::v1::SPEC_METHOD_NGRAM);
                   else if (v == "suffix")
                     req->mutable_speculative()->set_method(frost::v1::SPEC_METHOD_SUFFIX);
                   else
                     return absl::InvalidArgumentError(
                         absl::StrCat("--spec-method: \"", v, "\" (expected server|off|ngram|suffix)"));
                   return absl::OkStatus();
                 })
          .doc("server|off|ngram|suffix",
               "speculative decoding for this request (default server: engine.speculative.method); same "
               "output, only faster"),
      int32_flag("--spec-tokens", [req](int32_t v) { req->mutable_speculative()->set_num_tokens(v); })
          .doc("K",
               "most drafted tokens per step (0: the server's engine.speculative.num_tokens, which caps it)"),
      value_flag("--message",
                 [req](const std::string& v) {
                   const size_t eq = v.find('=');
                   if (eq == std::string::npos || eq == 0)
                     return absl::InvalidArgumentError(
                         absl::StrCat("--message: \"", v, "\" (expected ROLE=CONTENT, e.g. user=Hello)"));
                   frost::v1::ChatMessage* m = req->add_messages();
                   m->set_role(v.substr(0, eq));
                   m->set_content(v.substr(eq + 1));
                   return absl::OkStatus();
                 })
          .doc("ROLE=CONTENT",
               "a chat message (repeatable, in order; instead of a prompt): rendered with the served model's "
               "chat template, as POST /v1/chat/completions"),
      value_flag("--tool",
                 [req](const std::string& v) {
                   // NAME or NAME=PARAMETERS_JSON_SCHEMA
                   const size_t eq = v.find('=');
                   frost::v1::FunctionDefinition* f = req->add_tools()->mutable_function();
                   f->set_name(v.substr(0, eq));
                   if (eq != std::string::npos) f->set_parameters(v.substr(eq + 1));
                   return absl::OkStatus();
                 })
          .doc(
              "NAME[=SCHEMA]",
              "with --message: a function the model may call, its parameters a JSON Schema (repeatable); the "
              "calls parsed from the output are printed to stderr"),
      switch_flag("--no-generation-prompt", [req] { req->set_add_generation_prompt(false); })
          .doc("with --message: continue the last message instead of opening the assistant's turn"),
      switch_flag("--no-bos", [req] { req->set_add_bos(false); }).doc("do not prepend BOS to the prompt"),
      string_flag("--request-id", [req](const std::string& v) { req->set_request_id(v); })
          .doc("ID", "id shown in the server's logs"),
      switch_flag("--json", [o] { o->json = true; })
          .doc("print each response message as a JSON line instead"),
  };
  return make_command(
      "generate", "[flags] --prompt TEXT\n[flags] PROMPT\n[flags] --message ROLE=CONTENT...",
      "Streams a completion to stdout (Generation.Generate); logprobs and the summary line go to "
      "stderr. A PROMPT of \"-\" reads stdin. --message (repeatable) sends a chat instead of a prompt. Unset "
      "sampling flags mean the server's defaults.",
      std::move(own), common, "none");
}

// One stderr line per token: the sampled id and logprob, then the alternatives.
void print_logprobs(const frost::v1::TokenChunk& chunk) {
  for (const frost::v1::TokenLogprobs& lp : chunk.logprobs()) {
    std::string line =
        absl::StrFormat("[logprob] token %d %.4f", lp.sampled().token_id(), lp.sampled().logprob());
    if (lp.top_size() > 0) absl::StrAppend(&line, "  top:");
    for (const frost::v1::TokenLogprob& alt : lp.top()) {
      absl::StrAppendFormat(&line, " %d:%.4f", alt.token_id(), alt.logprob());
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

// "STOP" for FINISH_REASON_STOP etc.
std::string finish_reason_name(frost::v1::FinishReason reason) {
  const std::string& name = frost::v1::FinishReason_Name(reason);
  return name.empty() ? absl::StrCat(static_cast<int>(reason))
                      : std::string(absl::StripPrefix(name, "FINISH_REASON_"));
}

// e.g. "finish=STOP (token:2) prompt_tokens=5 completion_tokens=12 ttft=0.004s decode=612.3 tok/s kv=fp32",
// with " kv_repair=NAME" / " kv_splice=NAME" when the request ran with one, and " spec_accepted=A/D"
// (accepted of drafted tokens) when it speculated.
void print_summary(const frost::v1::Final& final) {
  std::string reason = finish_reason_name(final.finish_reason());
  if (!final.stop_reason().empty()) absl::StrAppend(&reason, " (", final.stop_reason(), ")");
  std::string kv;
  if (!final.kv_codec().empty()) absl::StrAppend(&kv, " kv=", final.kv_codec());
  if (!final.kv_repair().empty()) absl::StrAppend(&kv, " kv_repair=", final.kv_repair());
  if (!final.kv_splice().empty()) absl::StrAppend(&kv, " kv_splice=", final.kv_splice());
  if (final.draft_tokens() > 0)
    absl::StrAppend(&kv, " spec_accepted=", final.accepted_tokens(), "/", final.draft_tokens());
  std::fprintf(stderr,
               "finish=%s prompt_tokens=%d completion_tokens=%d ttft=%.3fs "
               "decode=%.1f tok/s%s\n",
               reason.c_str(), final.prompt_tokens(), final.completion_tokens(),
               final.timings().time_to_first_token_s(), final.timings().decode_tokens_per_s(), kv.c_str());
}

}  // namespace

int run_generate(const std::vector<std::string>& args, CommonOptions common) {
  GenerateOptions o;
  const cli::Command command = generate_command(&o, &common);
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  const bool chat = o.request.messages_size() > 0;
  if (chat && (o.prompt.has_value() || !positional->empty()))
    return report_usage_error("generate: give either --message or a prompt, not both", command);
  if (o.prompt.has_value() && !positional->empty()) {
    return report_usage_error(
        "generate: give the prompt either with --prompt "
        "or as an argument, not both",
        command);
  }
  if (!chat && !o.prompt.has_value() && positional->size() != 1) {
    return report_usage_error(absl::StrCat("generate: expected --prompt TEXT or one PROMPT argument, got ",
                                           positional->size(), " arguments"),
                              command);
  }
  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);
  if (!chat) {
    const std::string prompt = o.prompt.has_value() ? *o.prompt : positional->front();
    o.request.set_text(prompt == "-" ? read_stdin() : prompt);
  }

  std::unique_ptr<frost::v1::Generation::Stub> stub = frost::v1::Generation::NewStub(make_channel(common));
  grpc::ClientContext ctx;
  prepare_context(common, /*default_timeout_s=*/std::nullopt, &ctx);
  std::unique_ptr<grpc::ClientReader<frost::v1::GenerateResponse>> reader = stub->Generate(&ctx, o.request);

  // Stream: text to stdout, flushed per chunk so a terminal shows tokens as they come.
  frost::v1::GenerateResponse response;
  std::optional<frost::v1::Final> final;
  bool line_open = false;  // stdout's last character is not a newline
  while (reader->Read(&response)) {
    if (o.json) print_json_line(response);
    if (response.has_final()) final = response.final();
    if (o.json || !response.has_chunk()) continue;
    const frost::v1::TokenChunk& chunk = response.chunk();
    if (!chunk.text().empty()) {
      std::fwrite(chunk.text().data(), 1, chunk.text().size(), stdout);
      std::fflush(stdout);
      line_open = chunk.text().back() != '\n';
    }
    if (o.print_logprobs) print_logprobs(chunk);
  }
  const grpc::Status status = reader->Finish();
  // On a terminal, end the completion's line so the summary does not run into it; a pipe gets exactly the
  // completion text.
  if (line_open && isatty(STDOUT_FILENO)) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!status.ok()) return report_rpc_error(status);
  if (!final) {
    std::fprintf(stderr, "frostctl: the stream ended without a final message\n");
    return kExitRpcError;
  }
  if (!o.json) {
    for (const frost::v1::ToolCall& c : final->tool_calls())
      std::fprintf(stderr, "tool_call %s %s %s\n", c.id().c_str(), c.function().name().c_str(),
                   c.function().arguments().c_str());
    print_summary(*final);
  }
  return kExitOk;
}

}  // namespace frost::ctl
