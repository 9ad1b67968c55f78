// Deterministic test data: byte o of generation g is byte (o mod 8) of PatternWord(g, o / 8).
// The same function runs on the GPU (test kernels fill worker buffers) and on the host (expected
// contents), so neither side has to ship bytes to the other. Never zeros.
#ifndef KVOFFLOAD_TESTS_GPU_TEST_PATTERN_H_
#define KVOFFLOAD_TESTS_GPU_TEST_PATTERN_H_

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define KVO_HOST_DEVICE __host__ __device__
#else
#define KVO_HOST_DEVICE
#endif

namespace kvoffload::testing {

// splitmix64 of (generation, word index).
KVO_HOST_DEVICE inline uint64_t PatternWord(uint64_t generation, uint64_t word) {
  uint64_t z = word * 0x9E3779B97F4A7C15ull + generation * 0xD1B54A32D192ED03ull + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Writes bytes [offset, offset + n) of generation g into dst (host).
inline void FillPatternBytes(uint8_t* dst, uint64_t generation, uint64_t offset, uint64_t n) {
  uint64_t o = offset;
  const uint64_t end = offset + n;
  while (o < end && (o & 7) != 0) {
    *dst++ = static_cast<uint8_t>(PatternWord(generation, o >> 3) >> (8 * (o & 7)));
    ++o;
  }
  while (o + 8 <= end) {
    const uint64_t w = PatternWord(generation, o >> 3);
    std::memcpy(dst, &w, 8);  // little-endian host
    dst += 8;
    o += 8;
  }
  while (o < end) {
    *dst++ = static_cast<uint8_t>(PatternWord(generation, o >> 3) >> (8 * (o & 7)));
    ++o;
  }
}

}  // namespace kvoffload::testing

#endif  // KVOFFLOAD_TESTS_GPU_TEST_PATTERN_H_
