import Foundation
import Vault
import VaultCrypto

/// A bundle opened for reading (positional reads; the descriptor is closed on deinit).
final class BundleReader {
  let path: String
  let descriptor: Int32
  let size: UInt64

  init(path: String) throws {
    self.path = path
    // Non-blocking: a FIFO planted under a bundle's name (a sticky backup directory lets anyone
    // make one) would hold a blocking open until a writer came; it is refused below instead.
    descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
    guard descriptor >= 0 else { throw BackupError.io(path: path, operation: "open", errno: errno) }
    var info = stat()
    guard fstat(descriptor, &info) == 0 else {
      let code = errno
      close(descriptor)
      throw BackupError.io(path: path, operation: "stat", errno: code)
    }
    guard info.st_mode & S_IFMT == S_IFREG else {
      close(descriptor)
      throw BackupError.notARegularFile(path: path)
    }
    size = UInt64(info.st_size)
  }

  deinit { close(descriptor) }

  /// Exactly `count` bytes at `offset`; the caller has checked the file is long enough.
  func read(at offset: UInt64, count: Int) throws -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    var done = 0
    while done < count {
      let got = out.withUnsafeMutableBytes {
        pread(descriptor, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done))
      }
      if got < 0, errno == EINTR { continue }
      guard got > 0 else {
        if got == 0 { throw BackupError.truncated(path: path, part: "file") }
        throw BackupError.io(path: path, operation: "read", errno: errno)
      }
      done += got
    }
    return out
  }

  /// Streams `count` bytes at `offset` through `body` in 1 MiB blocks.
  func forEachBlock(at offset: UInt64, count: UInt64, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
    var remaining = count
    var position = offset
    let block = 1 << 20
    var buffer = [UInt8](repeating: 0, count: block)
    while remaining > 0 {
      let want = Int(min(UInt64(block), remaining))
      let got = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress!, want, off_t(position)) }
      if got < 0, errno == EINTR { continue }
      guard got > 0 else {
        if got == 0 { throw BackupError.truncated(path: path, part: "file") }
        throw BackupError.io(path: path, operation: "read", errno: errno)
      }
      try buffer.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<got])) }
      remaining -= UInt64(got)
      position += UInt64(got)
    }
  }
}

/// A new file written in full and synced: made 0600 with O_EXCL, never replacing anything.
final class NewFile {
  let path: String
  let descriptor: Int32

  init(path: String) throws {
    self.path = path
    descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard descriptor >= 0 else { throw BackupError.io(path: path, operation: "create", errno: errno) }
  }

  deinit { close(descriptor) }

  func write(_ bytes: UnsafeRawBufferPointer) throws {
    var done = 0
    while done < bytes.count {
      let wrote = Glibc.write(descriptor, bytes.baseAddress! + done, bytes.count - done)
      if wrote < 0, errno == EINTR { continue }
      guard wrote > 0 else { throw BackupError.io(path: path, operation: "write", errno: errno) }
      done += wrote
    }
  }

  func write(_ bytes: [UInt8]) throws { try bytes.withUnsafeBytes { try write($0) } }

  func sync() throws {
    guard fsync(descriptor) == 0 else { throw BackupError.io(path: path, operation: "fsync", errno: errno) }
  }
}

/// fsyncs a directory, so a rename or unlink in it is durable.
func syncDirectory(_ path: String) throws {
  let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
  guard descriptor >= 0 else { throw BackupError.io(path: path, operation: "open", errno: errno) }
  defer { close(descriptor) }
  guard fsync(descriptor) == 0 else { throw BackupError.io(path: path, operation: "fsync", errno: errno) }
}

/// SHA-256 and size of the file at `path`.
func hashFile(_ path: String) throws -> (size: UInt64, sha256: [UInt8]) {
  let reader = try BundleReader(path: path)
  let hasher = try SHA256Hasher()
  try reader.forEachBlock(at: 0, count: reader.size) { try hasher.update($0) }
  return (reader.size, try hasher.finish())
}

