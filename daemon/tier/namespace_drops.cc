#include "daemon/tier/namespace_drops.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/errno_status.h"

namespace kvoffload::tier {
namespace {

absl::Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return common::ErrnoStatus(errno, "write " + path);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DropTable> LoadDrops(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return DropTable{};
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const size_t tail = text.rfind("xxh3 ");
  uint64_t want = 0;
  if (tail == std::string::npos ||
      !absl::SimpleAtoi(absl::StripSuffix(text.substr(tail + 5), "\n"), &want) ||
      XXH3_64bits(text.data(), tail) != want) {
    return absl::DataLossError(path + ": checksum missing or wrong");
  }
  DropTable drops;
  for (absl::string_view line : absl::StrSplit(text.substr(0, tail), '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    uint64_t ns = 0, gen = 0;
    if (f.size() != 2 || !absl::SimpleAtoi(f[0], &ns) || !absl::SimpleAtoi(f[1], &gen)) {
      return absl::DataLossError(absl::StrCat(path, ": bad line '", line, "'"));
    }
    drops[ns] = gen;
  }
  return drops;
}

absl::Status SaveDrops(const std::string& path, const DropTable& drops) {
  std::string text;
  for (const auto& [ns, gen] : drops) absl::StrAppend(&text, ns, " ", gen, "\n");
  absl::StrAppend(&text, "xxh3 ", XXH3_64bits(text.data(), text.size()), "\n");
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return common::ErrnoStatus(errno, "open " + tmp);
  absl::Status st = WriteAll(fd, text, tmp);
  if (st.ok() && fdatasync(fd) != 0) st = common::ErrnoStatus(errno, "fdatasync " + tmp);
  close(fd);
  if (!st.ok()) return st;
  if (rename(tmp.c_str(), path.c_str()) != 0) return common::ErrnoStatus(errno, "rename " + tmp);
  const std::string dir = path.substr(0, path.find_last_of('/') + 1);
  const int dfd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return common::ErrnoStatus(errno, "open " + dir);
  const int rc = fsync(dfd);
  const int err = errno;
  close(dfd);
  if (rc != 0) return common::ErrnoStatus(err, "fsync " + dir);
  return absl::OkStatus();
}

bool IsDropped(const DropTable& drops, uint64_t namespace_id, uint64_t generation) {
  auto it = drops.find(namespace_id);
  return it != drops.end() && generation < it->second;
}

}  // namespace kvoffload::tier
