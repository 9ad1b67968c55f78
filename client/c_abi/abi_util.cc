#include "client/c_abi/abi_util.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error_info.h"

namespace kvoffload::client::c_abi {

namespace {

// The last reported error of this thread (kvo_last_error_reason, kvo_last_error_metadata).
thread_local std::string last_reason;
thread_local std::string last_metadata;

}  // namespace

int Report(const absl::Status& status, char* err, size_t err_len) {
  const common::ErrorInfo info = common::ErrorInfoOf(status);
  last_reason = info.reason;
  last_metadata = common::MetadataText(info);
  if (err != nullptr && err_len > 0) {
    const absl::string_view message = status.message();
    const size_t n = std::min(message.size(), err_len - 1);
    std::memcpy(err, message.data(), n);
    err[n] = '\0';
  }
  return static_cast<int>(status.code());
}

void CopyString(absl::string_view from, char* to, size_t capacity) {
  const size_t n = std::min(from.size(), capacity - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

absl::Status Required(const void* pointer, const char* what) {
  if (pointer == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
  return absl::OkStatus();
}

// An array of `n` elements may be NULL only when n == 0.
absl::Status ArrayArg(const void* pointer, size_t n, const char* what) {
  if (pointer == nullptr && n > 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is NULL but its length is ", n));
  }
  return absl::OkStatus();
}

void GeometryToC(const RegionGeometry& g, bool created, kvo_geometry* out) {
  std::memset(out, 0, sizeof(*out));
  out->replicated = g.replicated ? 1 : 0;
  out->num_copies = g.num_copies;
  out->blocks_per_row = g.blocks_per_row;
  out->created = created ? 1 : 0;
  out->worker_bytes_per_block = g.worker_bytes_per_block;
  out->slot_bytes = g.slot_bytes;
  out->row_bytes = g.row_bytes;
  out->num_rows = g.num_rows;
  out->capacity_bytes = g.capacity_bytes;
  CopyString(g.fingerprint, out->fingerprint, sizeof(out->fingerprint));
}

void FinishedToC(const FinishedJob& job, kvo_finished* out) {
  std::memset(out, 0, sizeof(*out));
  out->job_id = job.job_id;
  out->code = static_cast<int32_t>(job.status.code());
  out->bytes = job.bytes;
  CopyString(job.status.message(), out->message, sizeof(out->message));
  CopyString(common::ErrorReason(job.status), out->reason, sizeof(out->reason));
}

const char* LastErrorReason() { return last_reason.c_str(); }
const char* LastErrorMetadata() { return last_metadata.c_str(); }

// NULL = the defaults; every timeout must be > 0.
absl::StatusOr<ClientOptions> OptionsFromC(const kvo_client_options* c) {
  ClientOptions options;
  if (c == nullptr) return options;
  if (c->open_timeout_ms <= 0 || c->call_timeout_ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "client options: open_timeout_ms (", c->open_timeout_ms, ") and call_timeout_ms (",
        c->call_timeout_ms, ") must be > 0; kvo_client_options_init sets the defaults"));
  }
  options.open_timeout = absl::Milliseconds(c->open_timeout_ms);
  options.call_timeout = absl::Milliseconds(c->call_timeout_ms);
  options.reopen = c->reconnect != 0;
  return options;
}

absl::StatusOr<std::vector<std::string>> KeysFromC(const uint8_t* const* keys,
                                                   const size_t* key_lens, size_t n) {
  if (n > 0 && (keys == nullptr || key_lens == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("keys or key_lens is NULL for ", n, " keys"));
  }
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] == nullptr && key_lens[i] > 0) {
      return absl::InvalidArgumentError(absl::StrCat("key #", i, " is NULL"));
    }
    out.emplace_back(reinterpret_cast<const char*>(keys[i]), key_lens[i]);
  }
  return out;
}

}  // namespace kvoffload::client::c_abi
