// FuzzInput: turns a fuzzer's byte string into choices (the role of LLVM's FuzzedDataProvider,
// without depending on clang's headers, so the replay build works with gcc). Every byte string
// is a valid sequence of choices; once the bytes run out every choice is its lowest value, so a
// short input is a short, well-formed script.
#ifndef KVOFFLOAD_TESTS_FUZZ_FUZZ_INPUT_H_
#define KVOFFLOAD_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace kvoffload::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }

  // A value in [lo, hi], from as few bytes as the range needs.
  uint64_t Int(uint64_t lo, uint64_t hi) {
    const uint64_t range = hi - lo;
    uint64_t v = 0;
    for (uint64_t r = range; r != 0 && pos_ < size_; r >>= 8) v = (v << 8) | data_[pos_++];
    return range == UINT64_MAX ? v : lo + v % (range + 1);
  }
  bool Bool() { return Int(0, 1) == 1; }
  // Up to `max` bytes, length first.
  std::string Bytes(size_t max) {
    size_t n = Int(0, max);
    if (n > size_ - pos_) n = size_ - pos_;
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  // Mostly small numbers, sometimes any 64-bit value: the edges are where bugs are.
  uint64_t Size(uint64_t small_max) {
    switch (Int(0, 7)) {
      case 0:
        return Int(0, UINT64_MAX);
      case 1:
        return UINT64_MAX - Int(0, 4);
      default:
        return Int(0, small_max);
    }
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace kvoffload::fuzz

#endif  // KVOFFLOAD_TESTS_FUZZ_FUZZ_INPUT_H_
