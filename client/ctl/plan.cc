// `kvoffloadctl plan`: flag parsing, EngineSpec assembly, and the one-line JSON report.
#include "client/ctl/plan.h"

#include <limits>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "common/status_macros.h"

namespace kvoffload::client::ctl {
namespace {

using ::kvoffload::common::EngineSpec;
using ::kvoffload::common::Geometry;

// What the flags ask for: the spec and the worker to place in it.
struct PlanRequest {
  EngineSpec spec;
  uint32_t mp_rank = 0;
  bool tp_given = false;
};

enum class Kind { kCount, kBytes, kText };

using NumberSetter = void (*)(PlanRequest*, uint64_t);
using TextSetter = absl::Status (*)(PlanRequest*, absl::string_view);

struct FlagDef {
  const char* name;
  Kind kind;
  bool zero_ok;  // for kCount and kBytes
  const char* help;
  NumberSetter set_number;  // kCount (value fits in 32 bits) and kBytes
  TextSetter set_text;      // kText
};

absl::Status SetExecutor(PlanRequest* r, absl::string_view text) {
  absl::StatusOr<common::Executor> e = common::ParseExecutor(text);
  if (!e.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--executor: ", e.status().message()));
  }
  r->spec.executor = *e;
  return absl::OkStatus();
}

absl::Status SetAttention(PlanRequest* r, absl::string_view text) {
  absl::StatusOr<common::Attention> a = common::ParseAttention(text);
  if (!a.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--attention: ", a.status().message()));
  }
  r->spec.attention = *a;
  return absl::OkStatus();
}

// The single list of flags: parsing and --help both read it.
const FlagDef kFlags[] = {
    {"engine_id", Kind::kText, true, "engine id, 1-128 of [A-Za-z0-9._-] (default engine)", nullptr,
     [](PlanRequest* r, absl::string_view v) {
       r->spec.engine_id = std::string(v);
       return absl::OkStatus();
     }},
    {"dp_rank", Kind::kCount, true, "data-parallel rank of the replica (default 0)",
     [](PlanRequest* r, uint64_t v) { r->spec.dp_rank = static_cast<uint32_t>(v); }},
    {"world_size", Kind::kCount, false, "ranks of the replica, all nodes (default 1)",
     [](PlanRequest* r, uint64_t v) { r->spec.world_size = static_cast<uint32_t>(v); }},
    {"local_world_size", Kind::kCount, true,
     "ranks of the replica on this node; 0 or omitted = world_size (ray/external with\n"
     "      world_size > 1 must give it)",
     [](PlanRequest* r, uint64_t v) { r->spec.local_world_size = static_cast<uint32_t>(v); }},
    {"mp_rank", Kind::kCount, true, "model-parallel rank of the worker to place (default 0)",
     [](PlanRequest* r, uint64_t v) { r->mp_rank = static_cast<uint32_t>(v); }},
    {"tp", Kind::kCount, false, "tensor parallel size (default world_size)",
     [](PlanRequest* r, uint64_t v) {
       r->spec.tp = static_cast<uint32_t>(v);
       r->tp_given = true;
     }},
    {"pp", Kind::kCount, false, "pipeline parallel size (default 1; > 1 is rejected)",
     [](PlanRequest* r, uint64_t v) { r->spec.pp = static_cast<uint32_t>(v); }},
    {"pcp", Kind::kCount, false, "prefill context parallel size (default 1; > 1 is rejected)",
     [](PlanRequest* r, uint64_t v) { r->spec.pcp = static_cast<uint32_t>(v); }},
    {"dcp", Kind::kCount, false, "decode context parallel size, divides tp (default 1)",
     [](PlanRequest* r, uint64_t v) { r->spec.dcp = static_cast<uint32_t>(v); }},
    {"executor", Kind::kText, true, "uni|mp|ray|external (default mp)", nullptr, SetExecutor},
    {"attention", Kind::kText, true, "mha|mla (default mha)", nullptr, SetAttention},
    {"num_kv_groups", Kind::kCount, false, "KV cache groups (default 1)",
     [](PlanRequest* r, uint64_t v) { r->spec.num_kv_groups = static_cast<uint32_t>(v); }},
    {"num_layers", Kind::kCount, false, "layers per worker (required)",
     [](PlanRequest* r, uint64_t v) { r->spec.num_layers = static_cast<uint32_t>(v); }},
    {"page_bytes", Kind::kBytes, false, "bytes of one layer's page for one block (required)",
     [](PlanRequest* r, uint64_t v) { r->spec.page_bytes = v; }},
    {"worker_bytes_per_block", Kind::kBytes, true,
     "bytes of one block on one worker; 0 or omitted = page_bytes x num_layers",
     [](PlanRequest* r, uint64_t v) { r->spec.worker_bytes_per_block = v; }},
    {"blocks_per_row", Kind::kCount, false, "GPU blocks per row (default 1)",
     [](PlanRequest* r, uint64_t v) { r->spec.blocks_per_row = static_cast<uint32_t>(v); }},
    {"budget_bytes", Kind::kBytes, false, "host memory for this replica on this node (required)",
     [](PlanRequest* r, uint64_t v) { r->spec.budget_bytes = v; }},
    {"secondary_tiers", Kind::kText, true, "comma-separated tiers beyond CPU memory (default none)",
     nullptr,
     [](PlanRequest* r, absl::string_view v) {
       r->spec.secondary_tiers = common::ParseSecondaryTiers(v);
       return absl::OkStatus();
     }},
};

const FlagDef* FindFlag(absl::string_view name) {
  for (const FlagDef& def : kFlags) {
    if (name == def.name) return &def;
  }
  return nullptr;
}

absl::Status UsageError(absl::string_view message) { return absl::InvalidArgumentError(message); }

// Digits only: no sign, no spaces, no hex. `what` names the value in messages ("--tp");
// `expected` says what was wanted ("a number").
absl::StatusOr<uint64_t> ParseDigits(absl::string_view text, absl::string_view original,
                                     absl::string_view what, absl::string_view expected) {
  if (absl::StartsWith(original, "-")) {
    return UsageError(
        absl::StrCat(what, " must not be negative, got \"", absl::CHexEscape(original), "\""));
  }
  bool digits = !text.empty();
  for (char c : text) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
  if (!digits) {
    return UsageError(
        absl::StrCat(what, " needs ", expected, ", got \"", absl::CHexEscape(original), "\""));
  }
  uint64_t value = 0;
  for (char c : text) {
    const uint64_t digit = c - '0';
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      return UsageError(absl::StrCat(what, " is too large, got \"", original, "\""));
    }
    value = value * 10 + digit;
  }
  return value;
}

absl::StatusOr<uint64_t> ParseBytes(absl::string_view original, absl::string_view what) {
  struct Suffix {
    const char* name;
    int shift;
  };
  constexpr Suffix kSuffixes[] = {{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
  absl::string_view text = original;
  int shift = 0;
  for (const Suffix& s : kSuffixes) {
    if (absl::ConsumeSuffix(&text, s.name)) {
      shift = s.shift;
      break;
    }
  }
  ASSIGN_OR_RETURN(const uint64_t value,
                   ParseDigits(text, original, what,
                               "a byte count (digits with optional KiB, MiB, GiB or TiB)"));
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return UsageError(absl::StrCat(what, " is too large, got \"", original, "\""));
  }
  return value << shift;
}

absl::StatusOr<uint64_t> ParseFlagNumber(const FlagDef& def, absl::string_view text, uint64_t max) {
  const std::string what = absl::StrCat("--", def.name);
  uint64_t value = 0;
  if (def.kind == Kind::kBytes) {
    ASSIGN_OR_RETURN(value, ParseBytes(text, what));
  } else {
    ASSIGN_OR_RETURN(value, ParseDigits(text, text, what, "a non-negative integer"));
  }
  if (value == 0 && !def.zero_ok) {
    return UsageError(absl::StrCat(what, " must be positive, got 0"));
  }
  if (value > max) {
    return UsageError(absl::StrCat(what, " is too large, got ", value, " (max ", max, ")"));
  }
  return value;
}

// Raw flag values by name, after the --flag=value / --flag value split.
using FlagValues = std::map<std::string, std::string>;

absl::StatusOr<FlagValues> SplitFlags(const std::vector<std::string>& args) {
  FlagValues values;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (!absl::ConsumePrefix(&arg, "--") || arg.empty()) {
      return UsageError(absl::StrCat("unexpected argument \"", absl::CHexEscape(args[i]),
                                     "\" (flags are --name=value)"));
    }
    std::string name;
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != absl::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      value = std::string(arg.substr(eq + 1));
    } else {
      name = std::string(arg);
    }
    if (FindFlag(name) == nullptr) {
      return UsageError(absl::StrCat("unknown flag --", absl::CHexEscape(name), " (see --help)"));
    }
    if (eq == absl::string_view::npos) {
      if (i + 1 >= args.size() || absl::StartsWith(args[i + 1], "--")) {
        return UsageError(absl::StrCat("--", name, " needs a value"));
      }
      value = args[++i];
    }
    if (!values.emplace(name, value).second) {
      return UsageError(absl::StrCat("--", name, " is given more than once"));
    }
  }
  return values;
}

