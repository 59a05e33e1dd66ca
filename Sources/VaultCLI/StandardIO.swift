// C boundary: the real standard streams, through read(2), write(2), fstat(2) and mmap(2).
import Foundation
import Vault

/// The process's standard streams, read and written with system calls so that every failure is an
/// error the command reports: FileHandle's `readDataToEndOfFile` and `write` trap on EISDIR,
/// EBADF, ENOSPC and EPIPE.
final class StandardStreams: @unchecked Sendable {
  /// The most standard input holds for any command: the largest record plus an envelope's header
  /// and tag. `seal` and `open` check their own limit against what was read.
  static let inputLimit = VaultCommandLine.maximumRecordSize + Envelope.overhead

  private let closed: Set<Int32>
  private let lock = NSLock()
  private var failure: StandardOutputError?

  /// - Parameter closed: the descriptors that were closed at start (`ProcessHardening` points
  ///   them at /dev/null, which must not be mistaken for an empty input or a working output).
  init(closed: [Int32]) { self.closed = Set(closed) }

  /// The first failure writing standard output; later writes are dropped.
  var outputFailure: StandardOutputError? { lock.withLock { failure } }

  // MARK: - Input

  /// All of standard input, at most `inputLimit` bytes.
  /// - Throws: `StandardInputError` naming what is wrong (closed, a directory, too large …).
  func readInput() throws(StandardInputError) -> [UInt8] {
    guard !closed.contains(STDIN_FILENO) else { throw .closed }
    var info = stat()
    guard fstat(STDIN_FILENO, &info) == 0 else { throw StandardInputError(errno: errno) }
    if info.st_mode & S_IFMT == S_IFDIR { throw .directory }
    // A regular file says how big it is: refuse before reading any of it.
    let known = info.st_mode & S_IFMT == S_IFREG ? Int(info.st_size) : nil
    if let known, known > Self.inputLimit { throw .tooLarge(limit: VaultCommandLine.maximumRecordSize) }
    var bytes: [UInt8] = []
    try reserve(&bytes, known.map { $0 + 1 } ?? 65536)
    var scratch = [UInt8](repeating: 0, count: 1 << 20)
    while true {
      let got = scratch.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
      if got < 0 {
        let code = errno
        if code == EINTR { continue }
        if code == EAGAIN || code == EWOULDBLOCK {
          // A non-blocking descriptor from the caller: wait until there is something to read.
          var poller = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
          _ = poll(&poller, 1, -1)
          continue
        }
        throw StandardInputError(errno: code)
      }
      if got == 0 { return bytes }
      if bytes.count + got > Self.inputLimit { throw .tooLarge(limit: VaultCommandLine.maximumRecordSize) }
      if bytes.count + got > bytes.capacity {
        // Doubling, as Array would, but checked first: an array that cannot be allocated traps.
        try reserve(&bytes, min(Self.inputLimit, max(bytes.capacity * 2, bytes.count + got)))
      }
      bytes.append(contentsOf: scratch[0..<got])
    }
  }

  /// Grows `bytes` to hold `capacity` bytes, first making sure the address space has room for the
  /// new buffer beside the old one (an array that cannot be allocated traps; this throws).
  private func reserve(_ bytes: inout [UInt8], _ capacity: Int) throws(StandardInputError) {
    guard capacity > bytes.capacity else { return }
    guard MemoryHeadroom.available(capacity + bytes.capacity) else { throw .outOfMemory(bytes: capacity) }
    bytes.reserveCapacity(capacity)
  }

  // MARK: - Output

  /// Writes all of `bytes` to standard output, or records why it could not.
  func writeOutput(_ bytes: [UInt8]) {
    guard outputFailure == nil else { return }
    if closed.contains(STDOUT_FILENO) {
      lock.withLock { failure = .closed }
      return
    }
    let code = Self.writeAll(STDOUT_FILENO, bytes)
    if code != 0 { lock.withLock { failure = code == EBADF ? .closed : .failed(errno: code) } }
  }

  /// Writes `text` to standard error, best effort (there is nowhere to report a failure).
  func writeError(_ text: String) {
    _ = Self.writeAll(STDERR_FILENO, Array(text.utf8))
  }

  /// write(2) until done; 0, or the errno that stopped it.
  private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Int32 {
    bytes.withUnsafeBytes { buffer in
      var offset = 0
      while offset < buffer.count {
        let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
        if written >= 0 {
          offset += written
          continue
        }
        switch errno {
        case EINTR: continue
        case EAGAIN, EWOULDBLOCK:
          var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
          _ = poll(&poller, 1, -1)
        case let code: return code
        }
      }
      return 0
    }
  }
}

/// Whether the address space has room for `bytes` more, under `ulimit -v`: a probe reservation
/// that takes no memory (PROT_NONE) and is released at once.
enum MemoryHeadroom {
  static func available(_ bytes: Int) -> Bool {
    guard bytes > 0 else { return true }
    let probe = mmap(nil, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    guard let probe, probe != MAP_FAILED else { return false }
    munmap(probe, bytes)
    return true
  }
}

/// Why standard input could not be used (exit 2, could not run).
enum StandardInputError: Error, Equatable, CustomStringConvertible {
  case closed
  case directory
  case tooLarge(limit: Int)
  case outOfMemory(bytes: Int)
  case failed(errno: Int32)

  init(errno code: Int32) {
    switch code {
    case EBADF: self = .closed
    case EISDIR: self = .directory
    default: self = .failed(errno: code)
    }
  }

  var description: String {
    switch self {
    case .closed: "standard input is closed; give the input on stdin (< FILE or a pipe)"
    case .directory: "standard input is a directory; give the input from a file (< FILE) or a pipe"
    case .tooLarge(let limit):
      "the input is larger than \(limit >> 30) GiB, the most one record may hold; split it into smaller records"
    case .outOfMemory(let bytes):
      "not enough address space for a buffer of \(max(1, bytes >> 20)) MiB (ulimit -v); raise the limit and run again"
    case .failed(let code): "could not read standard input: \(String(cString: strerror(code)))"
    }
  }
}

/// Why standard output could not be written (exit 1, failure).
enum StandardOutputError: Error, Equatable, CustomStringConvertible {
  case closed
  case failed(errno: Int32)

  var description: String {
    switch self {
    case .closed: "could not write to standard output: it is closed (run without >&-, or redirect it)"
    case .failed(let code): "could not write to standard output: \(String(cString: strerror(code)))"
    }
  }
}
