#include "client/ctl/engines.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ctl/args.h"
#include "client/ctl/text_table.h"
#include "common/bytes.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::client::ctl {

using ::kvoffload::common::FormatBytes;

std::string EnginesText(const v1::ListEnginesResponse& engines) {
  if (engines.engines().empty()) return "no engines\n";
  TextTable table({{"engine", Align::kLeft},
                   {"replicated", Align::kLeft},
                   {"copies"},
                   {"row bytes"},
                   {"rows"},
                   {"region bytes"},
                   {"workers"},
                   {"idle s"}});
  for (const v1::EngineStats& e : engines.engines()) {
    table.AddRow({absl::StrCat(e.engine_id(), "/", e.dp_rank()),
                  e.geometry().replicated() ? "yes" : "no",
                  absl::StrCat(e.geometry().num_copies()), FormatBytes(e.geometry().row_bytes()),
                  absl::StrCat(e.num_rows()), FormatBytes(e.region_bytes()),
                  absl::StrCat(e.workers()),
                  e.workers() > 0 ? "-" : absl::StrFormat("%.0f", e.idle_seconds())});
  }
  return table.Render();
}

std::string EnginesUsage() {
  return "usage: kvoffloadctl [global flags] engines\n"
         "\n"
         "The engines kvoffloadd holds (Admin.ListEngines), one row per engine/dp_rank: layout\n"
         "(replicated, copies, row bytes), rows, region bytes, connected workers, and seconds\n"
         "since the last worker left (\"-\" while one is connected).\n";
}

int RunEngines(const std::vector<std::string>& args, const AdminTarget& target, std::ostream& out,
               std::ostream& err) {
  if (WantsHelp(args)) {
    out << EnginesUsage();
    return kExitOk;
  }
  absl::StatusOr<ParsedArgs> parsed = ParseCommandArgs(args, {}, 0, 0, "");
  if (!parsed.ok()) {
    err << UsageErrorLine("engines", parsed.status().message());
    return kExitUsage;
  }
  v1::ListEnginesResponse engines;
  const int rc = CallDaemon(target, err, [&](const std::shared_ptr<grpc::Channel>& channel,
                                             grpc::ClientContext* context) {
    return v1::Admin::NewStub(channel)->ListEngines(context, v1::Empty(), &engines);
  });
  if (rc != kExitOk) return rc;
  out << EnginesText(engines);
  return kExitOk;
}

}  // namespace kvoffload::client::ctl
