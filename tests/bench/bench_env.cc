#include "tests/bench/bench_env.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvoffload::bench {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t KeyHash(const std::string& key) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

void Emit(const std::string& json) {
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
}

std::string Machine() {
  std::string cpu;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrFormat("{\"host\": \"%s\", \"cpu\": \"%s\", \"cpus\": %d}", host, cpu,
                         static_cast<int>(std::thread::hardware_concurrency()));
}

std::string LoadAvg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat("\"", a, " ", b, " ", c, "\"");
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

void WritePattern(uint8_t* dst, uint64_t n, const std::string& key) {
  const uint64_t h = KeyHash(key);
  for (uint64_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = Mix(h + i);
    std::memcpy(dst + i, &v, 8);
  }
}

uint64_t WrongBytes(const uint8_t* src, uint64_t n, const std::string& key) {
  const uint64_t h = KeyHash(key);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = Mix(h + i);
    if (std::memcmp(src + i, &v, 8) != 0) {
      for (int b = 0; b < 8; ++b) wrong += src[i + b] != reinterpret_cast<const uint8_t*>(&v)[b];
    }
  }
  return wrong;
}

}  // namespace kvoffload::bench
