// C boundary for memo: standard streams through read(2) and write(2), and a helper thread made
// with pthread_create. FileHandle traps on EISDIR, EBADF, ENOSPC and EPIPE; these return errors.
import Foundation
import Vault

/// Why standard input cannot give a memo (exit 2).
enum InputProblem: Error, CustomStringConvertible {
  case closed
  case directory
  case tooLarge(limit: Int)
  case failed(errno: Int32)

  var description: String {
    switch self {
    case .closed: "standard input is closed; give the memo as TEXT or on stdin"
    case .directory: "standard input is a directory; give the memo as TEXT, from a file or a pipe"
    case .tooLarge(let limit): "the memo is larger than \(limit) bytes, the most the queue keeps for one record"
    case .failed(let code): "could not read standard input: \(String(cString: strerror(code)))"
    }
  }
}

enum StandardStreams {
  /// All of standard input, at most `limit` bytes.
  static func readAll(limit: Int) throws(InputProblem) -> [UInt8] {
    // ProcessHardening put /dev/null on a closed stdin; that is not an empty memo.
    guard !ProcessHardening.closedStandardStreams.contains(STDIN_FILENO) else { throw .closed }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
      let count = chunk.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
      if count < 0 {
        switch errno {
        case EINTR: continue
        case EBADF: throw .closed
        case EISDIR: throw .directory
        case let code: throw .failed(errno: code)
        }
      }
      if count == 0 { return bytes }
      guard bytes.count + count <= limit else { throw .tooLarge(limit: limit) }
      bytes += chunk[0..<count]
    }
  }

  /// Writes `text` to standard output; nil, or why it could not be written.
  static func writeOutput(_ text: String) -> String? {
    if ProcessHardening.closedStandardStreams.contains(STDOUT_FILENO) { return "it is closed" }
    let code = writeAll(STDOUT_FILENO, Array(text.utf8))
    return code == 0 ? nil : String(cString: strerror(code))
  }

  /// Writes `text` to standard error, best effort.
  static func writeError(_ text: String) { _ = writeAll(STDERR_FILENO, Array(text.utf8)) }

  private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Int32 {
    bytes.withUnsafeBytes { buffer in
      var offset = 0
      while offset < buffer.count {
        let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
        if written >= 0 {
          offset += written
        } else if errno != EINTR {
          return errno
        }
      }
      return 0
    }
  }
}

/// Runs `body` on a thread of its own and waits for it at most `timeout` seconds; runs it on the
/// calling thread when no thread can be started. (DispatchQueue.async is not used for this:
/// when a thread cannot be created it retries pthread_create forever and never returns.)
func onAnotherThread(timeout: Double, _ body: @escaping @Sendable () -> Void) {
  final class Job: Sendable {
    let body: @Sendable () -> Void
    let done = DispatchSemaphore(value: 0)
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
  }
  let job = Job(body)
  let context = Unmanaged.passRetained(job).toOpaque()
  var thread = pthread_t()
  let started = pthread_create(
    &thread, nil,
    { raw in
      let job = Unmanaged<Job>.fromOpaque(raw!).takeRetainedValue()
      job.body()
      job.done.signal()
      return nil
    }, context)
  guard started == 0 else {
    Unmanaged<Job>.fromOpaque(context).release()
    body()
    return
  }
  pthread_detach(thread)
  _ = job.done.wait(timeout: .now() + timeout)
}
