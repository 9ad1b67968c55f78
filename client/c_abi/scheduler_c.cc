// The C ABI's scheduler entry points (kvo_scheduler_*, client/kvoffload_c.h) over
// SchedulerClient.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/c_abi/abi_util.h"
#include "client/c_abi/spec_from_c.h"
#include "client/kvoffload_c.h"
#include "client/kvoffload_client.h"

namespace kvo = kvoffload::client;
using kvoffload::client::c_abi::ArrayArg;
using kvoffload::client::c_abi::GeometryToC;
using kvoffload::client::c_abi::Guarded;
using kvoffload::client::c_abi::KeysFromC;
using kvoffload::client::c_abi::OptionsFromC;
using kvoffload::client::c_abi::ReadInto;
using kvoffload::client::c_abi::Required;

// The opaque handle.
struct kvo_scheduler {
  std::unique_ptr<kvo::SchedulerClient> client;
};

namespace {

absl::Status CheckScheduler(const kvo_scheduler* scheduler) {
  if (scheduler == nullptr || scheduler->client == nullptr) {
    return absl::InvalidArgumentError("scheduler handle is NULL");
  }
  return absl::OkStatus();
}

}  // namespace

extern "C" {

int kvo_scheduler_open(const char* socket_path, const kvo_engine_spec* spec,
                       kvo_scheduler** scheduler_out, kvo_geometry* geometry_out, char* err,
                       size_t err_len) {
  return kvo_scheduler_open_options(socket_path, spec, /*region_epoch=*/0, /*options=*/nullptr,
                                    scheduler_out, geometry_out, err, err_len);
}

int kvo_scheduler_open_epoch(const char* socket_path, const kvo_engine_spec* spec,
                             uint64_t region_epoch, kvo_scheduler** scheduler_out,
                             kvo_geometry* geometry_out, char* err, size_t err_len) {
  return kvo_scheduler_open_options(socket_path, spec, region_epoch, /*options=*/nullptr,
                                    scheduler_out, geometry_out, err, err_len);
}

int kvo_scheduler_open_options(const char* socket_path, const kvo_engine_spec* spec,
                               uint64_t region_epoch, const kvo_client_options* options,
                               kvo_scheduler** scheduler_out, kvo_geometry* geometry_out,
                               char* err, size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = Required(socket_path, "socket_path"); !s.ok()) return s;
    if (absl::Status s = Required(scheduler_out, "scheduler_out"); !s.ok()) return s;
    absl::StatusOr<kvo::EngineSpec> cpp_spec = kvo::SpecFromC(spec);
    if (!cpp_spec.ok()) return cpp_spec.status();
    absl::StatusOr<kvo::ClientOptions> client_options = OptionsFromC(options);
    if (!client_options.ok()) return client_options.status();
    absl::StatusOr<std::unique_ptr<kvo::SchedulerClient>> client =
        kvo::SchedulerClient::Open(socket_path, *cpp_spec, region_epoch, *client_options);
    if (!client.ok()) return client.status();
    auto scheduler = std::make_unique<kvo_scheduler>();
    scheduler->client = std::move(*client);
    if (geometry_out != nullptr) {
      GeometryToC(scheduler->client->geometry(), scheduler->client->created(), geometry_out);
    }
    *scheduler_out = scheduler.release();
    return absl::OkStatus();
  });
}

int kvo_scheduler_region_epoch(const kvo_scheduler* scheduler, uint64_t* epoch_out, char* err,
                               size_t err_len) {
  return Guarded(err, err_len, [&] {
    return ReadInto(CheckScheduler(scheduler), epoch_out, "epoch_out",
                    [&] { return scheduler->client->region_epoch(); });
  });
}

int kvo_scheduler_region_changes(const kvo_scheduler* scheduler, uint64_t* region_changes_out,
                                 uint64_t* reopens_out, char* err, size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (region_changes_out != nullptr) *region_changes_out = scheduler->client->region_changes();
    if (reopens_out != nullptr) *reopens_out = scheduler->client->reopens();
    return absl::OkStatus();
  });
}

int kvo_scheduler_geometry(const kvo_scheduler* scheduler, kvo_geometry* geometry_out, char* err,
                           size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (absl::Status s = Required(geometry_out, "geometry_out"); !s.ok()) return s;
    GeometryToC(scheduler->client->geometry(), scheduler->client->created(), geometry_out);
    return absl::OkStatus();
  });
}

int kvo_scheduler_lookup(kvo_scheduler* scheduler, const uint8_t* const* keys,
                         const size_t* key_lens, size_t n, int32_t* states_out, char* err,
                         size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (absl::Status s = ArrayArg(states_out, n, "states_out"); !s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    absl::StatusOr<std::vector<kvo::KeyState>> states = scheduler->client->Lookup(*k);
    if (!states.ok()) return states.status();
    if (states->size() != n) {
      return absl::InternalError(absl::StrCat("kvoffloadd answered ", states->size(),
                                              " states for ", n, " keys"));
    }
    for (size_t i = 0; i < n; ++i) {
      switch ((*states)[i]) {
        case kvo::KeyState::kMiss: states_out[i] = KVO_KEY_MISS; break;
        case kvo::KeyState::kHit: states_out[i] = KVO_KEY_HIT; break;
        case kvo::KeyState::kHitPending: states_out[i] = KVO_KEY_HIT_PENDING; break;
      }
    }
    return absl::OkStatus();
  });
}

