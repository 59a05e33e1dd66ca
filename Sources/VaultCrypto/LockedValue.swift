// C boundary: a glibc pthread mutex, the lock of the pools and holds on the seal's path.
import Glibc

/// A value that threads share, guarded by a `pthread_mutex_t`: `Synchronization.Mutex`'s shape
/// (`withLock` with a closure), for what a seal takes and gives back on every record: the pools of
/// SHA-256, AES-GCM and XAES contexts and of secure-memory slots, and `Vault`'s seal lock.
///
/// Not `Mutex`, because ThreadSanitizer cannot see it: its contended path waits in
/// `libswiftSynchronization.so`, which is not instrumented, so TSan finds no order between two
/// threads' `withLock` bodies and reports every contended one as a race (a 20-line
/// `Mutex<[Int]>` program shows it; the same program on this type does not).
/// `pthread_mutex_lock` is intercepted by every sanitizer, so a race TSan reports on a value
/// guarded here is a real one. The seal's cost did not change (RELIABILITY.md, "Sanitizers").
///
/// The mutex and the value share one heap allocation (as swift-nio's `NIOLockedValueBox`), so the
/// mutex never moves; it is initialised once, when the value is made, and destroyed with it.
///
/// Thread-safe. The lock is not recursive: `body` must not call `withLock` on the same value.
package struct LockedValue<Value>: @unchecked Sendable {
  @usableFromInline let storage: Storage

  /// Guards `value` from now on.
  package init(_ value: Value) { storage = Storage.make(value) }

  /// Runs `body` with the value while holding the lock, and returns what it returns.
  ///
  /// - Parameter body: reads or changes the value; it must not let the value escape.
  /// - Returns: what `body` returns.
  /// - Throws: what `body` throws (the lock is released first).
  @inlinable
  package func withLock<Result, Failure: Error>(
    _ body: (inout Value) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    try storage.withUnsafeMutablePointers { (value, mutex) throws(Failure) -> Result in
      Self.require(pthread_mutex_lock(mutex), "pthread_mutex_lock")
      defer { Self.require(pthread_mutex_unlock(mutex), "pthread_mutex_unlock") }
      return try body(&value.pointee)
    }
  }

  /// Every pthread return code goes through here. A default mutex fails only when misused
  /// (EINVAL, EPERM: never initialised, unlocked by a thread that does not hold it), a bug that
  /// must stop the process rather than let two threads in at once.
  @inlinable
  static func require(_ status: Int32, _ call: StaticString) {
    precondition(status == 0, "\(call) failed")
  }

  /// The value (the buffer's header) and its mutex (the buffer's one element), allocated together.
  @usableFromInline
  final class Storage: ManagedBuffer<Value, pthread_mutex_t> {
    static func make(_ value: Value) -> Storage {
      let storage = unsafeDowncast(create(minimumCapacity: 1) { _ in value }, to: Storage.self)
      storage.withUnsafeMutablePointerToElements { (mutex) in
        mutex.initialize(to: pthread_mutex_t())
        LockedValue.require(pthread_mutex_init(mutex, nil), "pthread_mutex_init")
      }
      return storage
    }

    // ManagedBuffer destroys the header (the value); the element (the mutex) is ours to destroy.
    deinit {
      withUnsafeMutablePointerToElements { (mutex) in
        LockedValue.require(pthread_mutex_destroy(mutex), "pthread_mutex_destroy")
        _ = mutex.deinitialize(count: 1)
      }
    }
  }
}
