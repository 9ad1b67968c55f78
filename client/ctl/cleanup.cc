#include "client/ctl/cleanup.h"

#include "absl/strings/str_cat.h"
#include "client/ctl/args.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::client::ctl {

std::string CleanupText(const v1::CleanupRequest& request, const v1::CleanupResponse& response) {
  std::string text;
  if (!request.reset_engine_id().empty()) {
    absl::StrAppend(&text, "reset ", request.reset_engine_id(), "/", request.reset_dp_rank(), ": ",
                    response.rows_reset(), response.rows_reset() == 1 ? " row" : " rows",
                    " freed\n");
  }
  if (request.drop_idle()) {
    for (const std::string& key : response.dropped()) {
      absl::StrAppend(&text, "dropped idle engine ", key, "\n");
    }
    if (response.dropped().empty()) text += "no idle engines\n";
  }
  return text;
}

std::string CleanupUsage() {
  return "usage: kvoffloadctl [global flags] cleanup [--idle] [--reset=ENGINE_ID "
         "[--dp_rank=N]]\n"
         "\n"
         "Frees memory in kvoffloadd (Admin.Cleanup); give --idle, --reset or both.\n"
         "\n"
         "  --idle              drop every engine that has no connected worker\n"
         "  --reset=ENGINE_ID   empty this engine's cache: every row of its index becomes FREE\n"
         "                      (the region is kept)\n"
         "  --dp_rank=N         the replica to reset (default 0; only with --reset)\n";
}

int RunCleanup(const std::vector<std::string>& args, const AdminTarget& target, std::ostream& out,
               std::ostream& err) {
  if (WantsHelp(args)) {
    out << CleanupUsage();
    return kExitOk;
  }
  v1::CleanupRequest request;
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<ParsedArgs> parsed = ParseCommandArgs(
        args, {{"idle", false}, {"reset", true}, {"dp_rank", true}}, 0, 0, "");
    if (!parsed.ok()) return parsed.status();
    if (!parsed->Has("idle") && !parsed->Has("reset")) {
      return absl::InvalidArgumentError("give --idle, --reset=ENGINE_ID or both");
    }
    if (parsed->Has("dp_rank") && !parsed->Has("reset")) {
      return absl::InvalidArgumentError("--dp_rank needs --reset=ENGINE_ID");
    }
    request.set_drop_idle(parsed->Has("idle"));
    if (parsed->Has("reset")) {
      if (parsed->flags.at("reset").empty()) {
        return absl::InvalidArgumentError("--reset needs an engine id");
      }
      request.set_reset_engine_id(parsed->flags.at("reset"));
    }
    if (parsed->Has("dp_rank")) {
      absl::StatusOr<uint32_t> dp_rank = ParseUint32(parsed->flags.at("dp_rank"), "--dp_rank");
      if (!dp_rank.ok()) return dp_rank.status();
      request.set_reset_dp_rank(*dp_rank);
    }
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    err << UsageErrorLine("cleanup", status.message());
    return kExitUsage;
  }
  v1::CleanupResponse response;
  const int rc = CallDaemon(target, err, [&](const std::shared_ptr<grpc::Channel>& channel,
                                             grpc::ClientContext* context) {
    return v1::Admin::NewStub(channel)->Cleanup(context, request, &response);
  });
  if (rc != kExitOk) return rc;
  out << CleanupText(request, response);
  return kExitOk;
}

}  // namespace kvoffload::client::ctl
