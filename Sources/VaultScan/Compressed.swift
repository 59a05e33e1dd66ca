internal import CZlib
import Foundation

/// How much inflating one file may cost. A compressed stream is inflated to its end unless the
/// file's budget runs out first; then the rest of that file's compressed data is not inspected and
/// the file is reported as incomplete, never as clean.
public struct InflateBudget: Sendable, Equatable {
  /// Inflated bytes allowed per file: `baseBytes` plus `ratio` times the file's size. Ordinary
  /// compressed logs and blobs expand 3–20 times; a decompression bomb expands 1,000 times.
  public var baseBytes: Int
  /// How many inflated bytes each byte of the file adds to its allowance: a bomb runs out of it,
  /// an ordinary compressed file does not.
  public var ratio: Int
  /// Time allowed per file for inflating, in seconds (measured on the monotonic clock).
  public var seconds: Double

  /// 512 MiB plus 64 times the file's size, and 60 seconds, per file.
  ///
  /// - Parameters:
  ///   - baseBytes: inflated bytes every file may have, however small.
  ///   - ratio: inflated bytes allowed per byte of the file, on top of `baseBytes`.
  ///   - seconds: time allowed per file for inflating.
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
  case file(fd: Int32)
  /// A payload on SQLite overflow pages, offsets counted in the payload.
  case overflow(RegionMap.OverflowPayload)

  /// Up to `count` bytes from `offset`; `failure` gets the `errno` of a read that failed.
  func read(at offset: Int, count: Int, failure: inout Int32?) -> [UInt8] {
    switch self {
    case .file(let fd): RegionMap.read(fd, at: offset, count: count, failure: &failure)
    case .overflow(let payload): payload.read(at: offset, count: count, failure: &failure)
    }
  }
}

/// One file's decoding state while it is scanned: what is left of its budget, why decoding stopped
/// short (the file is then incomplete), and the decoders its streams reuse.
final class InflateAllowance {
  private(set) var remainingBytes: Int
  private let deadline: UInt64
  /// Why inflating stopped early, once it has: the file is then reported as incomplete.
  private(set) var exhausted: String?
  /// A valid stream that was not decoded (beyond a memory limit): the file is then incomplete too.
  var unsupported: String?
  /// A read of a stream's compressed bytes that failed (an I/O error, not the file's end): the
  /// file is then incomplete too.
  var readFailure: String?
  /// Streams being decoded at once, nested ones included: each holds a decoder (an xz one up to
  /// 128 MiB), so beyond this a further nested stream is not decoded and the file is incomplete.
  static let maximumLive = 6
  private var spareDecoders: [StreamDecoder] = []
  private var live = 0
  /// Screens deflate candidates before a decoder is set up for them.
  let probe = DeflateProbe()

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

  /// Takes `count` decoded bytes from the budget; false (and `exhausted` set) when it ran out.
  func spend(_ count: Int) -> Bool {
    guard exhausted == nil else { return false }
    remainingBytes -= count
    if remainingBytes < 0 {
      exhausted = "compressed data beyond the per-file inflate budget (bytes) was not inspected"
    } else if Self.now() > deadline {
      exhausted = "compressed data beyond the per-file inflate budget (time) was not inspected"
    }
    return exhausted == nil
  }

  /// xz and zstd decoders hold up to 128 MiB each: at most two at once, and never kept for reuse.
  static let maximumLiveLarge = 2
  private var liveLarge = 0

  /// A decoder ready for `format`, or nil (and the file marked incomplete) when too many are live.
  func decoder(for format: StreamFormat) -> StreamDecoder? {
    let large = format == .xz || format == .zstd
    guard live < Self.maximumLive, !large || liveLarge < Self.maximumLiveLarge else {
      unsupported = "more nested compressed streams at once than the scanner decodes"
      return nil
    }
    let decoder = large ? StreamDecoder() : spareDecoders.popLast() ?? StreamDecoder()
    guard decoder.reset(format) else {
      if !large { spareDecoders.append(decoder) }
      // The library could not allocate its state (memory short, a `ulimit -v`): a stream that
      // may be real went unread (an outside review: such an xz stream was passed over, clean).
      unsupported = unsupported ?? "\(format.withArticle) decoder could not be set up (out of memory)"
      return nil
    }
    live += 1
    if large { liveLarge += 1 }
    return decoder
  }

