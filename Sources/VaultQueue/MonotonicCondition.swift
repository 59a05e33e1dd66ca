// C boundary: a glibc mutex and condition variable whose timed wait runs on CLOCK_MONOTONIC, and
// a glibc semaphore that wakes one waiting thread.
import Glibc

/// A lock with a condition, as `NSCondition`, whose timed wait measures on the monotonic clock.
///
/// `NSCondition.wait(until:)` waits on the wall clock: stepped back by an hour while a group
/// commit's leader gathered for 0.2 ms, it would have held that leader, and every caller behind
/// it, for the hour (review 7). Here the deadline is a `CLOCK_MONOTONIC` time, which no clock
/// change moves.
///
/// Thread-safe. Not recursive. Every pthread return code is checked in `check`.
final class MonotonicCondition: @unchecked Sendable {
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

  init() {
    Self.check(pthread_mutex_init(mutex, nil), "pthread_mutex_init")
    var attributes = pthread_condattr_t()
    Self.check(pthread_condattr_init(&attributes), "pthread_condattr_init")
    Self.check(pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC), "pthread_condattr_setclock")
    Self.check(pthread_cond_init(condition, &attributes), "pthread_cond_init")
    Self.check(pthread_condattr_destroy(&attributes), "pthread_condattr_destroy")
  }

  deinit {
    // Nobody can wait here any more (a waiter holds its owner); glibc's destroy calls report
    // nothing else worth stopping a process for while it releases an object.
    pthread_cond_destroy(condition)
    pthread_mutex_destroy(mutex)
    condition.deallocate()
    mutex.deallocate()
  }

  func lock() { Self.check(pthread_mutex_lock(mutex), "pthread_mutex_lock") }
  func unlock() { Self.check(pthread_mutex_unlock(mutex), "pthread_mutex_unlock") }
  /// Wakes one waiter (for a condition that only one thread at a time waits on).
  func signal() { Self.check(pthread_cond_signal(condition), "pthread_cond_signal") }

  /// Waits, the lock held, until woken (or spuriously: callers re-check what they wait for).
  func wait() { Self.check(pthread_cond_wait(condition, mutex), "pthread_cond_wait") }

  /// A deadline `seconds` from now on the monotonic clock, for `wait(until:)`.
  static func deadline(after seconds: Double) -> timespec {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    let nanoseconds = Int(now.tv_nsec) + Int(seconds * 1e9)
    return timespec(tv_sec: now.tv_sec + nanoseconds / 1_000_000_000, tv_nsec: nanoseconds % 1_000_000_000)
  }

  /// Waits, the lock held, until woken or `deadline` (from `deadline(after:)`) passes.
  /// - Returns: false when the deadline passed.
  func wait(until deadline: timespec) -> Bool {
    var deadline = deadline
    let result = pthread_cond_timedwait(condition, mutex, &deadline)
    if result == ETIMEDOUT { return false }
    Self.check(result, "pthread_cond_timedwait")
    return true
  }

  /// These calls fail only on misuse (an uninitialised or destroyed object, a lock not held):
  /// a bug here, never a condition to handle, so it stops the process rather than go on unlocked.
  private static func check(_ result: Int32, _ call: StaticString) {
    precondition(result == 0, "\(call) failed: \(result)")
  }
}

/// A wake-up for one thread: `wait()` returns once `signal()` was called, before or after it.
///
/// A group commit's caller waits on one of its own, so the leader wakes exactly the callers whose
/// records it committed, and none of them takes the group's lock to learn it: waking them all
/// through one condition had each come back for the lock in turn (measured: most of the CPU of
/// four enqueueing threads went to waking and switching threads). `signal()` happens before the
/// `wait()` it ends returns (POSIX semaphores synchronise memory), so what the signalling thread
/// wrote before it is seen after it.
///
/// Thread-safe.
final class WakeUp: @unchecked Sendable {
  private let semaphore = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)

  init() {
    precondition(sem_init(semaphore, 0, 0) == 0, "sem_init failed: \(errno)")
  }

  deinit {
    sem_destroy(semaphore)
    semaphore.deallocate()
  }

  func signal() {
    precondition(sem_post(semaphore) == 0, "sem_post failed: \(errno)")
  }

  /// Waits for `signal()` (at once when it came first); a signal handler's interruption waits on.
  func wait() {
    while sem_wait(semaphore) != 0 {
      precondition(errno == EINTR, "sem_wait failed: \(errno)")
    }
  }
}
