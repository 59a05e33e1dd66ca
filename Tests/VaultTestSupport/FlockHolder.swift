import Foundation

/// Another process (python3) holding a `flock` on a file until `release()`: a real holder, as
/// /proc/locks shows one, that a test may stop (SIGSTOP) as Ctrl-Z would.
public final class FlockHolder {
  public let child: Child
  private var released = false

  /// Returns once the lock is held (python3 creates `path + ".held"` after taking it).
  public init(path: String, exclusive: Bool = true) throws {
    let marker = path + ".held"
    let script = """
      import fcntl, sys
      f = open(sys.argv[1], "a+")
      fcntl.flock(f, fcntl.LOCK_EX if sys.argv[3] == "ex" else fcntl.LOCK_SH)
      open(sys.argv[2], "w").close()
      sys.stdin.read()
      """
    child = try Spawn.start("/usr/bin/python3", ["-c", script, path, marker, exclusive ? "ex" : "sh"])
    let deadline = Date().addingTimeInterval(30)
    while !FileManager.default.fileExists(atPath: marker) {
      guard Date() < deadline, child.exitStatus(within: 0.02) == nil else {
        child.kill(SIGKILL)
        _ = child.finish()
        throw POSIXError(.ETIMEDOUT)
      }
    }
    try? FileManager.default.removeItem(atPath: marker)
  }

  public var pid: pid_t { child.pid }

  /// Stops it, as Ctrl-Z does.
  public func stop() { child.kill(SIGSTOP) }

  /// Lets it go on and end, which releases the lock.
  public func release() {
    guard !released else { return }
    released = true
    child.kill(SIGCONT)
    _ = child.finish()
  }

  deinit { release() }
}
