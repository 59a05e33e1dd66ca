// C boundary: zlib's deflate with a gzip wrapper. Every zlib return code goes through `check`.
internal import CZlib
import Outbox
import VaultCrypto

/// zlib failures (by zlib's return code; nothing of the data).
public struct GzipError: CodedError, Equatable, CustomStringConvertible {
  /// zlib's return code (`Z_MEM_ERROR`, …).
  public let zlibCode: Int32
  /// The zlib function that failed.
  public let call: String

  init(code: Int32, call: String) {
    zlibCode = code
    self.call = call
  }

  /// The zlib call and its code (`zlib deflateInit2 failed (code -4)`), nothing of the data.
  public var description: String { "zlib \(call) failed (code \(zlibCode))" }
  /// The same as `description`, for `localizedDescription`.
  public var errorDescription: String? { description }
  /// `gzip.failed`, whatever the call and zlib code (both are fields of their own).
  public var code: String { "gzip.failed" }
}

/// A streaming gzip compressor. `append(_:)` with a sync flush makes the compressed size so far
/// exact, which is how batches are packed against their compressed size.
final class GzipStream {
  private var stream = z_stream()
  private(set) var output: [UInt8] = []
  private var finished = false

  init(level: Int32 = 6) throws {
    try check(vault_deflate_init_gzip(&stream, level), "deflateInit2")
  }

  deinit { deflateEnd(&stream) }

  /// Compressed bytes produced so far (after a sync flush: everything appended so far).
  var compressedCount: Int { output.count }

  /// Appends `bytes`, then flushes to a byte boundary so `compressedCount` covers them.
  func append(_ bytes: [UInt8]) throws { try run(bytes, flush: Z_SYNC_FLUSH) }

  /// Ends the stream (final block and gzip trailer) and returns the whole compressed body.
  func finish() throws -> [UInt8] {
    if !finished {
      try run([], flush: Z_FINISH)
      finished = true
    }
    return output
  }

  private func run(_ bytes: [UInt8], flush: Int32) throws {
    var chunk = [UInt8](repeating: 0, count: 16_384)
    var input = bytes
    try input.withUnsafeMutableBufferPointer { inputBuffer in
      stream.next_in = inputBuffer.baseAddress
      stream.avail_in = UInt32(inputBuffer.count)
      while true {
        let produced = try chunk.withUnsafeMutableBufferPointer { out -> Int in
          stream.next_out = out.baseAddress
          stream.avail_out = UInt32(out.count)
          let result = deflate(&stream, flush)
          guard result == Z_OK || result == Z_STREAM_END || result == Z_BUF_ERROR else {
            throw GzipError(code: result, call: "deflate")
          }
          return out.count - Int(stream.avail_out)
        }
        output += chunk[0..<produced]
        // Done when zlib had room to spare (all input consumed and flushed), or the stream ended.
        if stream.avail_out != 0 || (flush == Z_FINISH && produced == 0) { break }
      }
      stream.next_in = nil
    }
  }

  private func check(_ result: Int32, _ call: String) throws {
    guard result == Z_OK else { throw GzipError(code: result, call: call) }
  }
}

/// Compresses `bytes` into one gzip member.
func gzip(_ bytes: [UInt8]) throws -> [UInt8] {
  let stream = try GzipStream()
  try stream.append(bytes)
  return try stream.finish()
}
