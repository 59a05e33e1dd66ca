// C boundary: pthread_create, pthread_attr_setstacksize and pthread_detach, for threads whose
// creation can fail visibly.
import Glibc

/// Starts threads whose failure to start is an error the caller sees.
///
/// Foundation's `Thread.start()` ignores `pthread_create`'s result on Linux: a thread that cannot
/// be created (under `ulimit -v`, or a cgroup's pids limit) never runs, and a caller waiting for
/// it waits forever. libdispatch retries once a second forever. Package API: VaultScan's file
/// pipeline and memo's helper thread.
package enum DetachedThread {
  /// Runs `body` on a new detached thread with a stack of `stackSize` bytes (0: the default).
  /// - Returns: 0 when the thread was started, else `pthread_create`'s error (EAGAIN, ENOMEM…);
  ///   `body` has not run and will not.
  package static func start(stackSize: Int = 0, _ body: @escaping @Sendable () -> Void) -> Int32 {
    final class Box: Sendable {
      let body: @Sendable () -> Void
      init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    var attributes = pthread_attr_t()
    guard pthread_attr_init(&attributes) == 0 else { return ENOMEM }
    defer { pthread_attr_destroy(&attributes) }
    if stackSize > 0 { _ = pthread_attr_setstacksize(&attributes, stackSize) }
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    let context = Unmanaged.passRetained(Box(body)).toOpaque()
    var thread = pthread_t()
    let result = pthread_create(
      &thread, &attributes,
      { raw in
        Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
        return nil
      }, context)
    if result != 0 { Unmanaged<Box>.fromOpaque(context).release() }
    return result
  }
}