  /// Gives a decoder back once its stream has ended (an xz or zstd one is freed with its window).
  func release(_ decoder: StreamDecoder, format: StreamFormat) {
    live -= 1
    if format == .xz || format == .zstd {
      liveLarge -= 1
    } else {
      spareDecoders.append(decoder)
    }
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

/// Where a compressed stream may start: its signature (magic number, header or base64 prefix), where
/// its data begins (after a ZIP local header; the same place otherwise), and how to decode it.
struct StreamStart {
  let signature: Int
  let start: Int
  let format: StreamFormat
  let base64: Bool
  /// Set for a signature of data the scanner cannot read (nothing to decode): why.
  var unreadable: String? = nil
  /// How far past a signature `streamStarts` may look (a ZIP local header is 30 bytes): a caller
  /// whose next buffer repeats the last `lookahead` bytes passes `from` so none is examined twice.
  /// (Two lines of line-wrapped base64, up to 80 characters each, are looked at.)
  static let lookahead = 192
}

/// A quick test of deflate candidates before a stream is set up for them: zlib inflates the first
/// 64 bytes into scratch space, and a candidate it rejects there is no stream. Random bytes behind a
/// valid 2-byte header fail within them 99.9 % of the time (a back-reference further than what was
/// output, an impossible code table, a stored length whose complement does not match).
final class DeflateProbe {
  private var stream = z_stream()
  private var ready = false
  private var scratch = [UInt8](repeating: 0, count: 4096)

  func plausible(_ format: StreamFormat, _ bytes: UnsafeRawBufferPointer) -> Bool {
    // Half of all candidates fail on the first block header (RFC 1951 §3.2.3), checked here without
    // zlib: block type 3 is reserved, and a stored block's length is followed by its complement.
    if format == .zlib, bytes.count >= 7 {
      let type = bytes[2] >> 1 & 3
      if type == 3 { return false }
      if type == 0, bytes[3] != ~bytes[5] || bytes[4] != ~bytes[6] { return false }
    }
    let bits: Int32 = format == .gzip ? 31 : format == .zlib ? 15 : -15
    if ready {
      guard inflateReset2(&stream, bits) == Z_OK else { return true }
    } else {
      guard vault_inflate_init(&stream, bits) == Z_OK else { return true }
      ready = true
    }
    let input = UnsafeRawBufferPointer(rebasing: bytes.prefix(64))
    var result = Z_OK
    scratch.withUnsafeMutableBytes { out in
      stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress!.assumingMemoryBound(to: UInt8.self))
      stream.avail_in = UInt32(input.count)
      // 64 bytes of deflate can describe far more than 4 KiB: output is overwritten, only errors matter.
      while result == Z_OK, stream.avail_in > 0 {
        stream.next_out = out.baseAddress!.assumingMemoryBound(to: UInt8.self)
        stream.avail_out = UInt32(out.count)
        result = CZlib.inflate(&stream, Z_NO_FLUSH)
      }
    }
    return result == Z_OK || result == Z_STREAM_END || result == Z_BUF_ERROR
  }

  deinit { if ready { inflateEnd(&stream) } }
}

extension Scanner {
  /// The 2-byte beginnings worth a closer look, as a 65,536-bit set: every valid zlib header
  /// (method 8, window 2^8–2^15, CMF·256+FLG a multiple of 31, no preset dictionary; RFC 1950
  /// §2.2), and the first two bytes of every other magic number and base64 prefix below.
  static let startTable: [UInt64] = {
    var bits = [UInt64](repeating: 0, count: 1024)
    func set(_ header: Int) { bits[header >> 6] |= 1 << (header & 63) }
    for header in 0..<65536 where isZlibHeader(header) { set(header) }
    for magic in binaryMagic.map(\.bytes) + base64Prefixes.map(\.bytes) + unreadableMagic {
      set(Int(magic[0]) << 8 | Int(magic[1]))
    }
    return bits
  }()

