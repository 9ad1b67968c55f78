#include "common/thread_name.h"

#include <thread>

#include "gtest/gtest.h"

namespace kvoffload::common {
namespace {

TEST(ThreadNameTest, NamesTheCallingThreadOnly) {
  const std::string before = ThreadName();
  std::string inside;
  std::thread t([&] {
    SetThreadName("kvo-test");
    inside = ThreadName();
  });
  t.join();
  EXPECT_EQ(inside, "kvo-test");
  EXPECT_EQ(ThreadName(), before);
}

TEST(ThreadNameTest, CutsLongNamesAtTheKernelsLimit) {
  std::string inside;
  std::thread t([&] {
    SetThreadName("kvo-a-name-longer-than-fifteen");
    inside = ThreadName();
  });
  t.join();
  EXPECT_EQ(inside, "kvo-a-name-long");
  EXPECT_EQ(inside.size(), kMaxThreadNameBytes);
}

}  // namespace
}  // namespace kvoffload::common
