#include "client/ctl/args.h"

#include <cstdlib>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvoffload::client::ctl {
namespace {

absl::Status UsageError(absl::string_view message) { return absl::InvalidArgumentError(message); }

// "--name=value" → {name, value}; "--name" → {name, nullopt}. False when `arg` is not a flag.
bool SplitFlag(absl::string_view arg, std::string* name, std::optional<std::string>* value) {
  if (!absl::ConsumePrefix(&arg, "--") || arg.empty()) return false;
  const size_t eq = arg.find('=');
  if (eq == absl::string_view::npos) {
    *name = std::string(arg);
    value->reset();
  } else {
    *name = std::string(arg.substr(0, eq));
    *value = std::string(arg.substr(eq + 1));
  }
  return true;
}

// The value of flag `name` at args[*i]: its "=value", or the next argument (consumed).
absl::StatusOr<std::string> FlagValue(const std::vector<std::string>& args, size_t* i,
                                      const std::string& name,
                                      const std::optional<std::string>& inline_value) {
  if (inline_value.has_value()) return *inline_value;
  if (*i + 1 >= args.size() || absl::StartsWith(args[*i + 1], "-")) {
    return UsageError(absl::StrCat("--", name, " needs a value"));
  }
  return args[++*i];
}

absl::StatusOr<absl::Duration> ParseTimeout(absl::string_view text) {
  // Digits with an optional fraction: no sign, exponent, spaces, "inf" or "nan".
  bool ok = !text.empty() && text.front() != '.' && text.back() != '.';
  int dots = 0;
  for (char c : text) {
    if (c == '.') {
      ++dots;
    } else if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      ok = false;
    }
  }
  double seconds = 0;
  if (!ok || dots > 1 || !absl::SimpleAtod(text, &seconds)) {
    return UsageError(absl::StrCat("--timeout_s needs a number of seconds, got \"",
                                   absl::CHexEscape(text), "\""));
  }
  if (seconds <= 0 || seconds > 86400) {
    return UsageError(
        absl::StrCat("--timeout_s must be > 0 and at most 86400, got ", text));
  }
  return absl::Seconds(seconds);
}

bool IsGlobalFlag(absl::string_view name) {
  return name == "runtime_dir" || name == "socket" || name == "timeout_s";
}

}  // namespace

absl::StatusOr<GlobalArgs> ParseGlobalArgs(const std::vector<std::string>& args) {
  GlobalArgs global;
  bool timeout_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::string name;
    std::optional<std::string> inline_value;
    const bool is_flag = SplitFlag(arg, &name, &inline_value);
    if (is_flag && IsGlobalFlag(name)) {
      absl::StatusOr<std::string> value = FlagValue(args, &i, name, inline_value);
      if (!value.ok()) return value.status();
      if (value->empty()) return UsageError(absl::StrCat("--", name, " is empty"));
      if (name == "timeout_s") {
        if (timeout_given) return UsageError("--timeout_s is given more than once");
        timeout_given = true;
        absl::StatusOr<absl::Duration> timeout = ParseTimeout(*value);
        if (!timeout.ok()) return timeout.status();
        global.timeout = *timeout;
        continue;
      }
      std::optional<std::string>& slot = name == "socket" ? global.socket : global.runtime_dir;
      if (slot.has_value()) return UsageError(absl::StrCat("--", name, " is given more than once"));
      slot = *value;
      continue;
    }
    if (!global.command.empty()) {
      global.command_args.push_back(arg);
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      global.help = true;
    } else if (absl::StartsWith(arg, "-")) {
      return UsageError(absl::StrCat("unknown global flag ", absl::CHexEscape(arg),
                                     " (see kvoffloadctl --help)"));
    } else {
      global.command = arg;
    }
  }
  return global;
}

std::string AdminSocketPath(const GlobalArgs& args, absl::string_view env_socket) {
  if (args.socket.has_value()) return *args.socket;
  if (args.runtime_dir.has_value()) {
    absl::string_view dir = *args.runtime_dir;
    while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
    return absl::StrCat(dir, dir == "/" ? "" : "/", kAdminSocketName);
  }
  if (!env_socket.empty()) return std::string(env_socket);
  return absl::StrCat(kDefaultRuntimeDir, "/", kAdminSocketName);
}

absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs) {
  ParsedArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::string name;
    std::optional<std::string> inline_value;
    if (!SplitFlag(arg, &name, &inline_value)) {
      if (absl::StartsWith(arg, "-")) {
        return UsageError(absl::StrCat("unknown flag ", absl::CHexEscape(arg)));
      }
      parsed.positionals.push_back(arg);
      continue;
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) return UsageError(absl::StrCat("unknown flag --", absl::CHexEscape(name)));
    std::string value;
    if (spec->takes_value) {
      absl::StatusOr<std::string> v = FlagValue(args, &i, name, inline_value);
      if (!v.ok()) return v.status();
      value = *std::move(v);
    } else if (inline_value.has_value()) {
      return UsageError(absl::StrCat("--", name, " takes no value"));
    }
    if (!parsed.flags.emplace(name, value).second) {
      return UsageError(absl::StrCat("--", name, " is given more than once"));
    }
  }
  return parsed;
}

absl::StatusOr<uint32_t> ParseUint32(absl::string_view text, absl::string_view what) {
  bool digits = !text.empty() && text.size() <= 10;
  for (char c : text) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
  uint64_t value = 0;
  if (digits) {
    for (char c : text) value = value * 10 + (c - '0');
  }
  if (!digits || value > std::numeric_limits<uint32_t>::max()) {
    return UsageError(absl::StrCat(what, " needs an integer from 0 to 4294967295, got \"",
                                   absl::CHexEscape(text), "\""));
  }
  return static_cast<uint32_t>(value);
}

std::string UsageErrorLine(absl::string_view command, absl::string_view message) {
  return absl::StrCat("kvoffloadctl ", command, ": ", message, " (see kvoffloadctl ", command,
                      " --help)\n");
}

absl::StatusOr<ParsedArgs> ParseCommandArgs(const std::vector<std::string>& args,
                                            const std::vector<FlagSpec>& specs,
                                            size_t min_positionals, size_t max_positionals,
                                            absl::string_view positional_name) {
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(args, specs);
  if (!parsed.ok()) return parsed;
  if (parsed->positionals.size() > max_positionals) {
    return UsageError(absl::StrCat("unexpected argument \"",
                                   absl::CHexEscape(parsed->positionals[max_positionals]), "\""));
  }
  if (parsed->positionals.size() < min_positionals) {
    return UsageError(absl::StrCat("missing ", positional_name));
  }
  return parsed;
}

bool WantsHelp(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

}  // namespace kvoffload::client::ctl