  /// The 2-byte values `startTable` holds (first byte high), in order.
  static let startHeaders = (0..<65536).filter { startTable[$0 >> 6] & (1 << ($0 & 63)) != 0 }

  /// `startTable` as one byte per 2-byte value (64 KiB), indexed by the two bytes as one
  /// little-endian load gives them (first byte low): 1 where a signature may start.
  static let startBytesByLoad: [UInt8] = {
    var bytes = [UInt8](repeating: 0, count: 65536)
    for header in startHeaders { bytes[header >> 8 | (header & 0xff) << 8] = 1 }
    return bytes
  }()

  /// `startTable`'s pairs for the AVX2 pre-filter.
  static let startPairs = PairFilter(pairs: startHeaders)

  /// Whether `header` (first byte high) is a zlib header (RFC 1950 §2.2) without a preset
  /// dictionary. One with FDICT set is left out, and its file not listed as incomplete: it cannot
  /// be inflated without the dictionary, and about one position in 2,000 of random data passes
  /// the check with FDICT set, far too weak a sign to call a file incompletely read.
  static func isZlibHeader(_ header: Int) -> Bool {
    header >> 8 & 0x8f == 0x08 && header % 31 == 0 && header & 0x20 == 0
  }

  /// Magic numbers, from each format's specification: gzip (RFC 1952 §2.3.1, with method 8), xz
  /// (xz file format §2.1.1.1), zstd frames (RFC 8878 §3.1.1), bzip2 ("BZh", checked further below),
  /// ZIP local file headers (APPNOTE §4.3.7).
  private static let binaryMagic: [(bytes: [UInt8], format: StreamFormat)] = [
    ([0x1f, 0x8b, 0x08], .gzip), ([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00], .xz), ([0x28, 0xb5, 0x2f, 0xfd], .zstd),
    (Array("BZh".utf8), .bzip2), ([0x50, 0x4b, 0x03, 0x04], .zipDeflate),
  ]

  /// Signatures of what the scanner cannot read, besides a ZIP header (see `unreadable(at:in:)`).
  private static let unreadableMagic: [[UInt8]] = [[0x37, 0x7a], [0x04, 0x22], Array("LZ".utf8)]

  /// What base64 text of a compressed stream starts with: gzip `H4sI`, zlib `eJ` (0x78 0x9c, the
  /// default level), `eN` (0x78 0xda, levels 7–9), `eA` (0x78 0x01, level 0–1) and `eF` (0x78 0x5e,
  /// levels 2–5: an outside review found those two passed over), xz `/Td6WFo`, zstd `KLUv`, bzip2
  /// `Qlpo` ("BZh").
  private static let base64Prefixes: [(bytes: [UInt8], format: StreamFormat)] = [
    (Array("H4sI".utf8), .gzip), (Array("eJ".utf8), .zlib), (Array("eN".utf8), .zlib), (Array("eA".utf8), .zlib),
    (Array("eF".utf8), .zlib),
    (Array("/Td6WFo".utf8), .xz), (Array("KLUv".utf8), .zstd), (Array("Qlpo".utf8), .bzip2),
  ]

  /// `isBase64` of every byte value.
  private static let base64Table: [Bool] = (0...255).map { isBase64(UInt8($0)) }

  /// `isBase64` for the AVX2 block search.
  static let base64Bytes = ByteClass(isBase64)