int kvo_scheduler_prepare_store(kvo_scheduler* scheduler, const uint8_t* const* keys,
                                const size_t* key_lens, size_t n, uint8_t* store_mask_out,
                                uint64_t* rows_out, uint8_t* evicted_buf, size_t evicted_buf_len,
                                size_t* evicted_lens_out, size_t* num_evicted_out, char* err,
                                size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (absl::Status s = ArrayArg(store_mask_out, n, "store_mask_out"); !s.ok()) return s;
    if (absl::Status s = ArrayArg(rows_out, n, "rows_out"); !s.ok()) return s;
    if (absl::Status s = Required(num_evicted_out, "num_evicted_out"); !s.ok()) return s;
    // Checked before the index changes: evictions cannot be undone, so they must fit.
    if (evicted_buf != nullptr) {
      if (evicted_buf_len / KVO_MAX_KEY_BYTES < n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "evicted_buf holds ", evicted_buf_len, " bytes; up to ", n,
            " evicted keys of up to KVO_MAX_KEY_BYTES (", KVO_MAX_KEY_BYTES,
            ") need n x KVO_MAX_KEY_BYTES bytes (pass NULL to ignore evicted keys)"));
      }
      if (absl::Status s = ArrayArg(evicted_lens_out, n, "evicted_lens_out"); !s.ok()) return s;
    }
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    absl::StatusOr<kvo::PreparedStore> prepared = scheduler->client->PrepareStore(*k);
    if (!prepared.ok()) return prepared.status();
    // The new keys come back in request order: walk both lists together.
    size_t j = 0;
    for (size_t i = 0; i < n; ++i) {
      if (j < prepared->keys.size() && prepared->keys[j] == (*k)[i]) {
        store_mask_out[i] = 1;
        rows_out[i] = prepared->rows.at(j);
        ++j;
      } else {
        store_mask_out[i] = 0;
        rows_out[i] = KVO_NO_ROW;
      }
    }
    if (j != prepared->keys.size() || prepared->rows.size() != prepared->keys.size()) {
      return absl::InternalError(absl::StrCat(
          "kvoffloadd answered PrepareStore with ", prepared->keys.size(), " keys and ",
          prepared->rows.size(), " rows that do not follow the request's order"));
    }
    const std::vector<std::string>& evicted = prepared->evicted_keys;
    *num_evicted_out = std::min(evicted.size(), n);  // each evicted key made room for a new one
    if (evicted_buf != nullptr) {
      size_t offset = 0;
      for (size_t e = 0; e < evicted.size() && e < n; ++e) {
        const size_t len = std::min(evicted[e].size(), evicted_buf_len - offset);
        std::memcpy(evicted_buf + offset, evicted[e].data(), len);
        evicted_lens_out[e] = len;
        offset += len;
      }
    }
    return absl::OkStatus();
  });
}

int kvo_scheduler_complete_store(kvo_scheduler* scheduler, const uint8_t* const* keys,
                                 const size_t* key_lens, size_t n, int success, char* err,
                                 size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    return scheduler->client->CompleteStore(*k, success != 0);
  });
}

int kvo_scheduler_prepare_load(kvo_scheduler* scheduler, const uint8_t* const* keys,
                               const size_t* key_lens, size_t n, uint64_t* rows_out, char* err,
                               size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (absl::Status s = ArrayArg(rows_out, n, "rows_out"); !s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    absl::StatusOr<std::vector<uint64_t>> rows = scheduler->client->PrepareLoad(*k);
    if (!rows.ok()) return rows.status();
    if (rows->size() != n) {
      return absl::InternalError(
          absl::StrCat("kvoffloadd answered ", rows->size(), " rows for ", n, " keys"));
    }
    std::copy(rows->begin(), rows->end(), rows_out);
    return absl::OkStatus();
  });
}

int kvo_scheduler_complete_load(kvo_scheduler* scheduler, const uint8_t* const* keys,
                                const size_t* key_lens, size_t n, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    return scheduler->client->CompleteLoad(*k);
  });
}

int kvo_scheduler_touch(kvo_scheduler* scheduler, const uint8_t* const* keys,
                        const size_t* key_lens, size_t n, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    return scheduler->client->Touch(*k);
  });
}

int kvo_scheduler_readiness(kvo_scheduler* scheduler, kvo_readiness* readiness_out, char* err,
                            size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (absl::Status s = Required(readiness_out, "readiness_out"); !s.ok()) return s;
    absl::StatusOr<kvo::EngineReadiness> r = scheduler->client->Readiness();
    if (!r.ok()) return r.status();
    *readiness_out = kvo_readiness{r->region_epoch,       r->num_rows,
                                   r->rows_not_ready,     r->region_bytes,
                                   r->region_ready_bytes, r->first_ready_seconds,
                                   r->fully_ready_seconds};
    return absl::OkStatus();
  });
}

int kvo_scheduler_wait_until_ready(kvo_scheduler* scheduler, int64_t timeout_ms, char* err,
                                   size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (timeout_ms < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("timeout_ms is ", timeout_ms, ", want 0 or more"));
    }
    return scheduler->client->WaitUntilReady(absl::Milliseconds(timeout_ms));
  });
}

void kvo_scheduler_close(kvo_scheduler* scheduler) { delete scheduler; }

}  // extern "C"
