// ThreadSanitizer annotations for Debian's Abseil synchronization (TSan builds only; linked into
// every binary of build-tsan/ by the top-level CMakeLists.txt).
//
// Debian builds libabsl_synchronization without TSan, so its Mutex, CondVar and Notification
// take their locks where TSan cannot see them: every access guarded by an absl::Mutex would be
// reported as a race. The linker's --wrap sends our binaries' calls of these functions here;
// each wrapper tells TSan what the call does (lock, unlock, a wait that releases and retakes
// the mutex, a notification's release and acquire) and calls the real one (__real_*). Calls
// made inside other uninstrumented libraries (gRPC's own locks) are not affected.
#include <sanitizer/tsan_interface.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

// The symbols, as the Abseil of Debian bookworm (inline namespace debian3) exports them. The
// top-level CMakeLists.txt reads this list for the linker's --wrap options.
#define MUTEX_LOCK _ZN4absl7debian35Mutex4LockEv
#define MUTEX_UNLOCK _ZN4absl7debian35Mutex6UnlockEv
#define MUTEX_READER_LOCK _ZN4absl7debian35Mutex10ReaderLockEv
#define MUTEX_READER_UNLOCK _ZN4absl7debian35Mutex12ReaderUnlockEv
#define MUTEX_TRY_LOCK _ZN4absl7debian35Mutex7TryLockEv
#define MUTEX_AWAIT _ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE
#define MUTEX_AWAIT_TIMEOUT _ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE
#define MUTEX_AWAIT_DEADLINE _ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE
#define CONDVAR_WAIT _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE
#define CONDVAR_WAIT_TIMEOUT _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE
#define CONDVAR_WAIT_DEADLINE _ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE
#define NOTIFY _ZN4absl7debian312Notification6NotifyEv
#define WAIT_NOTIFICATION _ZNK4absl7debian312Notification19WaitForNotificationEv
#define WAIT_NOTIFICATION_TIMEOUT \
  _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE
#define WAIT_NOTIFICATION_DEADLINE \
  _ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE

#define CAT(a, b) CAT2(a, b)
#define CAT2(a, b) a##b
#define REAL(sym) CAT(__real_, sym)
#define WRAP(sym) CAT(__wrap_, sym)

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// TSan's dynamic annotations (GCC 12's sanitizer headers do not declare them).
extern "C" {
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}

