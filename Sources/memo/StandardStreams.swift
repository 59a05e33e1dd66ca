// memo's standard streams, through vault's public StandardStreamIO (read(2) and write(2), with the
// same headroom checks as vault), and a helper thread made with pthread_create.
import Foundation
import Vault

/// Why standard input cannot give a memo (exit 2).
enum InputProblem: Error, CustomStringConvertible {
  case closed
  case notReadable
  case directory
  case tooLarge(limit: Int)
  case outOfMemory(bytes: Int)
  case failed(errno: Int32)

  var description: String {
    switch self {
    case .closed: "standard input is closed; give the memo as TEXT or on stdin"
    case .notReadable:
      "standard input is not open for reading (it was opened for writing, as by 0>FILE); give the memo as TEXT, "
        + "from a file (< FILE) or a pipe"
    case .directory: "standard input is a directory; give the memo as TEXT, from a file or a pipe"
    case .tooLarge(let limit): "the memo is larger than \(limit) bytes, the most the queue keeps for one record"
    case .outOfMemory(let bytes):
      "not enough address space for a buffer of \(max(1, bytes >> 20)) MiB (ulimit -v); raise the limit and run again"
    case .failed(let code): "could not read standard input: \(String(cString: strerror(code)))"
    }
  }
}

enum StandardStreams {
  /// All of standard input, at most `limit` bytes.
  static func readAll(limit: Int) throws(InputProblem) -> [UInt8] {
    // A stdin closed at start (ProcessHardening put /dev/null there) is `.closed`, not an empty memo.
    do {
      return try StandardStreamIO.readAll(limit: limit)
    } catch {
      switch error {
      case .closed: throw .closed
      case .notReadable: throw .notReadable
      case .directory: throw .directory
      case .tooLarge: throw .tooLarge(limit: limit)
      case .outOfMemory(let bytes): throw .outOfMemory(bytes: bytes)
      case .failed(let code): throw .failed(errno: code)
      }
    }
  }

  /// Writes `text` to standard output; nil, or why it could not be written.
  static func writeOutput(_ text: String) -> String? {
    do {
      try StandardStreamIO.write(Array(text.utf8), to: .standardOutput)
      return nil
    } catch {
      switch error {
      case .closed: return "it is closed"
      case .notWritable: return "it is not open for writing (it was opened for reading, as by 1<FILE)"
      case .failed(let code): return String(cString: strerror(code))
      }
    }
  }

  /// Writes `text` to standard error, best effort.
  static func writeError(_ text: String) { try? StandardStreamIO.write(Array(text.utf8), to: .standardError) }
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
