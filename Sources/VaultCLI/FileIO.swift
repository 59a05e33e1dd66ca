// C boundary: `seal` and `open` files through open(2) (O_TMPFILE), fstat(2), read(2), mkstemp(3),
// fsync(2), linkat(2), link(2) and unlink(2). Everything else in the command line reads and
// writes standard streams.
import Foundation
import Vault

/// The file named as a command's input, and the file it writes with `-o`.
enum FileIO {
  /// The directory and the last name of `path`, split at its last "/" as the kernel reads it:
  /// nothing is resolved or dropped (`URL` would drop "link/.." on paper, and the kernel resolves
  /// it through the link, to another directory, maybe another file system). The directory is "."
  /// for a bare name and "/" for a name at the root.
  static func split(_ path: String) -> (directory: String, name: String) {
    var trimmed = Substring(path)
    while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
    guard let slash = trimmed.lastIndex(of: "/") else { return (".", String(trimmed)) }
    let directory = trimmed[..<slash]
    return (directory.isEmpty ? "/" : String(directory), String(trimmed[trimmed.index(after: slash)...]))
  }

  /// A new temporary file (mkstemp, mode 0600) in the directory of `path`, named after it:
  /// `.NAME.vault-XXXXXX`, so a rename or link to `path` stays on one file system.
  /// - Returns: its descriptor and path, or nil with `errno` set.
  static func temporaryFile(beside path: String) -> (fd: Int32, path: String)? {
    let (directory, name) = split(path)
    var template = Array((directory + "/." + name + ".vault-XXXXXX").utf8CString)
    let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
    guard fd >= 0 else { return nil }
    return (fd, String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
  }

  /// Flushes the directory holding `path`, so a new name in it survives a crash. Most callers take
  /// it as best effort (a directory that cannot be opened or flushed leaves the file written, only
  /// its name less sure); `reseal` does not, since it replaces the only copy of an envelope.
  /// - Returns: false with `errno` set when the directory could not be opened or flushed.
  @discardableResult
  static func syncDirectory(of path: String) -> Bool {
    let fd = open(split(path).directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard fd >= 0 else { return false }
    let synced = fsync(fd) == 0
    let code = errno
    close(fd)
    errno = code
    return synced
  }

  /// Writes all of `bytes` to `fd`, retrying short writes and EINTR.
  /// - Returns: false with `errno` set when a write fails.
  static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    while offset < bytes.count {
      let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) }
      if written < 0, errno == EINTR { continue }
      guard written >= 0 else { return false }
      offset += written
    }
    return true
  }

  /// The identity of a file: two paths name the same file when both are equal.
  struct Identity: Equatable {
    let device: UInt64
    let inode: UInt64

    init(_ info: stat) {
      device = UInt64(info.st_dev)
      inode = UInt64(info.st_ino)
    }
  }

  /// All of the regular file at `path`, at most `limit` bytes, and its identity.
  ///
  /// Opened non-blocking so a FIFO is refused instead of waiting for a writer; anything but a
  /// regular file (a directory, FIFO, socket or device) is refused before a byte is read, and so
  /// is a file larger than `limit`.
  /// - Throws: `FileError` (exit 2), or `StandardInputError.tooLarge` / `.outOfMemory` as for stdin.
  static func readRegularFile(_ path: String, limit: Int) throws -> ([UInt8], Identity) {
    let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
    guard fd >= 0 else { throw FileError.inputUnreadable(path: path, errno: errno) }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw FileError.inputUnreadable(path: path, errno: errno) }
    guard info.st_mode & S_IFMT == S_IFREG else {
      throw FileError.inputNotRegular(path: path, kind: SecureFile.kind(info.st_mode))
    }
    let size = Int(info.st_size)
    guard size <= limit else { throw StandardInputError.tooLarge(limit: VaultCommandLine.maximumRecordSize) }
    guard MemoryHeadroom.available(size + 1) else { throw StandardInputError.outOfMemory(bytes: size) }
    var bytes = [UInt8](repeating: 0, count: size)
    var offset = 0
    while offset < size {
      let got = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + offset, size - offset) }
      if got < 0, errno == EINTR { continue }
      guard got >= 0 else { throw FileError.inputUnreadable(path: path, errno: errno) }
      if got == 0 { break }  // The file shrank while it was read: take what is there.
      offset += got
    }
    return (Array(bytes[0..<offset]), Identity(info))
  }

  /// All of what `path` holds, read to its end: a FIFO too (`--canary-file <(…)`), whose writer
  /// it waits for.
  ///
  /// - Parameters:
  ///   - path: the file.
  ///   - limit: the most bytes read; nil when more is there (read up to `limit + 1`).
  /// - Returns: its bytes, or nil when it holds more than `limit`.
  /// - Throws: `FileError.inputUnreadable` with the errno of the call that failed.
  static func readAll(_ path: String, limit: Int) throws -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw FileError.inputUnreadable(path: path, errno: errno) }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var block = [UInt8](repeating: 0, count: 65536)
    while true {
      let got = block.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
      if got < 0, errno == EINTR { continue }
      guard got >= 0 else { throw FileError.inputUnreadable(path: path, errno: errno) }
      if got == 0 { return bytes }
      bytes += block[0..<got]
      if bytes.count > limit { return nil }
    }
  }

  /// The identity of what is at `path` now, nil when nothing is (a dangling link counts as
  /// something: `writeAtomically` would refuse it).
  static func identity(_ path: String) -> Identity? {
    var info = stat()
    if stat(path, &info) == 0 { return Identity(info) }
    return lstat(path, &info) == 0 ? Identity(info) : nil
  }

  /// The identity of standard input when it is a regular file (`< FILE`), else nil.
  static func standardInputIdentity() -> Identity? {
    var info = stat()
    guard fstat(STDIN_FILENO, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
    return Identity(info)
  }

  /// Writes `bytes` to a new file at `path`, mode 0600, never replacing anything there.
  ///
  /// The bytes go to a file without a name (O_TMPFILE) in the same directory, which is flushed to
  /// disk and then linked to `path` (linkat(2) fails if `path` exists, so the check and the
  /// creation are one step); the directory is flushed too. `path` therefore either does not exist
  /// or holds all of `bytes`, and a process killed at any point leaves no other name for them
  /// (the plaintext `open` writes, in a hidden file nobody would know to remove). Where the file
  /// system or the kernel has no O_TMPFILE, or /proc is not mounted, a named temporary file
  /// beside `path` is linked and unlinked instead, removed on every failure this function sees.
  /// - Throws: `FileError.outputExists` or `.outputFailed`.
  static func writeAtomically(_ bytes: [UInt8], to path: String) throws {
    if let fd = anonymousFile(beside: path) {
      return try writeAnonymously(fd, bytes, to: path)
    }
    guard let (fd, temporary) = temporaryFile(beside: path) else {
      throw FileError.outputFailed(path: path, errno: errno)
    }
    var linked = false
    defer {
      if !linked { unlink(temporary) }
    }
    do {
      try fill(fd, with: bytes, for: path)
    } catch {
      close(fd)
      throw error
    }
    close(fd)
    try checkLink(link(temporary, path), to: path)
    linked = true
    // The temporary is now a second name for the same bytes (the plaintext, for `open -o`): left
    // behind, it would outlive the output when that is deleted. unlink can fail (EIO); say so.
    let removed = unlink(temporary) == 0 || errno == ENOENT || unlink(temporary) == 0 || errno == ENOENT
    let code = errno
    syncDirectory(of: path)
    guard removed else { throw FileError.temporaryLeft(path: path, temporary: temporary, errno: code) }
  }

  /// Linux's O_TMPFILE, which Glibc's module does not export (a macro of macros): `__O_TMPFILE`,
  /// 020000000 on x86_64 and aarch64, with O_DIRECTORY.
  private static let temporaryFileFlag = Int32(0o20_000_000) | O_DIRECTORY

  /// A new file without a name (O_TMPFILE, mode 0600) in the directory of `path`, or nil when
  /// this file system or kernel makes none or /proc (needed to give it a name) is not mounted;
  /// the caller then uses a named temporary file.
  static func anonymousFile(beside path: String) -> Int32? {
    guard access("/proc/self/fd", X_OK) == 0 else { return nil }
    let directory = split(path).directory
    let fd = open(directory, temporaryFileFlag | O_WRONLY | O_CLOEXEC, 0o600)
    return fd >= 0 ? fd : nil
  }

  /// Gives the nameless file `fd` (from `anonymousFile(beside:)`) a new hidden name beside `path`,
  /// `.NAME.vault-XXXXXX` as `temporaryFile(beside:)` makes, six random letters or digits drawn
  /// again while the name is taken.
  /// - Returns: that name, or nil with `errno` set when linkat(2) fails otherwise.
  static func name(anonymous fd: Int32, beside path: String) -> String? {
    let (directory, name) = split(path)
    let prefix = directory + "/." + name + ".vault-"
    let letters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
    var random = SystemRandomNumberGenerator()
    for _ in 0..<100 {
      let name = prefix + String((0..<6).map { _ in letters[Int(random.next(upperBound: UInt(letters.count)))] })
      if linkat(AT_FDCWD, "/proc/self/fd/\(fd)", AT_FDCWD, name, AT_SYMLINK_FOLLOW) == 0 { return name }
      guard errno == EEXIST else { return nil }
    }
    return nil
  }

  /// Writes `bytes` to the nameless file `fd`, flushes it, and links it to `path` (EEXIST when
  /// anything is there), then flushes the directory. Closes `fd`; a failure leaves no file.
  private static func writeAnonymously(_ fd: Int32, _ bytes: [UInt8], to path: String) throws {
    defer { close(fd) }
    try fill(fd, with: bytes, for: path)
    try checkLink(linkat(AT_FDCWD, "/proc/self/fd/\(fd)", AT_FDCWD, path, AT_SYMLINK_FOLLOW), to: path)
    syncDirectory(of: path)
  }

  /// Makes the open file `fd` mode 0600 and holds `bytes`, flushed to disk (both ways of writing
  /// `path`).
  /// - Throws: `FileError.outputFailed` with the failing call's errno.
  private static func fill(_ fd: Int32, with bytes: [UInt8], for path: String) throws {
    guard fchmod(fd, 0o600) == 0, FileIO.writeAll(fd, bytes), fsync(fd) == 0 else {
      throw FileError.outputFailed(path: path, errno: errno)
    }
  }

  /// Throws for a link(2) or linkat(2) to `path` that returned `result`, reading its errno:
  /// `outputExists` when anything is there (nothing is ever replaced), else `outputFailed`.
  private static func checkLink(_ result: Int32, to path: String) throws {
    guard result != 0 else { return }
    let code = errno
    if code == EEXIST { throw FileError.outputExists(path: path) }
    throw FileError.outputFailed(path: path, errno: code)
  }
}

