#include "client/ctl/drop.h"

#include "absl/strings/str_cat.h"
#include "client/ctl/args.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::client::ctl {

std::string DropUsage() {
  return "usage: kvoffloadctl [global flags] drop ENGINE_ID [--dp_rank=N] [--force]\n"
         "\n"
         "Drops one engine replica (Admin.DropEngine): its index and region are freed.\n"
         "\n"
         "  --dp_rank=N   the replica (default 0)\n"
         "  --force       drop even while workers are connected (their sessions are ended);\n"
         "                without it the daemon refuses with FAILED_PRECONDITION\n";
}

int RunDrop(const std::vector<std::string>& args, const AdminTarget& target, std::ostream& out,
            std::ostream& err) {
  if (WantsHelp(args)) {
    out << DropUsage();
    return kExitOk;
  }
  v1::DropEngineRequest request;
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<ParsedArgs> parsed =
        ParseCommandArgs(args, {{"dp_rank", true}, {"force", false}}, 1, 1, "ENGINE_ID");
    if (!parsed.ok()) return parsed.status();
    request.set_engine_id(parsed->positionals[0]);
    if (parsed->Has("dp_rank")) {
      absl::StatusOr<uint32_t> dp_rank = ParseUint32(parsed->flags.at("dp_rank"), "--dp_rank");
      if (!dp_rank.ok()) return dp_rank.status();
      request.set_dp_rank(*dp_rank);
    }
    request.set_force(parsed->Has("force"));
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    err << UsageErrorLine("drop", status.message());
    return kExitUsage;
  }
  const int rc = CallDaemon(target, err, [&](const std::shared_ptr<grpc::Channel>& channel,
                                             grpc::ClientContext* context) {
    v1::Empty response;
    return v1::Admin::NewStub(channel)->DropEngine(context, request, &response);
  });
  if (rc != kExitOk) return rc;
  out << "dropped " << request.engine_id() << "/" << request.dp_rank() << "\n";
  return kExitOk;
}

}  // namespace kvoffload::client::ctl