  @inline(__always)
  static func isBase64(_ byte: UInt8) -> Bool {
    (byte | 0x20) &- 0x61 < 26 || byte &- 0x30 < 10 || byte == 0x2b || byte == 0x2f || byte == 0x2d || byte == 0x5f
  }

  /// Offsets where a compressed stream may start, in one pass over the bytes with `startTable`:
  /// a zlib header of any window size; a gzip member, an xz stream, a zstd frame or a bzip2 stream
  /// (BZh, a level 1–9, then the first block's magic 0x314159265359) by its magic number; the data
  /// of a deflated, unencrypted ZIP entry (ZIP entries compressed with bzip2, xz or zstd hold a
  /// whole stream of that format, found by its magic number); and base64 text of any of these
  /// (`base64`: one of the prefixes above where the byte before is not base64, so the run is
  /// aligned there, and at least 16 base64 characters follow).
  ///
  /// Only signatures at `from` or later are examined (what came before was examined with the
  /// previous buffer), and deflate candidates must pass `probe` (a 2-byte zlib header turns up
  /// every few hundred bytes of x86 code: `48 89` is a valid one).
  ///
  /// Bare zlib headers (2 bytes, so weak) are left out with `zlibHeaders: false`: inside what a
  /// zlib candidate decoded, which may be garbage from a false start that zlib has not rejected yet.
  func streamStarts(
    _ bytes: UnsafeRawBufferPointer, from: Int = 0, zlibHeaders: Bool = true, probe: DeflateProbe,
    vectorised: Bool = PairFilter.available
  ) -> [StreamStart] {
    guard bytes.count > 2, let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return [] }
    var starts: [StreamStart] = []
    func append(_ signature: Int, _ start: Int, _ format: StreamFormat, base64: Bool = false) {
      if !base64, start < bytes.count, format == .zlib || format == .gzip || format == .zipDeflate,
        !probe.plausible(format, UnsafeRawBufferPointer(rebasing: bytes[start...]))
      {
        return
      }
      starts.append(StreamStart(signature: signature, start: start, format: format, base64: base64))
    }
    func matches(_ magic: [UInt8], at offset: Int) -> Bool {
      offset + magic.count <= bytes.count && memcmp(base + offset, magic, magic.count) == 0
    }
    func examine(_ offset: Int, _ header: Int) {
      if let reason = Self.unreadable(at: offset, in: bytes) {
        starts.append(StreamStart(signature: offset, start: offset, format: .plain, base64: false, unreadable: reason))
      }
      if zlibHeaders, Self.isZlibHeader(header) { append(offset, offset, .zlib) }
      for (magic, format) in Self.binaryMagic where matches(magic, at: offset) {
        switch format {
        case .bzip2:
          guard offset + 10 <= bytes.count, (0x31...0x39).contains(base[offset + 3]),
            matches([0x31, 0x41, 0x59, 0x26, 0x53, 0x59], at: offset + 4)
          else { continue }
          append(offset, offset, .bzip2)
        case .zipDeflate:
          // Deflated and not encrypted. The data may start past this buffer; the stream is read from
          // the input, not from here.
          guard let entry = Self.zipLocalHeader(at: offset, in: bytes, wholeName: false), entry.method == 8,
            entry.flags & 1 == 0
          else { continue }
          append(offset, entry.dataStart, .zipDeflate)
        default:
          append(offset, offset, format)
        }
      }
      for (prefix, format) in Self.base64Prefixes where matches(prefix, at: offset) {
        guard offset == 0 || !Self.isBase64(base[offset - 1]), offset + 16 <= bytes.count,
          (offset..<(offset + 16)).allSatisfy({ Self.isBase64(base[$0]) })
        else { continue }
        append(offset, offset, format, base64: true)
      }
    }
    // The pass over every position (about a fifth of a scan): one byte of `startBytesByLoad` per
    // position, indexed by the two bytes as one load gives them. With AVX2, a nibble filter passes
    // 32 positions at a time and only those it finds are looked up; otherwise eight lookups per
    // branch (a micro-benchmark here: 0.34 ns a byte, against 0.8 for a bit table indexed byte by
    // byte).
    Self.startBytesByLoad.withUnsafeBufferPointer { table in
      let raw = UnsafeRawPointer(base)
      @inline(__always) func check(_ offset: Int) {
        if table[Int(UInt16(littleEndian: (raw + offset).loadUnaligned(as: UInt16.self)))] != 0 {
          examine(offset, Int(base[offset]) << 8 | Int(base[offset + 1]))
        }
      }
      var offset = min(max(0, from), bytes.count - 1)
      if vectorised {
        offset = Self.startPairs.forEachCandidate(in: bytes, from: offset, check)
      }
      while offset + 8 < bytes.count {
        let word = UInt64(littleEndian: (raw + offset).loadUnaligned(as: UInt64.self))
        @inline(__always) func at(_ shift: UInt64) -> UInt8 {
          table[Int(truncatingIfNeeded: (word &>> shift) & 0xffff)]
        }
        var any = at(0) | at(8) | at(16) | at(24) | at(32) | at(40) | at(48)
        any |= table[Int(truncatingIfNeeded: word &>> 56) | Int(base[offset + 8]) << 8]
        if any != 0 { for position in offset..<(offset + 8) { check(position) } }
        offset += 8
      }
      while offset < bytes.count - 1 {
        check(offset)
        offset += 1
      }
    }
    for line in Self.wrappedBase64Blocks(bytes, from: from) {
      starts.append(StreamStart(signature: line, start: line, format: .plain, base64: true))
    }
    return starts
  }