namespace {

void Locked(Mutex* mu, unsigned flags = 0) { __tsan_mutex_post_lock(mu, flags, 0); }
void Unlocking(Mutex* mu, unsigned flags = 0) {
  __tsan_mutex_pre_unlock(mu, flags);
  __tsan_mutex_post_unlock(mu, flags);
}
// A wait releases the mutex and takes it again before it returns.
void Released(Mutex* mu) { Unlocking(mu); }
void Retaken(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  Locked(mu);
}

// An Await evaluates its Condition (our instrumented code) inside the library, holding the
// mutex that TSan was told is released for the wait: those reads are not checked. (A Condition
// evaluated by the thread that unlocks runs inside that unlock, where TSan checks nothing.)
void EvaluatingConditions(bool begin) {
  if (begin) {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  } else {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
}

// Notification::HasBeenNotified is inline (instrumented): an acquire load of the flag that
// follows the Mutex inside the object; Notify's release store of it is in the library.
void* Flag(const Notification* n) {
  return const_cast<char*>(reinterpret_cast<const char*>(n)) + sizeof(Mutex);
}

}  // namespace

extern "C" {
void REAL(MUTEX_LOCK)(Mutex*);
void REAL(MUTEX_UNLOCK)(Mutex*);
void REAL(MUTEX_READER_LOCK)(Mutex*);
void REAL(MUTEX_READER_UNLOCK)(Mutex*);
bool REAL(MUTEX_TRY_LOCK)(Mutex*);
void REAL(MUTEX_AWAIT)(Mutex*, const Condition&);
bool REAL(MUTEX_AWAIT_TIMEOUT)(Mutex*, const Condition&, Duration);
bool REAL(MUTEX_AWAIT_DEADLINE)(Mutex*, const Condition&, Time);
void REAL(CONDVAR_WAIT)(CondVar*, Mutex*);
bool REAL(CONDVAR_WAIT_TIMEOUT)(CondVar*, Mutex*, Duration);
bool REAL(CONDVAR_WAIT_DEADLINE)(CondVar*, Mutex*, Time);
void REAL(NOTIFY)(Notification*);
void REAL(WAIT_NOTIFICATION)(const Notification*);
bool REAL(WAIT_NOTIFICATION_TIMEOUT)(const Notification*, Duration);
bool REAL(WAIT_NOTIFICATION_DEADLINE)(const Notification*, Time);

void WRAP(MUTEX_LOCK)(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  REAL(MUTEX_LOCK)(mu);
  Locked(mu);
}
void WRAP(MUTEX_UNLOCK)(Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  REAL(MUTEX_UNLOCK)(mu);
  __tsan_mutex_post_unlock(mu, 0);
}
void WRAP(MUTEX_READER_LOCK)(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  REAL(MUTEX_READER_LOCK)(mu);
  Locked(mu, __tsan_mutex_read_lock);
}
void WRAP(MUTEX_READER_UNLOCK)(Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  REAL(MUTEX_READER_UNLOCK)(mu);
  __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}
bool WRAP(MUTEX_TRY_LOCK)(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_try_lock);
  const bool locked = REAL(MUTEX_TRY_LOCK)(mu);
  Locked(mu, locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed);
  return locked;
}
void WRAP(MUTEX_AWAIT)(Mutex* mu, const Condition& cond) {
  Released(mu);
  EvaluatingConditions(true);
  REAL(MUTEX_AWAIT)(mu, cond);
  EvaluatingConditions(false);
  Retaken(mu);
}
bool WRAP(MUTEX_AWAIT_TIMEOUT)(Mutex* mu, const Condition& cond, Duration timeout) {
  Released(mu);
  EvaluatingConditions(true);
  const bool met = REAL(MUTEX_AWAIT_TIMEOUT)(mu, cond, timeout);
  EvaluatingConditions(false);
  Retaken(mu);
  return met;
}
bool WRAP(MUTEX_AWAIT_DEADLINE)(Mutex* mu, const Condition& cond, Time deadline) {
  Released(mu);
  EvaluatingConditions(true);
  const bool met = REAL(MUTEX_AWAIT_DEADLINE)(mu, cond, deadline);
  EvaluatingConditions(false);
  Retaken(mu);
  return met;
}
void WRAP(CONDVAR_WAIT)(CondVar* cv, Mutex* mu) {
  Released(mu);
  REAL(CONDVAR_WAIT)(cv, mu);
  Retaken(mu);
}
bool WRAP(CONDVAR_WAIT_TIMEOUT)(CondVar* cv, Mutex* mu, Duration timeout) {
  Released(mu);
  const bool timed_out = REAL(CONDVAR_WAIT_TIMEOUT)(cv, mu, timeout);
  Retaken(mu);
  return timed_out;
}
bool WRAP(CONDVAR_WAIT_DEADLINE)(CondVar* cv, Mutex* mu, Time deadline) {
  Released(mu);
  const bool timed_out = REAL(CONDVAR_WAIT_DEADLINE)(cv, mu, deadline);
  Retaken(mu);
  return timed_out;
}
void WRAP(NOTIFY)(Notification* n) {
  __tsan_release(n);
  __tsan_release(Flag(n));
  REAL(NOTIFY)(n);
}
void WRAP(WAIT_NOTIFICATION)(const Notification* n) {
  REAL(WAIT_NOTIFICATION)(n);
  __tsan_acquire(const_cast<Notification*>(n));
}
bool WRAP(WAIT_NOTIFICATION_TIMEOUT)(const Notification* n, Duration timeout) {
  const bool notified = REAL(WAIT_NOTIFICATION_TIMEOUT)(n, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}
bool WRAP(WAIT_NOTIFICATION_DEADLINE)(const Notification* n, Time deadline) {
  const bool notified = REAL(WAIT_NOTIFICATION_DEADLINE)(n, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}
}  // extern "C"