absl::StatusOr<PlanRequest> BuildRequest(const FlagValues& values) {
  for (const char* required : {"num_layers", "page_bytes", "budget_bytes"}) {
    if (values.count(required) == 0) {
      return UsageError(absl::StrCat("missing required flag --", required));
    }
  }
  PlanRequest request;
  for (const auto& [name, text] : values) {
    const FlagDef& def = *FindFlag(name);
    if (def.kind == Kind::kText) {
      RETURN_IF_ERROR(def.set_text(&request, text));
      continue;
    }
    const uint64_t max = def.kind == Kind::kBytes ? std::numeric_limits<uint64_t>::max()
                                                  : std::numeric_limits<uint32_t>::max();
    ASSIGN_OR_RETURN(const uint64_t value, ParseFlagNumber(def, text, max));
    def.set_number(&request, value);
  }
  if (!request.tp_given) request.spec.tp = request.spec.world_size;
  return request;
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (u < 0x20) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", u));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string PlanJson(const PlanRequest& request, const Geometry& g, uint32_t slot) {
  const EngineSpec& spec = request.spec;
  auto b = [](bool v) { return v ? "true" : "false"; };
  std::string json = absl::StrCat(
      "{\"engine_key\":", JsonString(spec.Key()), ",\"replicated\":", b(g.replicated),
      ",\"num_copies\":", g.num_copies, ",\"local_world_size\":", g.local_world_size,
      ",\"slot\":", slot, ",\"writer\":", b(common::IsStoreWriter(g, request.mp_rank)),
      ",\"blocks_per_row\":", g.blocks_per_row,
      ",\"worker_bytes_per_block\":", g.worker_bytes_per_block, ",\"slot_bytes\":", g.slot_bytes,
      ",\"row_bytes\":", g.row_bytes, ",\"num_rows\":", g.num_rows,
      ",\"capacity_bytes\":", g.capacity_bytes, ",\"budget_bytes\":", spec.budget_bytes,
      ",\"fingerprint\":", JsonString(g.Fingerprint()));
  std::string why_not;
  if (!common::ReplicatedLayoutEligible(spec, &why_not)) {
    absl::StrAppend(&json, ",\"why_not_replicated\":", JsonString(why_not));
  }
  json.push_back('}');
  return json;
}

}  // namespace

