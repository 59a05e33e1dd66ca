import CZlib
import Foundation

/// How much inflating one file may cost. A compressed stream is inflated to its end unless the
/// file's budget runs out first; then the rest of that file's compressed data is not inspected and
/// the file is reported as incomplete, never as clean.
public struct InflateBudget: Sendable, Equatable {
  /// Inflated bytes allowed per file: `baseBytes` plus `ratio` times the file's size. Ordinary
  /// compressed logs and blobs expand 3–20 times; a decompression bomb expands 1,000 times.
  public var baseBytes: Int
  public var ratio: Int
  /// Time allowed per file for inflating, in seconds (measured on the monotonic clock).
  public var seconds: Double

  /// 512 MiB plus 64 times the file's size, and 60 seconds, per file.
  public init(baseBytes: Int = 512 << 20, ratio: Int = 64, seconds: Double = 60) {
    self.baseBytes = baseBytes
    self.ratio = ratio
    self.seconds = seconds
  }

  func bytes(forFileOfSize size: Int) -> Int {
    let (scaled, overflow) = size.multipliedReportingOverflow(by: ratio)
    return overflow ? Int.max : baseBytes.addingReportingOverflow(scaled).overflow ? Int.max : baseBytes + scaled
  }
}

/// Where a stream's compressed bytes come from: the file itself, or a payload reassembled in memory.
enum CompressedInput {
  case file(fd: Int32, size: Int)
  case memory([UInt8])

  var count: Int {
    switch self {
    case .file(_, let size): size
    case .memory(let bytes): bytes.count
    }
  }

  func read(at offset: Int, count: Int) -> [UInt8] {
    switch self {
    case .file(let fd, _): RegionMap.read(fd, at: offset, count: count)
    case .memory(let bytes):
      offset < bytes.count ? Array(bytes[offset..<min(bytes.count, offset + count)]) : []
    }
  }
}

/// What is left of one file's inflate budget while it is scanned (and the zlib state its streams share).
struct InflateAllowance {
  let decoder = StreamDecoder()
  private(set) var remainingBytes: Int
  private let deadline: UInt64
  /// Why inflating stopped early, once it has: the file is then reported as incomplete.
  private(set) var exhausted: String?
  /// A valid stream that was not decoded (beyond a memory limit): the file is then incomplete too.
  var unsupported: String?

  init(_ budget: InflateBudget, fileSize: Int) {
    remainingBytes = budget.bytes(forFileOfSize: fileSize)
    let nanoseconds = budget.seconds >= 1e9 ? UInt64.max / 2 : UInt64(max(0, budget.seconds) * 1e9)
    deadline = Self.now() &+ nanoseconds
  }

  static func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
  }

  /// Takes `count` inflated bytes from the budget; false (and `exhausted` set) when it ran out.
  mutating func spend(_ count: Int) -> Bool {
    guard exhausted == nil else { return false }
    remainingBytes -= count
    if remainingBytes < 0 {
      exhausted = "compressed data beyond the per-file inflate budget (bytes) was not inspected"
    } else if Self.now() > deadline {
      exhausted = "compressed data beyond the per-file inflate budget (time) was not inspected"
    }
    return exhausted == nil
  }
}

/// How a stream ended.
enum InflateEnd: Equatable {
  /// The stream's end marker was reached after `consumed` compressed bytes.
  case ended(consumed: Int)
  /// The input ended (end of file or payload) before the stream did.
  case truncated(consumed: Int)
  /// Not valid deflate data from some point on (or never: a false start).
  case corrupt(consumed: Int)
  /// The file's budget ran out.
  case budget(consumed: Int)
  /// A valid stream the scanner will not decode (`reason` names the limit): the file is incomplete.
  case unsupported(reason: String, consumed: Int)

  var consumed: Int {
    switch self {
    case .ended(let count), .truncated(let count), .corrupt(let count), .budget(let count),
      .unsupported(_, let count):
      count
    }
  }
}

extension Scanner {
  /// Every valid zlib header as a 65,536-bit set: method 8, window 2^8–2^15, CMF·256+FLG a multiple
  /// of 31, no preset dictionary (RFC 1950 §2.2).
  static let zlibHeaders: [UInt64] = {
    var bits = [UInt64](repeating: 0, count: 1024)
    for header in 0..<65536 where header >> 8 & 0x8f == 0x08 && header % 31 == 0 && header & 0x20 == 0 {
      bits[header >> 6] |= 1 << (header & 63)
    }
    return bits
  }()