  /// Where line-wrapped base64 begins (MIME bodies wrap at 76 characters, PEM at 64): the first of
  /// two or more lines of 60–80 base64 characters. Its decoded bytes are searched like a stream's,
  /// since a wrap inside a canary's base64 form hides it from the encoded patterns.
  static func wrappedBase64Blocks(
    _ bytes: UnsafeRawBufferPointer, from: Int, vectorised: Bool = PairFilter.available
  ) -> [Int] {
    guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return [] }
    /// The length of the base64 line at `start` if it is 60–80 characters ended by a line break.
    func lineLength(_ start: Int) -> Int? {
      var end = start
      while end < bytes.count, end - start <= 80, isBase64(base[end]) { end += 1 }
      guard (60...80).contains(end - start), end < bytes.count, base[end] == 0x0a || base[end] == 0x0d else {
        return nil
      }
      return end - start
    }
    /// Whether the line ending at `end` (its line feed) is a base64 line of the same block.
    func previousLineIsBase64(_ end: Int) -> Bool {
      var before = end
      if before > 0, base[before - 1] == 0x0d { before -= 1 }
      var start = before
      while start > 0, before - start <= 80, isBase64(base[start - 1]) { start -= 1 }
      return (60...80).contains(before - start) && (start == 0 || base[start - 1] == 0x0a)
    }
    var blocks: [Int] = []
    // `isBase64` as a table (one load, no branch per comparison) for the sampled bytes and their runs.
    let table = base64Table
    /// Measures the run of base64 through `position` (a base64 byte), judges its start as a line
    /// start, and returns the run's end.
    func measureRun(through position: Int) -> Int {
      var start = position
      while start > 0, table[Int(base[start - 1])] { start -= 1 }
      var end = position + 1
      while end < bytes.count, table[Int(base[end])] { end += 1 }
      let isLineStart = start == 0 ? from <= 0 : base[start - 1] == 0x0a && start - 1 >= max(0, from)
      if isLineStart, end - start >= 60, let length = lineLength(start), start == 0 || !previousLineIsBase64(start - 1)
      {
        var next = start + length
        if next < bytes.count, base[next] == 0x0d { next += 1 }
        if next + 1 < bytes.count, base[next] == 0x0a, isBase64(base[next + 1]) { blocks.append(start) }
      }
      return end
    }
    // A block's first line is a run of 60–80 base64 characters with a line feed (or the buffer's
    // start) before it and a line break after it: a maximal run, since neither is base64. Each such
    // run is measured once, through a byte of it found as below, and its start judged as a line
    // start. The line starts judged are those after a line feed at `from` or later (and the
    // buffer's start when `from` is 0 or less), as when each line was found by its line feed; a
    // line start that is not where a run of 60 or more begins fails `lineLength` whatever it is,
    // so none is missed. (Random data: no memchr call and no measure per line.)
    //
    // With AVX2, 32 base64 bytes from every 16th position are looked for 32 bytes at a time, from
    // the start and again from the end of each run measured: every run of 47 or more that ends
    // where the loop stops holds them (runs of base64 shorter than a line, as in paths, hex and
    // tokens, mostly do not, and are not measured). From there (and without AVX2, from the start)
    // every 60th byte is looked at until one is base64: a run of 60 or more past the first holds
    // one of them, and a run through the first holds the first.
    let step = 60
    var position = vectorised ? 0 : step - 1
    if vectorised {
      position = Self.base64Bytes.forEachBlock(in: bytes, from: 0, span: 32, measureRun)
    }
    while position < bytes.count {
      guard table[Int(base[position])] else {
        position += step
        continue
      }
      // The next run of 60 or more starts past the end (not base64), and holds one of these.
      position = measureRun(through: position) + step
    }
    return blocks
  }

  /// Decodes the stream at `start` of `input` to its end (or until the file's budget runs out),
  /// searching the output as it comes for canaries and JSON text, and decoding the streams nested in
  /// it. Input is read 512 bytes first, then up to 64 KiB at a time as the stream proves real (most
  /// candidates are false starts that fail within a few bytes). Findings carry `fileOffset`.
  func scanCompressed(
    _ input: CompressedInput, at start: Int, format: StreamFormat, base64: Bool, path: String, fileOffset: Int,
    allowance: InflateAllowance, reportsCorruption: Bool, holder: Holder
  ) -> (findings: [Finding], end: InflateEnd) {
    let context = DecodeContext(
      scanner: self, path: path, fileOffset: fileOffset, allowance: allowance, reportsCorruption: reportsCorruption)
    guard
      let (chain, stream) = makeChain(
        format, base64: base64, context: context, scanner: self, depth: 1, parent: holder)
    else {
      return ([], .corrupt(consumed: 0))
    }
    var position = start
    var readSize = 512
    while true {
      var failure: Int32?
      let bytes = input.read(at: position, count: readSize, failure: &failure)
      if let failure {
        // Not the stream's end: what follows was not read, and may hold what is looked for.
        allowance.readFailure =
          allowance.readFailure
          ?? "a compressed stream could not be read to its end (\(String(cString: strerror(failure))))"
        break
      }
      position += bytes.count
      readSize = min(readSize * 2, 64 << 10)
      if bytes.isEmpty {
        chain.finish()
        break
      }
      if !bytes.withUnsafeBytes({ chain.push($0) }) { break }
    }
    let end = stream.end ?? .truncated(consumed: stream.consumed)
    // Through a base64 layer the stream's own count is of decoded bytes; the text read is what the
    // caller locates in the file.
    return (context.findings, base64 ? .truncated(consumed: position - start) : end)
  }
}

