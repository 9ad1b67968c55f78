// What the end-to-end benchmarks (cluster_e2e_bench, tier_e2e_bench) share: their JSON lines
// (Emit, the machine and load-average fields), timing helpers, and the per-key row pattern that
// lets a benchmark check every loaded row's bytes.
#ifndef KVOFFLOAD_TESTS_BENCH_BENCH_ENV_H_
#define KVOFFLOAD_TESTS_BENCH_BENCH_ENV_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace kvoffload::bench {

// Prints one JSON object on a line of stdout and flushes (a run killed later keeps its lines).
void Emit(const std::string& json);

// {"host": ..., "cpu": ... (the first "model name" of /proc/cpuinfo), "cpus": ...} as JSON.
std::string Machine();

// The three load averages of /proc/loadavg as one JSON string: "\"0.52 0.40 0.31\"".
std::string LoadAvg();

// Seconds since `t0`.
double Since(std::chrono::steady_clock::time_point t0);

// The value at quantile `q` (0..1) of `v` (nearest rank, no interpolation); 0 if empty.
double Percentile(std::vector<double> v, double q);

// The row pattern of `key`: n bytes (whole 8-byte words; a tail under 8 bytes is left alone)
// derived from the key alone, so any process can check a row it did not write.
void WritePattern(uint8_t* dst, uint64_t n, const std::string& key);
// Bytes of `src` (n bytes, whole words as above) that differ from `key`'s pattern.
uint64_t WrongBytes(const uint8_t* src, uint64_t n, const std::string& key);

}  // namespace kvoffload::bench

#endif  // KVOFFLOAD_TESTS_BENCH_BENCH_ENV_H_
