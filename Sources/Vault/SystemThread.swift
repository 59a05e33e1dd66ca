// C boundary: pthread_create, pthread_attr_setstacksize and pthread_join, for
// threads whose creation can fail visibly.
import Glibc

/// Threads whose failure to start is an error the caller sees.
///
/// Foundation's `Thread.start()` ignores `pthread_create`'s result on Linux: a thread that cannot
/// be created (under `ulimit -v`, or a cgroup's pids limit) never runs, and a caller waiting for
/// it waits forever. libdispatch retries once a second forever. Package API: VaultScan's file
/// pipeline. (memo, built from the public API alone, has its own for its one helper thread.)
package enum SystemThread {
  private final class Box: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
  }

  /// Runs `body` on a new joinable thread with a stack of `stackSize` bytes (0: the default).
  /// `join` it: its closure, and whatever that holds, is released on that thread before it ends.
  /// - Returns: the thread, or `pthread_create`'s error (`body` has not run and will not).
  package static func spawn(stackSize: Int = 0, _ body: @escaping @Sendable () -> Void) -> (pthread_t?, Int32) {
    var attributes = pthread_attr_t()
    guard pthread_attr_init(&attributes) == 0 else { return (nil, ENOMEM) }
    defer { pthread_attr_destroy(&attributes) }
    if stackSize > 0 { _ = pthread_attr_setstacksize(&attributes, stackSize) }
    let context = Unmanaged.passRetained(Box(body)).toOpaque()
    var thread = pthread_t()
    let result = pthread_create(
      &thread, &attributes,
      { raw in
        Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
        return nil
      }, context)
    guard result == 0 else {
      Unmanaged<Box>.fromOpaque(context).release()
      return (nil, result)
    }
    return (thread, 0)
  }

  /// Waits for a thread `spawn` started to end.
  package static func join(_ thread: pthread_t) {
    pthread_join(thread, nil)
  }
}
