#pragma once
// `frost-bench spec ...`: argv as main() received it (argv[1] == "spec").
namespace frost::bench {
int run_spec_bench(int argc, char** argv);
}  // namespace frost::bench
