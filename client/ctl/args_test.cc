// Tests for kvoffloadctl's argument parsing: global flags anywhere, the admin socket's
// precedence (--socket, --runtime_dir, $KVOFFLOAD_ADMIN_SOCKET, default), strict subcommand
// flags, and the exact one-line messages.
#include "client/ctl/args.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvoffload::client::ctl {
namespace {

using Args = std::vector<std::string>;

std::string ErrorOf(const absl::StatusOr<GlobalArgs>& g) {
  EXPECT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

std::string ErrorOf(const absl::StatusOr<ParsedArgs>& p) {
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

TEST(GlobalArgsTest, DefaultsWithCommandOnly) {
  absl::StatusOr<GlobalArgs> g = ParseGlobalArgs({"stats"});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->command, "stats");
  EXPECT_TRUE(g->command_args.empty());
  EXPECT_FALSE(g->socket.has_value());
  EXPECT_FALSE(g->runtime_dir.has_value());
  EXPECT_EQ(g->timeout, absl::Seconds(10));
  EXPECT_FALSE(g->help);
}

TEST(GlobalArgsTest, GlobalFlagsBeforeAndAfterTheCommand) {
  absl::StatusOr<GlobalArgs> g = ParseGlobalArgs(
      {"--runtime_dir", "/run/x", "drop", "llama", "--timeout_s=2.5", "--dp_rank", "3",
       "--socket=/tmp/a.sock", "--force"});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->command, "drop");
  EXPECT_EQ(g->command_args, (Args{"llama", "--dp_rank", "3", "--force"}));
  EXPECT_EQ(*g->runtime_dir, "/run/x");
  EXPECT_EQ(*g->socket, "/tmp/a.sock");
  EXPECT_EQ(g->timeout, absl::Milliseconds(2500));
}

TEST(GlobalArgsTest, HelpBeforeTheCommandIsGlobalAfterItBelongsToTheCommand) {
  absl::StatusOr<GlobalArgs> g = ParseGlobalArgs({"-h"});
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->help);
  EXPECT_EQ(g->command, "");
  g = ParseGlobalArgs({"stats", "--help"});
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->help);
  EXPECT_EQ(g->command_args, (Args{"--help"}));
}

TEST(GlobalArgsTest, Errors) {
  EXPECT_EQ(ErrorOf(ParseGlobalArgs({"--json", "stats"})),
            "unknown global flag --json (see kvoffloadctl --help)");
  EXPECT_EQ(ErrorOf(ParseGlobalArgs({"-v"})),
            "unknown global flag -v (see kvoffloadctl --help)");
  EXPECT_EQ(ErrorOf(ParseGlobalArgs({"stats", "--socket"})), "--socket needs a value");
  EXPECT_EQ(ErrorOf(ParseGlobalArgs({"stats", "--socket", "--json"})), "--socket needs a value");
  EXPECT_EQ(ErrorOf(ParseGlobalArgs({"stats", "--socket="})), "--socket is empty");
  EXPECT_EQ(ErrorOf(ParseGlobalArgs({"--socket=/a", "stats", "--socket=/b"})),
            "--socket is given more than once");
  EXPECT_EQ(ErrorOf(ParseGlobalArgs({"stats", "--runtime_dir=/a", "--runtime_dir=/a"})),
            "--runtime_dir is given more than once");
  EXPECT_EQ(ErrorOf(ParseGlobalArgs({"stats", "--timeout_s=1", "--timeout_s=1"})),
            "--timeout_s is given more than once");
}

TEST(GlobalArgsTest, TimeoutMustBeAPositiveNumberOfSeconds) {
  for (const char* bad : {"abc", "-1", "1e3", "inf", "nan", ".5", "5.", "1.2.3", " 5"}) {
    EXPECT_EQ(ErrorOf(ParseGlobalArgs({"stats", std::string("--timeout_s=") + bad})),
              std::string("--timeout_s needs a number of seconds, got \"") + bad + "\"")
        << bad;
  }
  EXPECT_EQ(ErrorOf(ParseGlobalArgs({"stats", "--timeout_s=0"})),
            "--timeout_s must be > 0 and at most 86400, got 0");
  EXPECT_EQ(ErrorOf(ParseGlobalArgs({"stats", "--timeout_s=86401"})),
            "--timeout_s must be > 0 and at most 86400, got 86401");
  absl::StatusOr<GlobalArgs> g = ParseGlobalArgs({"stats", "--timeout_s", "0.25"});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->timeout, absl::Milliseconds(250));
}