/// Why the input file could not be read or the output file written (exit 2: nothing was done).
enum FileError: Error, Equatable, CustomStringConvertible {
  case inputNotRegular(path: String, kind: String)
  case inputUnreadable(path: String, errno: Int32)
  case inputEmpty(path: String)
  /// `scan --canary-file` names a file that is not UTF-8 (its bytes are never shown).
  case canaryFileNotText(path: String)
  /// `scan --canary-file` names a file that holds more than `limit` bytes (`/dev/zero` grew the
  /// process until it died: an outside review).
  case canaryFileTooLarge(path: String, limit: Int)
  case outputExists(path: String)
  case outputFailed(path: String, errno: Int32)
  /// `path` was written, but the temporary file it was linked from, a second name for the same
  /// bytes, could not be removed.
  case temporaryLeft(path: String, temporary: String, errno: Int32)

  var description: String {
    switch self {
    case .inputNotRegular(let path, let kind):
      "\(path) is \(kind), not a regular file; give a file, or pipe the input on standard input"
    case .inputUnreadable(let path, let code): "could not read \(path): \(String(cString: strerror(code)))"
    case .inputEmpty(let path): "\(path) is empty; it holds no envelope"
    case .canaryFileNotText(let path): "the canary file \(path) is not UTF-8 text; give one canary a line, in UTF-8"
    case .canaryFileTooLarge(let path, let limit):
      "the canary file \(path) holds more than \(limit >> 20) MiB; give one canary a line, or split them over runs"
    case .outputExists(let path):
      "\(path) already exists; vault never overwrites a file with -o: remove it or choose another name"
    case .outputFailed(let path, let code):
      "could not write \(path): \(String(cString: strerror(code))) (nothing was written there)"
    case .temporaryLeft(let path, let temporary, let code):
      "wrote \(path), but could not remove \(temporary), a second name for the same bytes "
        + "(\(String(cString: strerror(code)))); remove it yourself, or it outlives \(path)"
    }
  }
}
