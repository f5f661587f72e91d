#pragma once
// `frost-bench kvsplice ...`: argv as main() received it (argv[1] == "kvsplice").
namespace frost::bench {
int run_kvsplice_bench(int argc, char** argv);
}  // namespace frost::bench