extension Scanner {
  /// What cannot be read at `offset` of `bytes` (a file, a tar member, a decoded stream), by its
  /// signature: 7z (its 6-byte signature header), LZ4 frames (04 22 4d 18, then a frame descriptor
  /// with version 01 and its reserved bits clear and a block size code of 4–7), lzip ("LZIP",
  /// version 1, a dictionary-size byte of 12–29 as a power of two), and a ZIP local file header
  /// (APPNOTE §4.3.7) whose entry is encrypted (ZipCrypto is broken, so it proves nothing) or
  /// compressed with a method the scanner does not decode. Nil when there is none.
  static func unreadable(at offset: Int, in bytes: UnsafeRawBufferPointer) -> String? {
    let available = bytes.count - offset
    func matches(_ magic: [UInt8]) -> Bool {
      available >= magic.count && zip(magic.indices, magic).allSatisfy { bytes[offset + $0] == $1 }
    }
    if matches([0x37, 0x7a, 0xbc, 0xaf, 0x27, 0x1c]) { return "holds 7z data, which the scanner does not decode" }
    if matches([0x04, 0x22, 0x4d, 0x18]), available >= 6, bytes[offset + 4] & 0xc2 == 0x40,
      bytes[offset + 5] & 0x8f == 0, bytes[offset + 5] >> 4 >= 4
    {
      return "holds LZ4 data, which the scanner does not decode"
    }
    if matches(Array("LZIP".utf8)), available >= 6, bytes[offset + 4] == 1, (12...29).contains(bytes[offset + 5] & 0x1f)
    {
      return "holds lzip data, which the scanner does not decode"
    }
    guard let (flags, method, _) = zipLocalHeader(at: offset, in: bytes, wholeName: true) else { return nil }
    // Methods APPNOTE §4.4.5 defines: the scanner reads 0 stored, 8 deflate, and 12 bzip2, 93
    // zstd and 95 xz, which hold a whole stream with its magic number; 99 marks AES encryption.
    let read: Set<Int> = [0, 8, 12, 93, 95]
    let undecoded: Set<Int> = [1, 2, 3, 4, 5, 6, 9, 10, 14, 18, 19, 20, 96, 97, 98]
    if flags & 1 != 0 || method == 99, read.union(undecoded).union([99]).contains(method) {
      return "holds encrypted ZIP entries, which the scanner cannot read"
    }
    return undecoded.contains(method) ? "holds ZIP entries compressed with a method the scanner does not decode" : nil
  }

