// System-call boundary for files that hold keys or the manifest: owner and mode checks,
// atomic replacement, and directory fsync. Every failing call becomes a KeyStoreError.io.
import Foundation
import VaultCrypto

/// File operations with the durability and permission rules that key material needs.
package enum SecureFile {
  /// The largest file `read` will load; keyfiles and manifests are far smaller.
  static let readLimit = 1 << 20

  /// Creates `path` (and missing parents) as directories with `mode`; an existing directory is kept as is.
  package static func makeDirectory(_ path: String, mode: mode_t = 0o700) throws {
    var info = stat()
    if stat(path, &info) == 0 {
      guard info.st_mode & S_IFMT == S_IFDIR else {
        throw KeyStoreError.io(path: path, operation: "mkdir", errno: ENOTDIR)
      }
      return
    }
    let parent = (path as NSString).deletingLastPathComponent
    if !parent.isEmpty, parent != path { try makeDirectory(parent, mode: mode) }
    guard mkdir(path, mode) == 0 || errno == EEXIST else {
      throw KeyStoreError.io(path: path, operation: "mkdir", errno: errno)
    }
  }

  /// What a file that is not a regular file is, for a sentence: "a directory", "a FIFO", "a
  /// socket", "a device", "a symlink" (from `lstat`), else "a special file".
  ///
  /// - Parameter mode: the file's `st_mode`.
  package static func kind(_ mode: mode_t) -> String {
    switch mode & S_IFMT {
    case S_IFDIR: "a directory"
    case S_IFIFO: "a FIFO"
    case S_IFSOCK: "a socket"
    case S_IFCHR, S_IFBLK: "a device"
    case S_IFLNK: "a symlink"
    default: "a special file"
    }
  }

  /// Refuses a file or directory that is not owned by the effective user or that group/others may
  /// read or write, the way ssh treats private keys.
  ///
  /// A directory that is shared (sticky, or writable by others: /tmp, /var/tmp, /dev/shm) or that
  /// belongs to someone else is refused as `unsafeKeyfileDirectory`, whose hint is a private
  /// directory of the user's own: changing such a directory's mode or owner would break it for
  /// the others who use it.
  package static func checkPrivate(_ path: String, info: stat, isDirectory: Bool, keyfile: String? = nil) throws {
    let me = geteuid()
    let mode = UInt32(info.st_mode)
    if isDirectory, KeyStoreError.isShared(directoryMode: mode) || info.st_uid != me {
      throw KeyStoreError.unsafeKeyfileDirectory(path: path, mode: mode, owner: info.st_uid, expected: me)
    }
    guard info.st_uid == me else {
      throw KeyStoreError.wrongOwner(path: path, owner: info.st_uid, expected: me)
    }
    guard info.st_mode & 0o077 == 0 else {
      // A directory used for other things (/etc, /home, a project's folder) is not made private
      // for a keyfile: a chmod there would lock others out of what else it holds.
      if isDirectory, !holdsOnlyKeyfiles(path, keyfile: keyfile) {
        throw KeyStoreError.unsafeKeyfileDirectory(path: path, mode: mode, owner: info.st_uid, expected: me)
      }
      throw KeyStoreError.insecurePermissions(path: path, mode: mode, isDirectory: isDirectory)
    }
  }

  /// Whether the directory holding `path` belongs to `user`: a file of another user's in a
  /// directory of the user's own was made there by them, or by vault run as them (with sudo), and
  /// is given back with `chown`, not by running as that user.
  package static func isInDirectoryOf(_ user: uid_t, _ path: String) -> Bool {
    let directory = (path as NSString).deletingLastPathComponent
    var info = stat()
    return stat(directory.isEmpty ? "." : directory, &info) == 0 && info.st_uid == user
  }

  /// The command that gives a file to `user`: only root may give a file away, so another user's
  /// runs under sudo.
  package static func chown(to user: uid_t) -> String { user == 0 ? "chown 0" : "sudo chown \(user)" }

  /// Whether the directory at `path` holds nothing but keyfiles (`*.keys`, and `keyfile`, the
  /// name of the one being read, whatever it is called) and what their writes leave (`.tmp-*`
  /// beside them): one made for keyfiles, whose mode `chmod 700` may tighten. (A directory holding
  /// only a keyfile named `keys` was said to hold "other files than keyfiles": a review.)
  static func holdsOnlyKeyfiles(_ path: String, keyfile: String? = nil) -> Bool {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
    return names.allSatisfy { name in
      if name.hasSuffix(".keys") || name.contains(".keys.tmp-") { return true }
      guard let keyfile else { return false }
      return name == keyfile || name.hasPrefix(keyfile + ".tmp-")
    }
  }

  /// Reads a whole file into zeroizing memory. Returns nil when the file does not exist.
  /// With `requirePrivate`, the file and its directory must pass `checkPrivate`, and symlinks are refused.
  package static func read(_ path: String, requirePrivate: Bool) throws -> SecureBytes? {
    if requirePrivate {
      let directory = (path as NSString).deletingLastPathComponent
      var dirInfo = stat()
      if stat(directory.isEmpty ? "." : directory, &dirInfo) == 0 {
        try checkPrivate(
          directory.isEmpty ? "." : directory, info: dirInfo, isDirectory: true,
          keyfile: (path as NSString).lastPathComponent)
      }
    }
    // O_NONBLOCK: a FIFO (or device) at the path would otherwise block this open until a writer
    // came; it is refused below as not a regular file. Regular files ignore the flag.
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (requirePrivate ? O_NOFOLLOW : 0))
    if fd < 0 {
      if errno == ENOENT { return nil }
      if errno == ELOOP { throw KeyStoreError.notARegularFile(path: path) }
      throw KeyStoreError.io(path: path, operation: "open", errno: errno)
    }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw KeyStoreError.io(path: path, operation: "stat", errno: errno) }
    guard info.st_mode & S_IFMT == S_IFREG else { throw KeyStoreError.notARegularFile(path: path) }
    if requirePrivate {
      try checkPrivate(path, info: info, isDirectory: false)
      // Another name for the same bytes may sit anywhere on the file system (inside the data,
      // say), and would keep retired keys after the next rewrite replaced this one.
      guard info.st_nlink <= 1 else { throw KeyStoreError.hardLinked(path: path, links: Int(info.st_nlink)) }
    }
    let size = Int(info.st_size)
    guard size <= readLimit else { throw KeyStoreError.corruptKeyfile(path: path, reason: "larger than 1 MiB") }
    return try SecureBytes(count: size) { buffer in
      var done = 0
      while done < size {
        let n = Glibc.read(fd, buffer.baseAddress! + done, size - done)
        if n < 0, errno == EINTR { continue }
        guard n > 0 else { throw KeyStoreError.io(path: path, operation: "read", errno: n < 0 ? errno : EIO) }
        done += n
      }
    }
  }

  /// Replaces `path` atomically with `bytes`: write a temporary file with `mode` beside it, fsync it,
  /// rename it over `path`, then fsync the directory so the rename itself is durable.
  package static func atomicWrite(_ path: String, bytes: UnsafeRawBufferPointer, mode: mode_t = 0o600) throws {
    let directory = (path as NSString).deletingLastPathComponent
    let suffix = (try? SecureRandom.bytes(6).map { String(format: "%02x", $0) }.joined()) ?? "\(getpid())"
    let temporary = path + ".tmp-" + suffix
    let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode)
    guard fd >= 0 else { throw KeyStoreError.io(path: temporary, operation: "create", errno: errno) }
    var closed = false
    do {
      defer { if !closed { close(fd) } }
      guard fchmod(fd, mode) == 0 else { throw KeyStoreError.io(path: temporary, operation: "chmod", errno: errno) }
      var done = 0
      while done < bytes.count {
        let n = write(fd, bytes.baseAddress! + done, bytes.count - done)
        if n < 0, errno == EINTR { continue }
        guard n > 0 else { throw KeyStoreError.io(path: temporary, operation: "write", errno: n < 0 ? errno : EIO) }
        done += n
      }
      guard fsync(fd) == 0 else { throw KeyStoreError.io(path: temporary, operation: "fsync", errno: errno) }
      closed = true
      guard close(fd) == 0 else { throw KeyStoreError.io(path: temporary, operation: "close", errno: errno) }
      guard rename(temporary, path) == 0 else { throw KeyStoreError.io(path: path, operation: "rename", errno: errno) }
    } catch {
      unlink(temporary)
      throw error
    }
    try syncDirectory(directory.isEmpty ? "." : directory)
  }

  /// fsyncs a directory so that entries created, renamed or removed in it survive a crash.
  package static func syncDirectory(_ path: String) throws {
    let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard fd >= 0 else { throw KeyStoreError.io(path: path, operation: "open directory", errno: errno) }
    defer { close(fd) }
    guard fsync(fd) == 0 else { throw KeyStoreError.io(path: path, operation: "fsync directory", errno: errno) }
  }
}
