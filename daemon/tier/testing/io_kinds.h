// The BlockIo implementations every disk tier test runs on, as a gtest parameter:
//
//   INSTANTIATE_TEST_SUITE_P(Io, MyTest, testing::AllIoKinds(), testing::IoKindTestName);
//
// Pure (no state).
#ifndef KVOFFLOAD_DAEMON_TIER_TESTING_IO_KINDS_H_
#define KVOFFLOAD_DAEMON_TIER_TESTING_IO_KINDS_H_

#include <string>

#include "daemon/tier/block_io_factory.h"
#include "gtest/gtest.h"

namespace kvoffload::tier::testing {

inline auto AllIoKinds() { return ::testing::Values(BlockIoKind::kUring, BlockIoKind::kPosix); }

inline std::string IoKindTestName(const ::testing::TestParamInfo<BlockIoKind>& info) {
  return info.param == BlockIoKind::kUring ? "Uring" : "Pread";
}

}  // namespace kvoffload::tier::testing

#endif  // KVOFFLOAD_DAEMON_TIER_TESTING_IO_KINDS_H_