  /// A plausible ZIP local file header at `offset` (APPNOTE §4.3.7): its 30 bytes, then a name of
  /// 0–65,535 bytes with no NUL in it (not the version field, which unzip ignores: a table of
  /// magic numbers, libmagic's, holds "PK\3\4" followed by anything). With `wholeName` false any
  /// name is taken (a deflated entry's data is screened by the deflate probe), one that runs past
  /// `bytes` on trust (it is read with the data): an outside review found entries named by a path
  /// of over 1,024 bytes (`zip -r` of a deep tree), an empty name or a tab neither decoded nor
  /// listed, and two reviews after found encrypted ones named by nothing, or with a line break, a
  /// control character or DEL in the name, or by a long name across a buffer's end, still not
  /// listed. Its flags, method, and where its data starts.
  static func zipLocalHeader(
    at offset: Int, in bytes: UnsafeRawBufferPointer, wholeName: Bool
  ) -> (flags: Int, method: Int, dataStart: Int)? {
    guard offset + 30 <= bytes.count, bytes[offset..<(offset + 4)].elementsEqual([0x50, 0x4b, 0x03, 0x04]) else {
      return nil
    }
    func le16(_ at: Int) -> Int { Int(bytes[offset + at]) | Int(bytes[offset + at + 1]) << 8 }
    let nameLength = le16(26)
    let nameEnd = offset + 30 + nameLength
    if wholeName {
      // A name that runs past `bytes` is judged by what is there (at least `StreamStart.lookahead`
      // bytes past the header, as a buffer's last signatures wait for the next): a review put a
      // 300-byte name across a chunk's end, and the entry was passed over.
      guard !bytes[(offset + 30)..<min(nameEnd, bytes.count)].contains(0) else { return nil }
    }
    return (le16(6), le16(8), nameEnd + le16(28))
  }
}