TEST(AdminSocketPathTest, Precedence) {
  GlobalArgs g;
  EXPECT_EQ(AdminSocketPath(g, ""), "/run/kvoffload/admin.sock");
  EXPECT_EQ(AdminSocketPath(g, "/env/admin.sock"), "/env/admin.sock");
  g.runtime_dir = "/tmp/rt";
  EXPECT_EQ(AdminSocketPath(g, "/env/admin.sock"), "/tmp/rt/admin.sock");
  g.socket = "/tmp/explicit.sock";
  EXPECT_EQ(AdminSocketPath(g, "/env/admin.sock"), "/tmp/explicit.sock");
}

TEST(AdminSocketPathTest, RuntimeDirTrailingSlashes) {
  GlobalArgs g;
  g.runtime_dir = "/tmp/rt//";
  EXPECT_EQ(AdminSocketPath(g, ""), "/tmp/rt/admin.sock");
  g.runtime_dir = "/";
  EXPECT_EQ(AdminSocketPath(g, ""), "/admin.sock");
}

TEST(ParseArgsTest, SwitchesValuesAndPositionals) {
  absl::StatusOr<ParsedArgs> p = ParseArgs({"llama", "--dp_rank", "2", "--force"},
                                           {{"dp_rank", true}, {"force", false}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->positionals, (Args{"llama"}));
  EXPECT_EQ(p->flags.at("dp_rank"), "2");
  EXPECT_EQ(p->flags.at("force"), "");
  EXPECT_TRUE(p->Has("force"));
  p = ParseArgs({"--dp_rank=7"}, {{"dp_rank", true}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->flags.at("dp_rank"), "7");
}

TEST(ParseArgsTest, Errors) {
  const std::vector<FlagSpec> specs = {{"dp_rank", true}, {"force", false}};
  EXPECT_EQ(ErrorOf(ParseArgs({"--bogus"}, specs)), "unknown flag --bogus");
  EXPECT_EQ(ErrorOf(ParseArgs({"-f"}, specs)), "unknown flag -f");
  EXPECT_EQ(ErrorOf(ParseArgs({"--force=true"}, specs)), "--force takes no value");
  EXPECT_EQ(ErrorOf(ParseArgs({"--dp_rank"}, specs)), "--dp_rank needs a value");
  EXPECT_EQ(ErrorOf(ParseArgs({"--dp_rank", "--force"}, specs)), "--dp_rank needs a value");
  EXPECT_EQ(ErrorOf(ParseArgs({"--force", "--force"}, specs)), "--force is given more than once");
}

TEST(ParseCommandArgsTest, PositionalCounts) {
  EXPECT_EQ(ErrorOf(ParseCommandArgs({}, {}, 1, 1, "ENGINE_ID")), "missing ENGINE_ID");
  EXPECT_EQ(ErrorOf(ParseCommandArgs({"a", "b"}, {}, 1, 1, "ENGINE_ID")),
            "unexpected argument \"b\"");
  EXPECT_TRUE(ParseCommandArgs({"a"}, {}, 1, 1, "ENGINE_ID").ok());
}

TEST(ParseUint32Test, Range) {
  EXPECT_EQ(*ParseUint32("0", "--dp_rank"), 0u);
  EXPECT_EQ(*ParseUint32("4294967295", "--dp_rank"), 4294967295u);
  for (const char* bad : {"", "-1", "+1", "4294967296", "99999999999", "1x", "0x1"}) {
    absl::StatusOr<uint32_t> v = ParseUint32(bad, "--dp_rank");
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().message(),
              std::string("--dp_rank needs an integer from 0 to 4294967295, got \"") + bad + "\"");
  }
}

TEST(UsageErrorLineTest, Format) {
  EXPECT_EQ(UsageErrorLine("drop", "missing ENGINE_ID"),
            "kvoffloadctl drop: missing ENGINE_ID (see kvoffloadctl drop --help)\n");
}

}  // namespace
}  // namespace kvoffload::client::ctl
