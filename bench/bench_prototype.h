#pragma once
// `frost-bench prototype ...`: argv as main() received it (argv[1] == "prototype").
namespace frost::bench {
int run_prototype_bench(int argc, char** argv);
}  // namespace frost::bench
