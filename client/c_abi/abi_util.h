// Helpers every C ABI entry point shares (client/kvoffload_c.h): the one conversion of an
// absl::Status to (code, message), the exception barrier, and the argument conversions. Private
// to the C ABI's sources.
#ifndef KVOFFLOAD_CLIENT_C_ABI_ABI_UTIL_H_
#define KVOFFLOAD_CLIENT_C_ABI_ABI_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/kvoffload_c.h"
#include "client/kvoffload_client.h"

namespace kvoffload::client::c_abi {

// Writes the message to err (truncated, NUL-terminated), keeps the reason and metadata for this
// thread's kvo_last_error_reason / kvo_last_error_metadata, and returns the code.
int Report(const absl::Status& status, char* err, size_t err_len);
const char* LastErrorReason();
const char* LastErrorMetadata();

// Runs `body` (returning absl::Status) and reports its status; exceptions become statuses.
template <typename Body>
int Guarded(char* err, size_t err_len, Body&& body) {
  try {
    return Report(body(), err, err_len);
  } catch (const std::bad_alloc&) {
    return Report(absl::ResourceExhaustedError("kvoffload: out of memory"), err, err_len);
  } catch (const std::exception& e) {
    return Report(absl::InternalError(absl::StrCat("kvoffload: ", e.what())), err, err_len);
  } catch (...) {
    return Report(absl::InternalError("kvoffload: unknown C++ exception"), err, err_len);
  }
}

void CopyString(absl::string_view from, char* to, size_t capacity);
absl::Status Required(const void* pointer, const char* what);

// An accessor's body: the handle's check, then `out` required, then *out = value().
template <typename T, typename Value>
absl::Status ReadInto(const absl::Status& handle_checked, T* out, const char* what,
                      Value&& value) {
  if (!handle_checked.ok()) return handle_checked;
  if (absl::Status s = Required(out, what); !s.ok()) return s;
  *out = value();
  return absl::OkStatus();
}
// An array of `n` elements may be NULL only when n == 0.
absl::Status ArrayArg(const void* pointer, size_t n, const char* what);
void GeometryToC(const RegionGeometry& g, bool created, kvo_geometry* out);
void FinishedToC(const FinishedJob& job, kvo_finished* out);
// NULL = the defaults; every timeout must be > 0.
absl::StatusOr<ClientOptions> OptionsFromC(const kvo_client_options* c);
absl::StatusOr<std::vector<std::string>> KeysFromC(const uint8_t* const* keys,
                                                   const size_t* key_lens, size_t n);

}  // namespace kvoffload::client::c_abi

#endif  // KVOFFLOAD_CLIENT_C_ABI_ABI_UTIL_H_
