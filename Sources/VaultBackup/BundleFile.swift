import Foundation
import VaultCrypto

/// A bundle opened for reading (positional reads; the descriptor is closed on deinit).
final class BundleReader {
  let path: String
  let descriptor: Int32
  let size: UInt64

  init(path: String) throws {
    self.path = path
    descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
    guard descriptor >= 0 else { throw BackupError.io(path: path, operation: "open", errno: errno) }
    var info = stat()
    guard fstat(descriptor, &info) == 0 else {
      let code = errno
      close(descriptor)
      throw BackupError.io(path: path, operation: "stat", errno: code)
    }
    guard info.st_mode & S_IFMT == S_IFREG else {
      close(descriptor)
      throw BackupError.notABundle(path: path)
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
final class WorkDirectory {
  let path: String

  init(parent: String) throws {
    var template = Array((parent + "/.vault-backup-work-XXXXXX").utf8CString)
    guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
      throw BackupError.io(path: parent, operation: "mkdtemp", errno: errno)
    }
    path = String(cString: made)
  }

  deinit { try? FileManager.default.removeItem(atPath: path) }
}
