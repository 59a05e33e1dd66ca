// The real standard streams, through StandardStreamIO (read(2) and write(2)).
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

  /// All of standard input, at most `limit` bytes (see `StandardStreamIO.readAll`): a larger
  /// file is refused before it is read, a larger stream once `limit` bytes have come.
  /// - Throws: `StandardInputError` naming what is wrong (closed, a directory, too large …).
  func readInput(limit: Int = inputLimit) throws(StandardInputError) -> [UInt8] {
    guard !closed.contains(STDIN_FILENO) else { throw .closed }
    do {
      return try StandardStreamIO.readAll(limit: limit)
    } catch {
      throw StandardInputError(error)
    }
  }

  // MARK: - Output

  /// Writes all of `bytes` to standard output, or records why it could not.
  func writeOutput(_ bytes: [UInt8]) {
    guard outputFailure == nil else { return }
    if closed.contains(STDOUT_FILENO) {
      lock.withLock { failure = .closed }
      return
    }
    do {
      try StandardStreamIO.write(bytes, to: .standardOutput)
    } catch {
      lock.withLock { failure = StandardOutputError(error) }
    }
  }

  /// Writes `text` to standard error, best effort (there is nowhere to report a failure).
  func writeError(_ text: String) {
    try? StandardStreamIO.write(Array(text.utf8), to: .standardError)
  }
}

/// Why standard input could not be used (exit 2, could not run).
enum StandardInputError: Error, Equatable, CustomStringConvertible {
  case closed
  case notReadable
  case directory
  case tooLarge(limit: Int)
  /// More than a record may hold under the byte cap `cap` of the container it is for.
  case tooLargeForCap(cap: Int)
  case outOfMemory(bytes: Int)
  case failed(errno: Int32)

  init(_ failure: StandardStreamIO.ReadFailure) {
    switch failure {
    case .closed: self = .closed
    case .notReadable: self = .notReadable
    case .directory: self = .directory
    case .tooLarge: self = .tooLarge(limit: VaultCommandLine.maximumRecordSize)
    case .outOfMemory(let bytes): self = .outOfMemory(bytes: bytes)
    case .failed(let code): self = .failed(errno: code)
    }
  }

  var description: String {
    switch self {
    case .closed: "standard input is closed; give the input on stdin (< FILE or a pipe)"
    case .notReadable:
      "standard input is not open for reading (it was opened for writing, as by 0>FILE); give the input with < FILE or a pipe"
    case .directory: "standard input is a directory; give the input from a file (< FILE) or a pipe"
    case .tooLarge(let limit):
      "the input is larger than \(limit >> 30) GiB, the most one record may hold; split it into smaller records"
    case .tooLargeForCap(let cap):
      "the input is larger than the \(cap - Envelope.overhead) bytes a record may hold under this command's "
        + "\(cap)-byte cap; nothing was stored: split it into smaller records"
    case .outOfMemory(let bytes):
      "not enough address space for a buffer of \(max(1, bytes >> 20)) MiB (ulimit -v); raise the limit and run again"
    case .failed(let code): "could not read standard input: \(String(cString: strerror(code)))"
    }
  }
}

/// Why standard output could not be written (exit 1, failure).
enum StandardOutputError: Error, Equatable, CustomStringConvertible {
  case closed
  case notWritable
  case failed(errno: Int32)

  init(_ failure: StandardStreamIO.WriteFailure) {
    switch failure {
    case .closed: self = .closed
    case .notWritable: self = .notWritable
    case .failed(let code): self = .failed(errno: code)
    }
  }

  var description: String {
    switch self {
    case .closed: "could not write to standard output: it is closed (run without >&-, or redirect it)"
    case .notWritable:
      "could not write to standard output: it is not open for writing (it was opened for reading, as by "
        + "1<FILE); redirect it with > FILE"
    case .failed(let code): "could not write to standard output: \(String(cString: strerror(code)))"
    }
  }
}
