#pragma once
// `frost-bench weights ...`: argv as main() received it (argv[1] == "weights").
namespace frost::bench {
int run_weights_bench(int argc, char** argv);
}  // namespace frost::bench
