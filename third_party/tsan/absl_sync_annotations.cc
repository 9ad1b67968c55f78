// Linked into every binary of the TSan build only (--config=tsan; see //third_party:absl).
//
// Why: Debian's Abseil is not built with -fsanitize=thread, and absl::Mutex, CondVar and
// Notification order threads with atomics inside libabsl_synchronization.so, which TSan cannot
// see. Without this file every access guarded by an absl::Mutex is reported as a data race (seen:
// two threads incrementing a counter under absl::MutexLock). These definitions interpose the
// library's exported functions (libabsl calls even its own entry points through the PLT, so they
// see those calls too), tell TSan the happens-before edge each one implies
// (__tsan_release before giving a mutex up, __tsan_acquire after taking it) and call the real
// function, found with dlsym(RTLD_NEXT). Lock-order checking is not modelled; races are.
//
// A Condition is evaluated with the mutex held, but possibly inside Await by the waiter or inside
// Unlock by another thread: each evaluation is wrapped to acquire and release the mutex's clock
// itself. Abseil's own deadlock detector is switched off here: it keeps its graph under an
// uninstrumented spinlock and copies it with memmove, which TSan intercepts (every gRPC server
// start reported a race in GraphCycles::InsertEdge). The gcc and ASan builds keep it.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "absl/base/options.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#define KV_STR2(x) #x
#define KV_STR(x) KV_STR2(x)
// The mangled names below spell the inline namespace of Debian's build.
static_assert(std::string_view(KV_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME)) == "debian3",
              "update the mangled names for this Abseil's inline namespace");
#define KV_NS "_ZN4absl7debian3"
#define KV_NSK "_ZNK4absl7debian3"

namespace {

template <typename F>
F Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "absl_sync_annotations: %s not found\n", name);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

void Acquire(const void* p) { __tsan_acquire(const_cast<void*>(p)); }
void Release(const void* p) { __tsan_release(const_cast<void*>(p)); }

// `cond` evaluated as a critical section of `mu`.
struct GuardedCondition {
  const absl::Condition* cond;
  const absl::Mutex* mu;
};
bool EvalGuarded(GuardedCondition* g) {
  Acquire(g->mu);
  const bool met = g->cond->Eval();
  Release(g->mu);
  return met;
}
#define KV_GUARDED(cond, mu)                  \
  GuardedCondition guarded{&(cond), (mu)};    \
  const absl::Condition wrapped(&EvalGuarded, &guarded)

