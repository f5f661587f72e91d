// frost-chat-render: frost's side of tests/tokenizers/chat_agreement_test.py, and a way to see what a chat
// template makes of a conversation. Reads JSON Lines, one render each:
//   {"model_dir": DIR | "template": SOURCE, "vars": {messages, add_generation_prompt, tools, bos_token, ...}}
// (model_dir: the template load_chat_template_source finds there; vars: ChatTemplate::render_json's) and
// writes one JSON object per line: {"output": TEXT} or {"error": MESSAGE}.
//
//   frost-chat-render [--now UNIX_SECONDS] IN.jsonl OUT.jsonl
//
// --now pins the instant strftime_now() formats (in local time; set TZ), for comparing with a reference.
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/model/chat_template.h"

namespace {

absl::StatusOr<const frost::ChatTemplate*> template_for(const nlohmann::ordered_json& in,
                                                        std::map<std::string, frost::ChatTemplate>& cache) {
  std::string source;
  if (in.contains("template") && in["template"].is_string()) {
    source = in["template"].get<std::string>();
  } else if (in.contains("model_dir") && in["model_dir"].is_string()) {
    absl::StatusOr<std::optional<std::string>> loaded =
        frost::load_chat_template_source(in["model_dir"].get<std::string>());
    if (!loaded.ok()) return loaded.status();
    if (!loaded->has_value()) return absl::NotFoundError("the model directory has no chat template");
    source = **loaded;
  } else {
    return absl::InvalidArgumentError("expected \"template\" or \"model_dir\"");
  }
  auto it = cache.find(source);
  if (it == cache.end()) {
    absl::StatusOr<frost::ChatTemplate> t = frost::ChatTemplate::parse(source);
    if (!t.ok()) return t.status();
    it = cache.emplace(source, *std::move(t)).first;
  }
  return &it->second;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<int64_t> now;
  int arg = 1;
  if (argc == 5 && std::string(argv[1]) == "--now") {
    now = std::strtoll(argv[2], nullptr, 10);
    arg = 3;
  }
  if (argc - arg != 2) {
    std::cerr << "usage: frost-chat-render [--now UNIX_SECONDS] IN.jsonl OUT.jsonl\n";
    return 2;
  }
  std::ifstream in(argv[arg]);
  std::ofstream out(argv[arg + 1]);
  if (!in || !out) {
    std::cerr << "frost-chat-render: cannot open " << (!in ? argv[arg] : argv[arg + 1]) << "\n";
    return 1;
  }
  std::map<std::string, frost::ChatTemplate> cache;
  std::string line;
  size_t n = 0, failed = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++n;
    nlohmann::ordered_json req;
    try {
      req = nlohmann::ordered_json::parse(line);
    } catch (const std::exception& e) {
      std::cerr << "frost-chat-render: " << argv[arg] << ":" << n << ": not JSON: " << e.what() << "\n";
      return 1;
    }
    nlohmann::ordered_json res;
    absl::StatusOr<const frost::ChatTemplate*> t = template_for(req, cache);
    absl::StatusOr<std::string> text =
        t.ok() ? (*t)->render_json(req.value("vars", nlohmann::ordered_json::object()).dump(), now)
               : absl::StatusOr<std::string>(t.status());
    if (text.ok()) {
      res["output"] = *text;
    } else {
      res["error"] = std::string(text.status().message());
      ++failed;
    }
    out << res.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  }
  std::cerr << "frost-chat-render: " << n << " renders, " << failed << " errors, " << cache.size() << " templates\n";
  return out ? 0 : 1;
}
