#pragma once
// frostctl's commands. Each takes the arguments after its name and the common options given before it (the
// command's own flags may set them again), and returns the process exit code (common.h). Each prints its
// usage for -h /
// --help.
#include <string>
#include <vector>

#include "client/frostctl/common.h"

namespace frost::ctl {

// generate [flags] PROMPT: streams the completion to stdout, a summary line to stderr.
int run_generate(const std::vector<std::string>& args, CommonOptions common);
// tokenize [--no-bos] TEXT: prints the token ids on one line.
int run_tokenize(const std::vector<std::string>& args, CommonOptions common);
// info: prints the served model's ModelInfo.
int run_info(const std::vector<std::string>& args, CommonOptions common);
// health [--service NAME]: prints the serving status; exit 0 only when SERVING.
int run_health(const std::vector<std::string>& args, CommonOptions common);

// Usage text of each command, ending in a newline.
extern const char kGenerateUsage[];
extern const char kTokenizeUsage[];
extern const char kInfoUsage[];
extern const char kHealthUsage[];

}  // namespace frost::ctl