std::string PlanUsage() {
  std::string usage =
      "usage: kvoffloadctl plan --num_layers=N --page_bytes=BYTES --budget_bytes=BYTES "
      "[flags]\n"
      "\n"
      "Prints, as one JSON line, the node-local region geometry the daemon would give this\n"
      "topology and the slot of worker --mp_rank. No daemon is contacted.\n"
      "\n"
      "Flags (--name=value or --name value):\n";
  for (const FlagDef& def : kFlags) {
    absl::StrAppend(&usage, "  --", def.name, "\n      ", def.help, "\n");
  }
  absl::StrAppend(&usage,
                  "  --help, -h\n      this text\n"
                  "\n"
                  "BYTES is a decimal number with an optional binary suffix KiB, MiB, GiB or TiB\n"
                  "(80GiB = 85899345920). Counts are non-negative decimal integers.\n"
                  "\n"
                  "Exit status: 0 on success; 2 on a bad flag (\"kvoffloadctl plan: ...\") or a\n"
                  "topology the daemon rejects (\"rejected: rule <name>: ...\"), one line on "
                  "stderr.\n");
  return usage;
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  return ParseBytes(text, "byte size");
}

int RunPlan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      out << PlanUsage();
      return kPlanOk;
    }
  }
  absl::StatusOr<PlanRequest> request = [&]() -> absl::StatusOr<PlanRequest> {
    ASSIGN_OR_RETURN(FlagValues values, SplitFlags(args));
    return BuildRequest(values);
  }();
  if (!request.ok()) {
    err << "kvoffloadctl plan: " << request.status().message() << "\n";
    return kPlanUsageOrRejected;
  }
  absl::StatusOr<Geometry> geometry = common::ComputeGeometry(request->spec);
  if (!geometry.ok()) {
    err << "rejected: " << geometry.status().message() << "\n";
    return kPlanUsageOrRejected;
  }
  absl::StatusOr<uint32_t> slot = common::SlotOf(request->spec, *geometry, request->mp_rank);
  if (!slot.ok()) {
    err << "rejected: " << slot.status().message() << "\n";
    return kPlanUsageOrRejected;
  }
  out << PlanJson(*request, *geometry, *slot) << "\n";
  return kPlanOk;
}

}  // namespace kvoffload::client::ctl