  /// Offsets where a compressed stream may start: a gzip member (1f 8b 08); a zlib header of any
  /// window size (CMF = CINFO 0–7 with method 8, the 16-bit header a multiple of 31, no preset
  /// dictionary; RFC 1950 §2.2); an xz stream, a zstd frame or a bzip2 stream by its magic number;
  /// a ZIP local file header (50 4b 03 04, APPNOTE §4.3.7) whose entry is deflated and not
  /// encrypted, at its data. (ZIP entries compressed with bzip2, xz or zstd hold a whole stream of
  /// that format, found by its magic number.)
  func compressedStreams(_ bytes: UnsafeRawBufferPointer) -> [(start: Int, format: StreamFormat)] {
    var starts = Patterns.occurrences(of: [0x1f, 0x8b, 0x08], in: bytes).map { (start: $0, format: StreamFormat.gzip) }
    // One pass over the bytes: eight at a time, only bytes that can be a CMF (low nibble 8, high
    // bit clear: 1 in 16 of random bytes) are looked up, with the FLG byte after them, in a table of
    // the valid 2-byte headers. (Eight memchr searches, one per CMF value, cost twice as much.)
    if bytes.count > 2, let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) {
      let last = bytes.count - 2
      Self.zlibHeaders.withUnsafeBufferPointer { table in
        func check(_ offset: Int) {
          let header = Int(base[offset]) << 8 | Int(base[offset + 1])
          if table[header >> 6] & (1 << (header & 63)) != 0 { starts.append((offset, .zlib)) }
        }
        var offset = 0
        while offset + 8 <= last {
          let word = UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self)
          // A byte of `candidate` is zero exactly where `word` has a possible CMF; the high bit of
          // each zero byte is then set in `zeros` (exact, no carries between bytes).
          let candidate = (word & 0x8f8f_8f8f_8f8f_8f8f) ^ 0x0808_0808_0808_0808
          let low = 0x7f7f_7f7f_7f7f_7f7f as UInt64
          var zeros = ~(((candidate & low) &+ low) | candidate | low)
          while zeros != 0 {
            check(offset + zeros.trailingZeroBitCount >> 3)
            zeros &= zeros - 1
          }
          offset += 8
        }
        while offset < last {
          check(offset)
          offset += 1
        }
      }
    }
    // xz (xz file format §2.1.1.1), zstd frames (RFC 8878 §3.1.1; 4 bytes, so found with memmem:
    // its first byte is '(' and common in text), bzip2 ("BZh", a level 1-9, then the first block's
    // magic 0x314159265359).
    starts += Patterns.occurrences(of: [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00], in: bytes).map { ($0, .xz) }
    starts += Patterns.occurrences(of: [0x28, 0xb5, 0x2f, 0xfd], in: bytes, longNeedle: true).map { ($0, .zstd) }
    for block in Patterns.occurrences(of: [0x31, 0x41, 0x59, 0x26, 0x53, 0x59], in: bytes) where block >= 4 {
      if bytes[block - 4] == 0x42, bytes[block - 3] == 0x5a, bytes[block - 2] == 0x68,
        (0x31...0x39).contains(bytes[block - 1])
      {
        starts.append((block - 4, .bzip2))
      }
    }
    for header in Patterns.occurrences(of: [0x50, 0x4b, 0x03, 0x04], in: bytes) where header + 30 <= bytes.count {
      func le16(_ at: Int) -> Int { Int(bytes[header + at]) | Int(bytes[header + at + 1]) << 8 }
      guard le16(8) == 8, le16(6) & 1 == 0 else { continue }
      // The data start may lie past this buffer; the stream is read from the input, not from here.
      starts.append((header + 30 + le16(26) + le16(28), .zipDeflate))
    }
    return starts
  }

  /// Inflates the stream at `start` of `input` to its end (or until the file's budget runs out),
  /// searching the output as it comes, 256 KiB at a time, for canaries and JSON text. Findings carry
  /// the stream's offset in the file, `fileOffset`.
  func scanCompressed(
    _ input: CompressedInput, at start: Int, format: StreamFormat, path: String, fileOffset: Int,
    allowance: inout InflateAllowance
  ) -> (findings: [Finding], end: InflateEnd) {
    var findings: [Finding] = []
    var reportedPatterns = Set<Int>()
    var reportedJSON = false
    // Each window holds the end of the previous one, so text that straddles two is seen whole.
    let overlap = max(longestPattern, 64) - 1
    var carry: [UInt8] = []
    let end = Self.inflate(input, at: start, format: format, allowance: &allowance) { output in
      let window = carry + output
      window.withUnsafeBytes { bytes in
        searcher.search(bytes) { _, index in
          guard reportedPatterns.insert(index).inserted else { return }
          findings.append(
            Finding(
              file: path, offset: fileOffset, region: "compressed-stream", detector: "canary",
              encoding: "inflated+" + patterns[index].encoding, excerpt: "inside a compressed stream (redacted)"))
        }
        if !reportedJSON, let first = jsonText(bytes).first {
          reportedJSON = true
          findings.append(
            Finding(
              file: path, offset: fileOffset, region: "compressed-stream", detector: "json-text", encoding: "inflated",
              excerpt: redact(window[first.start..<first.end])))
        }
      }
      carry = Array(window.suffix(overlap))
    }
    return (findings, end)
  }

  /// Inflates one stream incrementally: up to 64 KiB of input at a time, output handed to `body` in pieces
  /// of up to 256 KiB (the first only once it holds the format's minimum output, so false starts
  /// reach nobody). Memory stays bounded whatever the stream's size.
  static func inflate(
    _ input: CompressedInput, at start: Int, format: StreamFormat, allowance: inout InflateAllowance,
    _ body: ([UInt8]) -> Void
  ) -> InflateEnd {
    let decoder = allowance.decoder
    guard decoder.reset(format) else { return .corrupt(consumed: 0) }
    // The output buffer grows too (4 KiB to 256 KiB): a false start must cost almost nothing.
    var output = [UInt8](repeating: 0, count: 4 << 10)
    var filled = 0
    var delivered = 0
    var position = start
    var pendingInput: [UInt8] = []
    var inputUsed = 0
    var consumed = 0
    // Most candidate starts are false (random bytes that pass a header check) and fail within a few
    // bytes: read 512 bytes first, then more as the stream proves real.
    var readSize = 512
    func flush(force: Bool) {
      if filled == output.count, output.count < 256 << 10 {
        output += [UInt8](repeating: 0, count: output.count)
        if !force { return }
      }
      guard filled > 0, force || filled == output.count, delivered + filled >= format.minimumOutput else { return }
      body(Array(output[0..<filled]))
      delivered += filled
      filled = 0
    }
    while true {
      if inputUsed == pendingInput.count {
        pendingInput = input.read(at: position, count: readSize)
        position += pendingInput.count
        readSize = min(readSize * 2, 64 << 10)
        inputUsed = 0
        if pendingInput.isEmpty {
          flush(force: true)
          return .truncated(consumed: consumed)
        }
      }
      let (read, written, state) = pendingInput.withUnsafeMutableBytes { inBuffer in
        output.withUnsafeMutableBytes { outBuffer in
          decoder.step(
            UnsafeMutableRawBufferPointer(rebasing: inBuffer[inputUsed...]),
            UnsafeMutableRawBufferPointer(rebasing: outBuffer[filled...]))
        }
      }
      inputUsed += read
      filled += written
      consumed += read
      guard allowance.spend(written) else {
        flush(force: true)
        return .budget(consumed: consumed)
      }
      switch state {
      case .end:
        flush(force: true)
        return .ended(consumed: consumed)
      case .more where read > 0 || written > 0 || filled == output.count:
        flush(force: false)
      case .more, .corrupt:
        // (A step that neither read nor wrote with room on both sides would never end.)
        flush(force: true)
        return .corrupt(consumed: consumed)
      case .unsupported(let reason):
        flush(force: true)
        allowance.unsupported = reason
        return .unsupported(reason: reason, consumed: consumed)
      }
    }
  }
}

