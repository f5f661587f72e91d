#pragma once
// `frost-bench kv-repair ...`: argv as main() received it (argv[1] == "kv-repair").
namespace frost::bench {
int run_kv_repair_bench(int argc, char** argv);
}  // namespace frost::bench
