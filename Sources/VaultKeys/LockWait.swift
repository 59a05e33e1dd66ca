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
/// `seal`, `backup` and other `rotate` behind it waited without a word.
package enum LockWait {
  private struct Observer {
    var delay: Double
    var notify: @Sendable (LockHolder) -> Void
  }
  private static let observer = LockedValue<Observer?>(nil)

  /// Calls `notify` (on another thread) once for each wait for a lock held elsewhere that lasts
  /// `delay` seconds, while the wait goes on. The command line sets it (package API: an app's
  /// waits stay silent).
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
    // Taken now: the descriptor may be closed by the time the timer fires.
    let file = fstat(descriptor, &info) == 0 ? FileID(info) : nil
    let exclusive = operation & LOCK_EX != 0
    DispatchQueue.global().asyncAfter(deadline: .now() + watcher.delay) {
      guard waiting.withLock({ $0 }), let file else { return }
      // nil: only this process holds it (another of its threads is rotating); nothing to tell.
      guard let holder = holder(of: [file], kinds: ["FLOCK"], writersOnly: !exclusive) else { return }
      if waiting.withLock({ $0 }) { watcher.notify(holder) }
    }
    defer { waiting.withLock { $0 = false } }
    return wait(descriptor, operation)
  }

  /// The first other process /proc/locks shows holding a flock on the file open as `descriptor` that keeps
  /// this one waiting: any holder when this one wants it exclusively, else a writer. An empty
  /// `LockHolder` when none is shown (no /proc, another PID namespace); nil when the only holder
  /// shown is this process.
  package static func holder(of descriptor: Int32, conflictingWithExclusive exclusive: Bool) -> LockHolder? {
    var info = stat()
    guard fstat(descriptor, &info) == 0 else { return LockHolder() }
    return holder(of: [FileID(info)], kinds: ["FLOCK"], writersOnly: !exclusive)
  }

  /// The process that holds a write lock (SQLite's POSIX byte-range locks, or a flock) on one of
  /// `paths`, for an error that says a file stayed locked: nil when /proc shows none but this
  /// process's, or none it can confirm.
  ///
  /// - Parameter paths: the files (a database, its -wal and -shm); missing ones are skipped.
  /// - Returns: the holder, or nil.
  package static func writer(ofFiles paths: [String]) -> LockHolder? {
    let files = Set(
      paths.compactMap { path -> FileID? in
        var info = stat()
        return stat(path, &info) == 0 ? FileID(info) : nil
      })
    guard !files.isEmpty, let found = holder(of: files, kinds: ["POSIX", "FLOCK"], writersOnly: true),
      found.pid != nil
    else { return nil }
    return found
  }

  /// The first process /proc/locks shows holding a lock of one of `kinds` on one of `files` (a
  /// write lock only, when `writersOnly`), other than this process, that has one of them open
  /// now. /proc/locks names a file by device and inode, and a flock by the process that took it
  /// (a child that inherited it and the pid's next owner look the same), so each candidate is
  /// confirmed by its open descriptors; one that cannot be (another user's, or gone) is not
  /// named. Empty when /proc shows no such holder or none is confirmed; nil when it shows only
  /// this process.
  private static func holder(of files: Set<FileID>, kinds: Set<Substring>, writersOnly: Bool) -> LockHolder? {
    guard let locks = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return LockHolder() }
    let me = getpid()
    var onlyMe = false
    var unconfirmed = false
    for line in locks.split(separator: "\n") {
      // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters are "1: -> FLOCK …".
      let fields = line.split(separator: " ", omittingEmptySubsequences: true)
      guard fields.count >= 6, kinds.contains(fields[1]), !writersOnly || fields[3] == "WRITE",
        let pid = Int32(fields[4]), pid > 0, let file = FileID(procLocks: fields[5]), files.contains(file)
      else { continue }
      if pid == me {
        onlyMe = true
        continue
      }
      guard hasOpen(files, pid: pid) else {
        unconfirmed = true
        continue
      }
      return describe(pid)
    }
    return onlyMe && !unconfirmed ? nil : LockHolder()
  }

  /// Whether process `pid` has one of `files` open now (its /proc/PID/fd, readable for this
  /// user's processes, or by root).
  private static func hasOpen(_ files: Set<FileID>, pid: Int32) -> Bool {
    let directory = "/proc/\(pid)/fd"
    guard let descriptors = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return false }
    return descriptors.contains { name in
      var info = stat()
      return stat(directory + "/" + name, &info) == 0 && files.contains(FileID(info))
    }
  }

  /// A file as /proc/locks names it: device major and minor, inode (also how /proc/self/mountinfo
  /// names a mount's device: `KeyfileStore.volatileFileSystem`).
  struct FileID: Hashable {
    var major: UInt32
    var minor: UInt32
    var inode: UInt64

    init(_ info: stat) {
      // glibc's major() and minor() (bits/sysmacros.h), which Swift does not import.
      let device = UInt64(info.st_dev)
      major = UInt32(truncatingIfNeeded: ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff)))
      minor = UInt32(truncatingIfNeeded: (device & 0xff) | ((device >> 12) & ~UInt64(0xff)))
      inode = UInt64(info.st_ino)
    }

    /// "08:01:5678" (major and minor in hex, the inode in decimal).
    init?(procLocks field: Substring) {
      let parts = field.split(separator: ":")
      guard parts.count == 3, let major = UInt32(parts[0], radix: 16), let minor = UInt32(parts[1], radix: 16),
        let inode = UInt64(parts[2])
      else { return nil }
      self.major = major
      self.minor = minor
      self.inode = inode
    }
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