extension Scanner {
  /// Compressed formats the scanner does not decode, by the magic number a file starts with: such a
  /// file is scanned as raw bytes (which finds nothing inside), so it is reported as incomplete.
  /// Magic numbers from each format's specification: LZ4 frames (LZ4 frame format), 7z (its
  /// signature header) and lzip ("LZIP").
  static func undecodedCompression(_ head: [UInt8]) -> String? {
    let signatures: [(name: String, bytes: [UInt8])] = [
      ("lz4", [0x04, 0x22, 0x4d, 0x18]),
      ("7z", [0x37, 0x7a, 0xbc, 0xaf, 0x27, 0x1c]),
      ("lzip", Array("LZIP".utf8)),
    ]
    for signature in signatures where head.starts(with: signature.bytes) {
      return "compressed with \(signature.name), which the scanner does not decode"
    }
    return nil
  }

  /// A ZIP entry compressed with a method the scanner does not decode, and not encrypted (an
  /// encrypted entry is ciphertext, not a leak): its content cannot be inspected.
  static func undecodedZipEntries(_ bytes: UnsafeRawBufferPointer) -> Int? {
    for header in Patterns.occurrences(of: [0x50, 0x4b, 0x03, 0x04], in: bytes) where header + 30 <= bytes.count {
      let method = Int(bytes[header + 8]) | Int(bytes[header + 9]) << 8
      let flags = Int(bytes[header + 6]) | Int(bytes[header + 7]) << 8
      // Methods from APPNOTE §4.4.5: 0 stored, 8 deflate, 12 bzip2, 93 zstd and 95 xz are read
      // (the last three hold a whole stream with its magic number); 99 is AES encryption.
      if flags & 1 == 0, ![0, 8, 12, 93, 95, 99].contains(method) { return header }
    }
    return nil
  }
}
