// Happens-before edges that ThreadSanitizer cannot see by itself; in other builds, nothing.
//
// gRPC's callback API runs a reactor's reactions on gRPC's threads: a write started on one
// thread completes (OnWriteDone) on another, ordered by gRPC's core. Debian builds gRPC without
// TSan, so a TSan build sees no order between the two and would report the reactor's state as
// raced. A reactor hands its state over before it starts an operation (HandOff(key)) and takes
// it over when the operation's reaction runs (TakeOver(key), or a Reaction scope). Operations
// that run independently (a link's read and write, in flight together) have keys of their own,
// so TSan still sees them unordered, as they are.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace pagoda::common {

// What this thread did so far happens before whatever follows a TakeOver(key).
inline void HandOff(const void* key) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(key));
#else
  (void)key;
#endif
}

inline void TakeOver(const void* key) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(key));
#else
  (void)key;
#endif
}

// A reaction's scope: takes `key` over at the start and hands it off at the end, so what the
// reaction did happens before the call's OnDone (which takes every key over) even when it
// starts no further operation.
class Reaction {
 public:
  explicit Reaction(const void* key) : key_(key) { TakeOver(key_); }
  ~Reaction() { HandOff(key_); }
  Reaction(const Reaction&) = delete;
  Reaction& operator=(const Reaction&) = delete;

 private:
  const void* const key_;
};

}  // namespace pagoda::common
