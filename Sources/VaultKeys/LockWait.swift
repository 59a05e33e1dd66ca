// C boundary: flock(2), and /proc/locks and /proc/PID/stat to name the process a lock waits for.
import Foundation
import Glibc
import VaultCrypto

/// The process that holds a lock this one waits for, as far as /proc tells (nothing when it
/// cannot: no /proc, or a holder in another PID namespace).
package struct LockHolder: Sendable, Equatable {
  /// Its process id, as this process's PID namespace numbers it.
  package var pid: Int32?
  /// Its command name (/proc/PID/comm: at most 15 bytes, set by the process itself).
  package var command: String?
  /// It is stopped (Ctrl-Z, SIGSTOP) or stopped by a debugger: it will not let go until resumed.
  package var stopped = false

  package init(pid: Int32? = nil, command: String? = nil, stopped: Bool = false) {
    self.pid = pid
    self.command = command
    self.stopped = stopped
  }
}

/// Locks the vault home's lock file (`flock`) and, when another process holds it for longer than
/// a moment, says so: a rotation stopped with Ctrl-Z holds the lock until it is resumed, and every
/// `seal`, `queue put` and `backup` behind it waited without a word.
package enum LockWait {
  private struct Observer {
    var delay: Double
    var notify: @Sendable (LockHolder) -> Void
  }
  private static let observer = LockedValue<Observer?>(nil)

  /// Calls `notify` (on another thread) once for each wait for a lock held elsewhere that lasts
  /// `delay` seconds, while the wait goes on. The command line sets it; a library user may.
  package static func observe(after delay: Double, _ notify: @escaping @Sendable (LockHolder) -> Void) {
    observer.withLock { $0 = Observer(delay: delay, notify: notify) }
  }

  /// Waits are silent again.
  package static func stopObserving() { observer.withLock { $0 = nil } }

  /// `flock(descriptor, operation)`, retried on EINTR, telling the observer about a wait.
  ///
  /// - Returns: 0, or the errno of the failure.
  package static func lock(_ descriptor: Int32, _ operation: Int32) -> Int32 {
    // The uncontended case costs one system call, as a plain flock did (a seal takes this path).
    while flock(descriptor, operation | LOCK_NB) != 0 {
      if errno == EINTR { continue }
      let code = errno
      guard code == EWOULDBLOCK else { return code }
      guard let watcher = observer.withLock({ $0 }) else { return wait(descriptor, operation) }
      return waitTelling(watcher, descriptor, operation)
    }
    return 0
  }

  /// The blocking `flock`, retried on EINTR: 0, or the errno of the failure.
  private static func wait(_ descriptor: Int32, _ operation: Int32) -> Int32 {
    while flock(descriptor, operation) != 0 {
      if errno == EINTR { continue }
      return errno
    }
    return 0
  }

  private static func waitTelling(_ watcher: Observer, _ descriptor: Int32, _ operation: Int32) -> Int32 {
    let waiting = LockedValue(true)
    var info = stat()
    let inode = fstat(descriptor, &info) == 0 ? UInt64(info.st_ino) : nil
    let exclusive = operation & LOCK_EX != 0
    DispatchQueue.global().asyncAfter(deadline: .now() + watcher.delay) {
      guard waiting.withLock({ $0 }), let inode else { return }
      // nil: only this process holds it (another of its threads is rotating); nothing to tell.
      guard let holder = holder(of: inode, conflictingWithExclusive: exclusive) else { return }
      if waiting.withLock({ $0 }) { watcher.notify(holder) }
    }
    defer { waiting.withLock { $0 = false } }
    return wait(descriptor, operation)
  }

  /// The first other process /proc/locks shows holding a flock on the file `inode` that keeps
  /// this one waiting: any holder when this one wants it exclusively, else a writer. An empty
  /// `LockHolder` when none is shown (no /proc, another PID namespace); nil when the only holder
  /// shown is this process.
  package static func holder(of inode: UInt64, conflictingWithExclusive exclusive: Bool) -> LockHolder? {
    holder(ofInodes: [inode], kinds: ["FLOCK"], writersOnly: !exclusive)
  }

  /// The process that holds a write lock (SQLite's POSIX byte-range locks, or a flock) on one of
  /// `paths`, for an error that says a file stayed locked: nil when /proc shows none but this
  /// process's.
  ///
  /// - Parameter paths: the files (a database, its -wal and -shm); missing ones are skipped.
  /// - Returns: the holder, or nil.
  package static func writer(ofFiles paths: [String]) -> LockHolder? {
    let inodes = paths.compactMap { path -> UInt64? in
      var info = stat()
      return stat(path, &info) == 0 ? UInt64(info.st_ino) : nil
    }
    guard !inodes.isEmpty,
      let found = holder(ofInodes: Set(inodes), kinds: ["POSIX", "OFDLCK", "FLOCK"], writersOnly: true),
      found.pid != nil
    else { return nil }
    return found
  }

  /// The first holder /proc/locks shows of a lock of one of `kinds` on one of `inodes` (a write
  /// lock only, when `writersOnly`), other than this process. Empty when /proc cannot be read or
  /// shows none; nil when it shows only this process.
  private static func holder(ofInodes inodes: Set<UInt64>, kinds: Set<Substring>, writersOnly: Bool) -> LockHolder? {
    guard let locks = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return LockHolder() }
    let me = getpid()
    var onlyMe = false
    for line in locks.split(separator: "\n") {
      // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters are "1: -> FLOCK …".
      let fields = line.split(separator: " ", omittingEmptySubsequences: true)
      guard fields.count >= 6, kinds.contains(fields[1]), !writersOnly || fields[3] == "WRITE",
        let pid = Int32(fields[4]), pid > 0,
        let inode = fields[5].split(separator: ":").last.flatMap({ UInt64($0) }), inodes.contains(inode)
      else { continue }
      if pid == me {
        onlyMe = true
        continue
      }
      return describe(pid)
    }
    return onlyMe ? nil : LockHolder()
  }

  /// Its command name and whether it is stopped, from /proc/PID/stat ("PID (comm) STATE …").
  static func describe(_ pid: Int32) -> LockHolder {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
      let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")")
    else { return LockHolder(pid: pid) }
    let command = String(stat[stat.index(after: open)..<close])
    let state = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first
    return LockHolder(pid: pid, command: command, stopped: state == "T" || state == "t")
  }
}