const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>(KV_NS "5Mutex4LockEv");
  real(this);
  Acquire(this);
}
void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>(KV_NS "5Mutex10ReaderLockEv");
  real(this);
  Acquire(this);
}
bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>(KV_NS "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  static auto real = Real<bool (*)(Mutex*)>(KV_NS "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}
void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>(KV_NS "5Mutex6UnlockEv");
  Release(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>(KV_NS "5Mutex12ReaderUnlockEv");
  Release(this);
  real(this);
}
void Mutex::LockWhen(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>(KV_NS "5Mutex8LockWhenERKNS0_9ConditionE");
  KV_GUARDED(cond, this);
  real(this, wrapped);
  Acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>(KV_NS "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  KV_GUARDED(cond, this);
  real(this, wrapped);
  Acquire(this);
}
// The timed variants hold the mutex on return whatever they return.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      KV_NS "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  KV_GUARDED(cond, this);
  const bool met = real(this, wrapped, timeout);
  Acquire(this);
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      KV_NS "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  KV_GUARDED(cond, this);
  const bool met = real(this, wrapped, deadline);
  Acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      KV_NS "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  KV_GUARDED(cond, this);
  const bool met = real(this, wrapped, timeout);
  Acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      KV_NS "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  KV_GUARDED(cond, this);
  const bool met = real(this, wrapped, deadline);
  Acquire(this);
  return met;
}
// Await releases the mutex while it waits and holds it again on return.
void Mutex::Await(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>(KV_NS "5Mutex5AwaitERKNS0_9ConditionE");
  Release(this);
  KV_GUARDED(cond, this);
  real(this, wrapped);
  Acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      KV_NS "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Release(this);
  KV_GUARDED(cond, this);
  const bool met = real(this, wrapped, timeout);
  Acquire(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      KV_NS "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Release(this);
  KV_GUARDED(cond, this);
  const bool met = real(this, wrapped, deadline);
  Acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  static auto real = Real<void (*)(CondVar*, Mutex*)>(KV_NS "7CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(this, mu);
  Acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      KV_NS "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool timed_out = real(this, mu, timeout);
  Acquire(mu);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      KV_NS "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool timed_out = real(this, mu, deadline);
  Acquire(mu);
  return timed_out;
}

// A notified Notification returns from its waits without touching its mutex (an atomic flag).
void Notification::Notify() {
  static auto real = Real<void (*)(Notification*)>(KV_NS "12Notification6NotifyEv");
  Release(this);
  real(this);
}
void Notification::WaitForNotification() const {
  static auto real = Real<void (*)(const Notification*)>(KV_NSK "12Notification19WaitForNotificationEv");
  real(this);
  Acquire(this);
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static auto real = Real<bool (*)(const Notification*, Duration)>(
      KV_NSK "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) Acquire(this);
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  static auto real = Real<bool (*)(const Notification*, Time)>(
      KV_NSK "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) Acquire(this);
  return notified;
}

// absl::Status shares a non-inline payload by a reference count that is decremented inside
// libabsl_status.so (the increment is inline, so instrumented). Every decrement releases the
// payload's clock and acquires what earlier decrements released, so whichever thread drops the
// last reference and deletes the payload is ordered after every other holder's reads.
void Status::UnrefNonInlined(uintptr_t rep) {
  static auto real = Real<void (*)(uintptr_t)>(KV_NS "6Status15UnrefNonInlinedEm");
  Release(reinterpret_cast<void*>(rep));
  Acquire(reinterpret_cast<void*>(rep));
  real(rep);
}

ABSL_NAMESPACE_END
}  // namespace absl

// Suppressions for this TSan build, compiled in so every binary (tests, kvoffloadd started by the
// integration tests) has them without a path. Only accesses that an uninstrumented Debian library
// makes through an intercepted function (memcpy, new/delete, sendmsg, recvmsg) are ignored: the
// library orders its threads with atomics TSan cannot see. Accesses made by our own code are all
// still checked, including to memory these libraries own.
extern "C" const char* __tsan_default_suppressions() {
  return
      // gRPC 1.51 (and its support library gpr): call objects and slices handed between its
      // threads through its own lock-free queues and completion queues.
      "called_from_lib:libgrpc.so\n"
      "called_from_lib:libgpr.so\n"
      // absl::Status copies its payload (message) inside libabsl_status.so; the payload is
      // shared by a reference count (see Status::UnrefNonInlined above).
      "called_from_lib:libabsl_status.so\n"
      // gRPC's sync server allocates each call's state (request, response, stream ops) in its
      // thread manager and hands it to a handler thread through its completion queue, which TSan
      // cannot see; the templates that then touch it are inlined into our binaries, so the
      // library rules above do not cover them. Only races against that allocation are ignored:
      // a race between two of our own threads on a request or response is still reported.
      "race:grpc::Server::SyncRequestThreadManager::AddSyncMethod\n"
      // gRPC's in-process channel (service_test) hands a message's serialized bytes from the
      // sending thread to the receiving one without a copy, through queues TSan cannot see, so
      // protobuf's parse of a received message is reported racing the sender's serialization.
      // Only stacks through the sync API's receive op (which parses into a message the reading
      // thread alone owns) are ignored. It lives here because the runtime takes one definition
      // of this hook, from the executable: one in a test's shared library is never read.
      "race:grpc::internal::CallOpRecvMessage\n"
      // gRPC's callback API (the worker session, daemon/service/session_stream.h): the op sets
      // a StartRead/StartWrite/Finish fills on one thread complete on gRPC's callback thread
      // (CallbackWithSuccessTag::StaticRun), and the call is torn down there (CallOnDone), both
      // ordered by the completion queue inside libgrpc. Only gRPC's own code is ignored: races
      // whose top frame is in gRPC's headers (the op sets, the callback tags, inlined into our
      // binaries), in its interceptor state (its memsets), or in the std::function of a
      // callback tag. Our reactions run the session's work (PartReader -> Engine::Submit,
      // SessionWriter), so a race in our code stays reported even on a reaction's stack (the
      // earlier "race:...StaticRun" hid every one of them).
      "race_top:/usr/include/grpcpp/\n"
      "race:grpcpp/impl/codegen/interceptor_common.h\n"
      "race_top:bits/std_function.h\n"
      "race:ServerCallbackReaderWriterImpl::CallOnDone\n";
}