/// A private (0700) directory made with mkdtemp under `parent`, removed with its files on deinit.
///
/// It holds container snapshots and a bundle being written, so one left by a killed process
/// (no deinit) would keep a copy of the containers' envelopes and record ids outside the home
/// for good. While it exists, its creator holds an exclusive `flock` on its `.lock` file; making
/// a new one first removes this user's work directories in `parent` whose lock nobody holds and
/// that are older than `staleAfter` seconds (the gap between `mkdtemp` and taking the lock). One
/// without a lock file is removed only after `lockLessAfter`: an earlier release, which locked
/// nothing, may still be using it.
///
/// Removal never follows a path another user could change: entries are unlinked relative to the
/// directory's own descriptor (checked when it is made to be the empty 0700 directory of this
/// user that mkdtemp made), never recursively (a directory inside stops it), and stale ones
/// are looked for only where no other user can rename entries: a parent owned by this user or
/// root that only its owner can write, or that has the sticky bit (`/tmp`). Elsewhere (a shared,
/// group-writable backup directory) another user could rename their own directory, or a link,
/// to a work directory's name, so nothing there is swept.
final class WorkDirectory: Sendable {
  static let prefix = ".vault-backup-work-"
  static let staleAfter: time_t = 60
  static let lockLessAfter: time_t = 86_400

  let path: String
  private let lock: Int32
  private let directory: Int32
  /// Held while a step makes entries in the directory (`making`) and while `abandonAll` removes
  /// it, so the removal never lists the directory while a step may still add to it.
  private let gate = Gate()
  /// The work directories of this process that are not removed yet: what `abandonAll` removes.
  private static let live = LockedValue<[ObjectIdentifier: (directory: Int32, path: String, lock: Int32, gate: Gate)]>(
    [:])

  /// A lock and whether the directory was abandoned (read and written with the lock held).
  final class Gate: @unchecked Sendable {
    let lock = NSLock()
    var abandoned = false
  }

  init(parent: String) throws {
    Self.removeStale(in: parent)
    var template = Array((parent + "/" + Self.prefix + "XXXXXX").utf8CString)
    guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
      throw BackupError.io(path: parent, operation: "mkdtemp", errno: errno)
    }
    path = String(cString: made)
    directory = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    // What is at `path` now must be what mkdtemp made: in a parent where another user can rename
    // entries it could have been swapped for someone else's directory between the two calls, and
    // removing ours would then unlink its files. Ours is this user's, 0700 and empty.
    var info = stat()
    guard directory >= 0, fstat(directory, &info) == 0, info.st_uid == geteuid(), info.st_mode & 0o7777 == 0o700,
      Self.entries(of: directory).isEmpty
    else {
      let error = directory >= 0 ? EEXIST : errno
      if directory >= 0 { close(directory) }
      throw BackupError.io(path: path, operation: "open", errno: error)
    }
    let descriptor = openat(directory, ".lock", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
    guard descriptor >= 0, flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
      let error = errno
      if descriptor >= 0 { close(descriptor) }
      Self.remove(directory, named: path, lock: -1)
      throw BackupError.io(path: path, operation: "lock", errno: error)
    }
    lock = descriptor
    Self.live.withLock { [gate] in $0[ObjectIdentifier(self)] = (directory, path, lock, gate) }
  }

  /// Runs `body`, a step that makes entries in the directory (a snapshot, the partial bundle),
  /// unless the directory was abandoned; `abandonAll` waits for a step under way.
  /// - Throws: `BackupError.io` (ECANCELED) when the directory was abandoned; what `body` throws.
  func making<T>(_ body: () throws -> T) throws -> T {
    try gate.lock.withLock {
      guard !gate.abandoned else { throw BackupError.io(path: path, operation: "create", errno: ECANCELED) }
      return try body()
    }
  }

  deinit {
    guard Self.live.withLock({ $0.removeValue(forKey: ObjectIdentifier(self)) }) != nil else { return }
    Self.remove(directory, named: path, lock: lock)
  }

  /// Removes every work directory of this process now, for a process about to exit on a signal
  /// (its deinit would not run, and the next backup removes it only after `staleAfter`). A step
  /// under way that makes entries in one (a snapshot) is waited for; the backups still running
  /// then find their files gone, or are refused their next step, and fail.
  /// - Returns: the work directories that could not be removed.
  static func abandonAll() -> [String] {
    let all = live.withLock { live in
      defer { live = [:] }
      return live
    }
    var left: [String] = []
    for work in all.values {
      work.gate.lock.withLock {
        work.gate.abandoned = true
        if !remove(work.directory, named: work.path, lock: work.lock) { left.append(work.path) }
      }
    }
    return left
  }

  /// Removes the work directory open as `directory`: every entry that is not a directory,
  /// unlinked relative to it; then its lock file after closing `lock` (on NFS an open file
  /// unlinked is renamed, and the directory would not be empty); then the directory itself by
  /// `name`, which fails harmlessly if anything is left in what is there now. Closes `directory`.
  /// - Returns: whether the directory is gone.
  @discardableResult
  private static func remove(_ directory: Int32, named name: String, lock: Int32) -> Bool {
    for entry in entries(of: directory) where entry.name != ".lock" && !entry.isDirectory {
      unlinkat(directory, entry.name, 0)
    }
    if lock >= 0 { close(lock) }
    unlinkat(directory, ".lock", 0)
    close(directory)
    return rmdir(name) == 0 || errno == ENOENT
  }

  /// The names in the directory open as `directory` (not `.` and `..`), each with whether it is a
  /// directory (not following links).
  private static func entries(of directory: Int32) -> [(name: String, isDirectory: Bool)] {
    let copy = dup(directory)
    guard copy >= 0, let stream = fdopendir(copy) else {
      if copy >= 0 { close(copy) }
      return []
    }
    defer { closedir(stream) }
    // The copy shares the descriptor's position: an earlier listing left it at the end.
    rewinddir(stream)
    var found: [(String, Bool)] = []
    while let entry = readdir(stream) {
      let name = String(decoding: directoryEntryName(entry), as: UTF8.self)
      guard name != ".", name != ".." else { continue }
      var info = stat()
      let isDirectory = fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) != 0 || info.st_mode & S_IFMT == S_IFDIR
      found.append((name, isDirectory))
    }
    return found
  }

  /// Removes the work directories in `parent` that a killed process left: this user's, mode 0700,
  /// a minute old (by the wall clock either way), holding no directory, whose lock is not held
  /// (or a day old without a lock file). Nothing is looked at where another user could rename
  /// entries (see the type's comment). Best effort: what cannot be examined or removed is left.
  static func removeStale(in parent: String, now: time_t = time(nil)) {
    let parentDirectory = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard parentDirectory >= 0 else { return }
    defer { close(parentDirectory) }
    var parentInfo = stat()
    guard fstat(parentDirectory, &parentInfo) == 0,
      parentInfo.st_uid == geteuid() || parentInfo.st_uid == 0,
      parentInfo.st_mode & 0o022 == 0 || parentInfo.st_mode & S_ISVTX != 0
    else { return }
    for entry in entries(of: parentDirectory) where entry.name.hasPrefix(prefix) && entry.isDirectory {
      let directory = openat(parentDirectory, entry.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
      guard directory >= 0 else { continue }
      var info = stat()
      let age = fstat(directory, &info) == 0 ? abs(now - info.st_mtim.tv_sec) : 0
      guard info.st_uid == geteuid(), info.st_mode & 0o7777 == 0o700, age >= staleAfter,
        !entries(of: directory).contains(where: \.isDirectory)
      else {
        close(directory)
        continue
      }
      let lock = openat(directory, ".lock", O_RDWR | O_NOFOLLOW | O_CLOEXEC)
      let free =
        lock >= 0 ? flock(lock, LOCK_EX | LOCK_NB) == 0 : errno == ENOENT && age >= lockLessAfter
      guard free else {
        if lock >= 0 { close(lock) }
        close(directory)
        continue
      }
      // Not held (or lock-less for a day): no live process uses it.
      remove(directory, named: parent + "/" + entry.name, lock: lock)
    }
  }
}
