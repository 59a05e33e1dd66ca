internal import CZlib
import Foundation

/// Something that takes bytes as they come: a decoder, a base64 layer in front of one.
protocol ByteSink: AnyObject {
  /// Takes the next bytes; false once the sink wants no more (its stream ended or is not valid).
  func push(_ bytes: UnsafeRawBufferPointer) -> Bool
  /// No more bytes will come.
  func finish()
}

/// What one compressed stream found in the file shares with the streams nested inside it: the
/// findings so far (one per canary form, and the first JSON text), the budget, reusable decoders.
final class DecodeContext {
  /// Layers decoded (a ZIP in a ZIP in a ZIP in a ZIP); a strong signature found deeper makes the
  /// file incomplete rather than being passed over.
  static let maximumDepth = 4
  let searcher: MultiSearcher
  let patterns: [Pattern]
  let overlap: Int
  let path: String
  let fileOffset: Int
  let allowance: InflateAllowance
  /// Whether a stream that breaks after decoding something makes the file incomplete: not in SQLite
  /// files, where pages interrupt what was written whole (their overflow pass reassembles it).
  let reportsCorruption: Bool
  private(set) var findings: [Finding] = []
  private var reportedPatterns = Set<Int>()
  private var reportedDetectors = Set<String>()
  private var reportedKey = false

  init(scanner: Scanner, path: String, fileOffset: Int, allowance: InflateAllowance, reportsCorruption: Bool) {
    self.reportsCorruption = reportsCorruption
    searcher = scanner.searcher
    patterns = scanner.patterns
    overlap = max(scanner.longestPattern, Scanner.minimumOverlap) - 1
    self.path = path
    self.fileOffset = fileOffset
    self.allowance = allowance
  }

  /// Searches decoded bytes for canaries (one finding per canary form for the whole stream, at its
  /// offset in the file), and returns what the heuristics that mean something in `kind` found (the
  /// sink decides whether they stand).
  func search(_ window: [UInt8], kind: ContentKind, judged: Bool, scanner: Scanner) -> [Finding] {
    var heuristic: [Finding] = []
    window.withUnsafeBytes { bytes in
      searcher.search(bytes) { _, index in
        guard reportedPatterns.insert(index).inserted else { return }
        findings.append(
          Finding(
            file: path, offset: fileOffset, region: "compressed-stream", detector: "canary",
            encoding: "inflated+" + patterns[index].encoding, excerpt: "inside a compressed stream (redacted)"))
      }
      // Key material is an exact detector too: a key in a .gz or a ZIP entry is one on disk (one
      // finding per stream, at its offset, as for each canary form). A stream that decodes to
      // exactly a vault keyfile is the key, with nothing else in it to judge.
      if !reportedKey, KeyMaterial.isVaultKeyfile(bytes) {
        reportedKey = true
        findings.append(
          Finding(
            file: path, offset: fileOffset, region: "compressed-stream", detector: "key-material",
            encoding: "inflated+vault-keyfile",
            excerpt: "a vault keyfile inside a compressed stream (redacted); keys belong outside the data directory"))
        return
      }
      if !reportedKey, let key = KeyMaterial.armouredKeys(bytes).first {
        reportedKey = true
        findings.append(
          Finding(
            file: path, offset: fileOffset, region: "compressed-stream", detector: "key-material",
            encoding: "inflated+pem", excerpt: redactKey(window[key.start..<key.end])))
      }
      guard judged else { return }
      var hits: [TextDetectors.Hit] = []
      if kind.judgesJSON, let first = scanner.jsonText(bytes).first {
        hits.append(TextDetectors.Hit(start: first.start, end: first.end, detector: "json-text"))
      }
      hits += kind.textFindings(bytes)
      for hit in hits where !reportedDetectors.contains(hit.detector) {
        heuristic.append(
          Finding(
            file: path, offset: fileOffset, region: "compressed-stream", detector: hit.detector, encoding: "inflated",
            excerpt: redact(window[hit.start..<hit.end])))
      }
    }
    return heuristic
  }

  /// Adds heuristic findings that stand (one per detector for the whole stream).
  func keep(_ heuristic: [Finding]) {
    for finding in heuristic where reportedDetectors.insert(finding.detector).inserted { findings.append(finding) }
  }
}

/// What holds a compressed stream: what it is, and whether it is an archive whose members are files
/// in their own right (their streams are judged as the files they hold, not as records).
struct Holder {
  let kind: ContentKind
  let isArchive: Bool

  /// Archives by their first bytes: a git pack ("PACK", version 2 or 3; git's pack format), a tar
  /// ("ustar" at offset 257, POSIX.1-1988), a ZIP (a local file header at offset 0).
  static func isArchive(_ head: [UInt8]) -> Bool {
    if head.count >= 8, head.starts(with: Array("PACK".utf8)), head[4...6].allSatisfy({ $0 == 0 }),
      head[7] == 2 || head[7] == 3
    {
      return true
    }
    if head.count >= 262, head[257..<262].elementsEqual("ustar".utf8) { return true }
    return head.starts(with: [0x50, 0x4b, 0x03, 0x04])
  }
}

/// Receives one stream's decoded bytes in pieces: searches them (each window overlapping the last,
/// so text across two pieces is seen whole), and decodes the streams that start inside them, to
/// `DecodeContext.maximumDepth` layers (a .gz inside a .zip inside a .gz; base64 of a gzip in a log).
final class DecodedSink {
  private let context: DecodeContext
  private let scanner: Scanner
  private let depth: Int
  /// The format of the stream whose output this is.
  private let format: StreamFormat
  /// What holds the stream: the file, or what the stream around this one decoded to.
  private let parent: Holder
  private var parentKind: ContentKind { parent.kind }
  /// Whether this stream's own output is an archive (set with its kind, from its first piece).
  private var isArchive = false
  private var carry: [UInt8] = []
  /// What the decoded content is, judged from its first piece (a text log, a document, a database…).
  private var kind: ContentKind?
  private var pendingHeuristics: [Finding] = []
  private var children: [any ByteSink] = []
  /// Output offset (of this stream) before which every signature was examined already.
  private var examinedUpTo = 0
  private var received = 0

  init(context: DecodeContext, scanner: Scanner, depth: Int, format: StreamFormat, parent: Holder) {
    self.parent = parent
    self.context = context
    self.scanner = scanner
    self.depth = depth
    self.format = format
  }

  func receive(_ piece: [UInt8]) {
    let window = carry + piece
    let windowStart = received - carry.count
    // What the content is, and whether it is an archive, are judged once, from its first piece.
    if self.kind == nil {
      self.kind = judgedKind(of: piece)
      isArchive = Holder.isArchive(Array(piece.prefix(512)))
    }
    let kind = self.kind!
    pendingHeuristics += context.search(window, kind: kind, judged: Self.judges(inside: parentKind), scanner: scanner)
    // A stream with a strong signature is real: what it decodes to is judged at once. A bare zlib
    // header (or a ZIP header's raw deflate, where random bytes follow a copied magic) may be a
    // false start decoding garbage until zlib rejects it: its findings wait.
    if format != .zlib && format != .zipDeflate {
      context.keep(pendingHeuristics)
      pendingHeuristics = []
    }
    piece.withUnsafeBytes { bytes in children = children.filter { $0.push(bytes) } }
    window.withUnsafeBytes { bytes in
      var candidates = scanner.streamStarts(
        bytes, from: examinedUpTo - windowStart, zlibHeaders: format != .zlib, probe: context.allowance.probe)
      // What cannot be read inside decoded data makes the file incomplete, as in the file itself.
      if kind != .compiledCode, let reason = candidates.lazy.compactMap(\.unreadable).first {
        context.allowance.unsupported = reason
      }
      candidates.removeAll { $0.unreadable != nil }
      guard depth < DecodeContext.maximumDepth else {
        // Any stream a layer deeper, base64 of one and a zlib stream past the deflate probe too (an
        // outside review: a fifth layer of base64 or zlib was left undecoded and unlisted); not a
        // block of wrapped base64 lines, which the canary search reads as base64 already.
        if candidates.contains(where: { $0.format != .plain }) {
          context.allowance.unsupported =
            "compressed data nested more than \(DecodeContext.maximumDepth) layers deep was not decoded"
        }
        return
      }
      for candidate in candidates {
        guard
          let (chain, _) = makeChain(
            candidate.format, base64: candidate.base64, context: context, scanner: scanner, depth: depth + 1,
            parent: Holder(kind: kind, isArchive: isArchive))
        else { continue }
        // A ZIP entry's data may start past this window (a long extra field): its bytes are
        // skipped as they come.
        let child: any ByteSink =
          candidate.start < bytes.count ? chain : SkipLayer(candidate.start - bytes.count, then: chain)
        let first = UnsafeRawBufferPointer(rebasing: bytes[min(candidate.start, bytes.count)...])
        if first.isEmpty || child.push(first) { children.append(child) }
      }
    }
    received += piece.count
    // (The carry is longer than the lookahead, so those bytes are examined with the next piece.)
    examinedUpTo = received - StreamStart.lookahead
    carry = Array(window.suffix(context.overlap))
  }

  /// What the decoded content is judged as, from its first piece: a compressed file (the stream that
  /// starts the file, a ZIP entry, an object in a git pack or a member of a tar) by what it decodes to, as if it were the file; a blob embedded in a database,
  /// a memory image or a binary file as that binary data (a compressed note in a row is a record,
  /// even when it is a page of prose), unless it decodes to compiled code.
  private func judgedKind(of piece: [UInt8]) -> ContentKind {
    let own = ContentKind.of(
      head: Array(Self.withoutGitHeader(piece).prefix(65536)),
      fileKind: piece.starts(with: Array("SQLite format 3".utf8) + [0]) ? .database : .other, vaultMetadata: false)
    let wholeFile = (depth == 1 && context.fileOffset == 0) || format == .zipDeflate || parent.isArchive
    switch (parentKind, own) {
    case (_, .compiledCode), (_, .vaultMetadata), (_, .sqlite): return own
    case (.sqlite, _), (.memoryImage, _), (.binary, _): return wholeFile ? own : .binary
    default: return own
    }
  }

  /// A git loose object is zlib of "<type> <size>\0" and then the content (git's object storage
  /// format): the content is what the object is judged by, as the file it was in the work tree.
  static func withoutGitHeader(_ piece: [UInt8]) -> ArraySlice<UInt8> {
    for type in ["blob ", "tree ", "commit ", "tag "] where piece.starts(with: Array(type.utf8)) {
      let digits = piece.dropFirst(type.utf8.count).prefix { (0x30...0x39).contains($0) }
      let end = type.utf8.count + digits.count
      if !digits.isEmpty, end < piece.count, piece[end] == 0 { return piece[(end + 1)...] }
    }
    return piece[...]
  }

  /// Whether what a stream decodes to is judged by the heuristics, from what holds it: yes where a
  /// compressed blob stands for records (a database, a memory image, an unknown binary, a log line,
  /// a compressed file, which is binary to look at); not in documents, source and configuration
  /// (a certificate's base64, a PDF's page streams), nor in compiled code or vault's metadata.
  static func judges(inside parent: ContentKind) -> Bool {
    switch parent {
    case .sqlite, .memoryImage, .binary, .textLog: true
    case .text, .compiledCode, .vaultMetadata: false
    }
  }

  /// The stream ended: `valid` unless its decoder rejected what followed.
  func finish(valid: Bool = true) {
    if valid { context.keep(pendingHeuristics) }
    pendingHeuristics = []
    for child in children { child.finish() }
    children = []
  }
}

/// Builds decoder → sink (and a base64 layer in front when the stream is base64 text): what to push
/// bytes into, and the decoder itself; nil when no decoder can be had.
func makeChain(
  _ format: StreamFormat, base64: Bool, context: DecodeContext, scanner: Scanner, depth: Int,
  parent: Holder
) -> (any ByteSink, PushDecoder)? {
  guard let decoder = context.allowance.decoder(for: format) else { return nil }
  let sink = DecodedSink(context: context, scanner: scanner, depth: depth, format: format, parent: parent)
  let stream = PushDecoder(format: format, decoder: decoder, sink: sink, context: context)
  return (base64 ? Base64Layer(stream, stream: stream, allowance: context.allowance) : stream, stream)
}

/// Feeds one stream's compressed bytes, as they come, to its decoder, and hands what comes out to
/// its sink in pieces of up to 256 KiB (the first only once it holds the format's minimum output,
/// so false starts reach nobody).
final class PushDecoder: ByteSink {
  let format: StreamFormat
  private var decoder: StreamDecoder?
  private let sink: DecodedSink
  private let context: DecodeContext
  // The output buffer grows (4 KiB to 256 KiB): a false start must cost almost nothing.
  private var output = [UInt8](repeating: 0, count: 4 << 10)
  private var filled = 0
  private var delivered = 0
  private(set) var consumed = 0
  /// The stream's first 24 bytes, kept to tell a damaged or unreadable stream from bytes that only
  /// look like its start: an xz stream header (against a program's copy of the magic number), a
  /// gzip member's fixed header and a zstd frame's header and first block header (against random
  /// bytes).
  private var leading: [UInt8] = []
  /// How the stream ended, once it has.
  private(set) var end: InflateEnd?

  init(format: StreamFormat, decoder: StreamDecoder, sink: DecodedSink, context: DecodeContext) {
    self.format = format
    self.decoder = decoder
    self.sink = sink
    self.context = context
  }

  func push(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard end == nil, let decoder else { return false }
    if format == .xz || format == .gzip || format == .zstd, leading.count < 24 {
      leading += bytes.prefix(24 - leading.count)
    }
    var used = 0
    while true {
      let (read, written, state) = output.withUnsafeMutableBytes { outBuffer in
        decoder.step(
          UnsafeMutableRawBufferPointer(mutating: UnsafeRawBufferPointer(rebasing: bytes[used...])),
          UnsafeMutableRawBufferPointer(rebasing: outBuffer[filled...]))
      }
      used += read
      consumed += read
      filled += written
      guard context.allowance.spend(written) else { return stop(.budget(consumed: consumed)) }
      switch state {
      case .end: return stop(.ended(consumed: consumed))
      case .unsupported(let reason):
        // A zstd frame header that asks for more than the scanner has (a dictionary, a window over
        // 128 MiB) is read before any block: from random bytes it is a false start unless its
        // first block header holds too.
        if format == .zstd, !Self.isZstdFrameStart(leading) { return stop(.corrupt(consumed: consumed)) }
        context.allowance.unsupported = reason
        return stop(.unsupported(reason: reason, consumed: consumed))
      case .corrupt:
        // A stream with a strong signature that decoded something and then broke (a flipped bit
        // on disk) keeps the rest of its data where it cannot be read. A bare zlib header may be a
        // false start, and inside SQLite files a page boundary cuts what the page pass reassembles.
        if context.reportsCorruption, delivered + filled > 0, format != .zlib,
          format != .gzip || delivered + filled >= 1024 || Self.isWrittenGzipHeader(leading)
        {
          context.allowance.unsupported =
            "\(format.withArticle) stream is corrupt after its first bytes; the rest of it was not read"
        } else if context.reportsCorruption, format == .bzip2 || format == .xz && Self.isXzStreamHeader(leading) {
          // A bzip2 signature ("BZh", a level and the six-byte block magic) or an xz stream
          // header (its magic, flags and their CRC32) does not turn up by chance: one that breaks
          // before its first byte out is a damaged stream, whose later blocks may still hold data
          // (an outside review: a bzip2 file with a corrupt first block was passed over, clean,
          // while `bzip2recover` got the rest back). The xz magic alone is in programs (liblzma,
          // libmagic) as a constant.
          context.allowance.unsupported =
            "\(format.withArticle) stream is corrupt from its start; it was not read"
        }
        return stop(.corrupt(consumed: consumed))
      case .more:
        let full = filled == output.count
        if full { flush(force: false) }
        if used == bytes.count && !full { return true }
        // (A step that neither read nor wrote with room on both sides would never end.)
        if read == 0 && written == 0 && !full { return stop(.corrupt(consumed: consumed)) }
      }
    }
  }

  func finish() { _ = stop(.truncated(consumed: consumed)) }

  /// Whether `bytes` hold a zstd frame header and a first block header that a zstd writer could
  /// have made (RFC 8878 §3.1.1.1 and §3.1.1.2): the reserved bit of the frame header descriptor
  /// clear, and after the header's optional fields a block that is not of the reserved type and
  /// not larger than 128 KiB. Random bytes after the magic number (in ciphertext, once in 4 GiB)
  /// pass one time in 43; their window size or dictionary id, which the decoder refuses before any
  /// block, made a scan of 4 GB of random files incomplete once. Too few bytes to tell: true.
  static func isZstdFrameStart(_ bytes: [UInt8]) -> Bool {
    guard bytes.count >= 5 else { return true }
    let descriptor = bytes[4]
    guard descriptor & 0x08 == 0 else { return false }
    let singleSegment = descriptor & 0x20 != 0
    let dictionary = [0, 1, 2, 4][Int(descriptor & 3)]
    let content = [singleSegment ? 1 : 0, 2, 4, 8][Int(descriptor >> 6)]
    let block = 5 + (singleSegment ? 0 : 1) + dictionary + content
    guard bytes.count >= block + 3 else { return true }
    let header = Int(bytes[block]) | Int(bytes[block + 1]) << 8 | Int(bytes[block + 2]) << 16
    return header >> 1 & 3 != 3 && header >> 3 <= 128 << 10
  }

  /// Whether `bytes` start with a gzip member header as writers make them (RFC 1952 §2.3.1): the
  /// magic and method 8, no reserved flag, extra flags 0, 2 or 4, and an operating system of 0–19
  /// or 255 (RFC 1952 names 0–13; zlib since 1.2.12 writes 19 on Apple systems, and 16–18 for
  /// BeOS, Tandem and OS/400: an outside review found a damaged member from macOS passed over). Ciphertext holds the magic and method once in 16 MiB; of those starts with no reserved
  /// flag (one in eight), one in 26 decoded a few bytes and then broke (Python's zlib, 50,000
  /// random starts), so containers of envelopes alone, 200 MB and 1 GB, were reported incomplete
  /// (an outside review). These fields rule out all but one random start in 1,040. And no random
  /// start broke after more than 484 bytes out (75,000 tries), so a member that breaks after
  /// 1,024 bytes out is damaged, whatever its header.
  static func isWrittenGzipHeader(_ bytes: [UInt8]) -> Bool {
    guard bytes.count >= 10, bytes[0] == 0x1f, bytes[1] == 0x8b, bytes[2] == 8, bytes[3] & 0xe0 == 0 else {
      return false
    }
    return [0, 2, 4].contains(bytes[8]) && (bytes[9] <= 19 || bytes[9] == 255)
  }

  /// Whether `bytes` are a valid xz stream header (xz file format 2.1.1): the magic, stream flags
  /// of a null byte and a check type of at most 0x0F, and the CRC32 of the flags, little-endian.
  static func isXzStreamHeader(_ bytes: [UInt8]) -> Bool {
    guard bytes.count >= 12, bytes[6] == 0, bytes[7] <= 0x0F else { return false }
    let crc = bytes[6..<8].withContiguousStorageIfAvailable { UInt32(CZlib.crc32(0, $0.baseAddress, 2)) } ?? 0
    return crc == UInt32(bytes[8]) | UInt32(bytes[9]) << 8 | UInt32(bytes[10]) << 16 | UInt32(bytes[11]) << 24
  }

  /// Hands decoded bytes to the sink; the minimum output that keeps false starts out does not apply
  /// to a stream that `ended` with its checksum (a 9-byte password compressed with zlib is real).
  private func flush(force: Bool, ended: Bool = false) {
    if filled == output.count, output.count < 256 << 10 {
      output += [UInt8](repeating: 0, count: output.count)
      if !force { return }
    }
    guard filled > 0, force || filled == output.count, ended || delivered + filled >= format.minimumOutput else {
      return
    }
    sink.receive(Array(output[0..<filled]))
    delivered += filled
    filled = 0
  }

  private func stop(_ how: InflateEnd) -> Bool {
    guard end == nil else { return false }
    end = how
    if case .ended = how { flush(force: true, ended: true) } else { flush(force: true) }
    if case .corrupt = how { sink.finish(valid: false) } else { sink.finish() }
    if let decoder { context.allowance.release(decoder, format: format) }
    decoder = nil
    return false
  }
}

/// Base64 text in front of a stream (standard or URL-safe alphabet; line breaks, spaces, tabs and
/// JSON's `\n` `\r` `\t` escapes skipped, `\/` read as `/`): decodes as the text comes and ends the
/// stream at the first byte that is not base64. A gzip, xz, zstd or bzip2 stream whose base64 text
/// stops before the stream does makes the file incomplete (its rest may follow a separator the
/// scanner does not know).
final class Base64Layer: ByteSink {
  private let target: any ByteSink
  private let stream: PushDecoder?
  private let allowance: InflateAllowance?
  private var bits: UInt32 = 0
  private var count = 0
  private var ended = false
  private var escaped = false
  private static let values: [Int8] = (0..<256).map { byte in
    switch UInt8(byte) {
    case 0x41...0x5a: Int8(byte - 0x41)
    case 0x61...0x7a: Int8(byte - 0x61 + 26)
    case 0x30...0x39: Int8(byte - 0x30 + 52)
    case 0x2b, 0x2d: 62  // '+' and URL-safe '-'
    case 0x2f, 0x5f: 63  // '/' and URL-safe '_'
    case 0x0a, 0x0d, 0x20, 0x09: -2  // line breaks and spaces inside wrapped base64
    case 0x5c: -3  // a JSON escape: \n, \r, \t, \/
    default: -1
    }
  }

  init(_ target: any ByteSink, stream: PushDecoder? = nil, allowance: InflateAllowance? = nil) {
    self.target = target
    self.stream = stream
    self.allowance = allowance
  }

  func push(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard !ended else { return false }
    var decoded: [UInt8] = []
    decoded.reserveCapacity(bytes.count / 4 * 3 + 3)
    var stopped = false
    for byte in bytes {
      var value = Self.values[Int(byte)]
      if escaped {
        escaped = false
        switch byte {
        case 0x6e, 0x72, 0x74: continue
        case 0x2f: value = 63
        default:
          stopped = true
        }
        if stopped { break }
      }
      if value == -2 { continue }
      if value == -3 {
        escaped = true
        continue
      }
      if value < 0 {
        stopped = true
        break
      }
      bits = bits << 6 | UInt32(value)
      count += 1
      if count == 4 {
        decoded += [
          UInt8(truncatingIfNeeded: bits >> 16), UInt8(truncatingIfNeeded: bits >> 8), UInt8(truncatingIfNeeded: bits),
        ]
        bits = 0
        count = 0
      }
    }
    if stopped { decoded += shortGroup() }
    let alive = decoded.withUnsafeBytes { decoded.isEmpty || target.push($0) }
    if stopped || !alive {
      if stopped, alive, let stream, stream.end == nil, stream.format != .zlib, stream.format != .plain {
        allowance?.unsupported = "base64 text of a \(stream.format.name) stream ends before the stream does"
      }
      finish()
      return false
    }
    return true
  }

  func finish() {
    guard !ended else { return }
    ended = true
    let last = shortGroup()
    if !last.isEmpty { _ = last.withUnsafeBytes { target.push($0) } }
    target.finish()
  }

  /// The last group may be short (padding or not): 2 characters are 1 byte, 3 are 2.
  private func shortGroup() -> [UInt8] {
    defer {
      bits = 0
      count = 0
    }
    switch count {
    case 2: return [UInt8(truncatingIfNeeded: bits >> 4)]
    case 3: return [UInt8(truncatingIfNeeded: bits >> 10), UInt8(truncatingIfNeeded: bits >> 2)]
    default: return []
    }
  }
}

/// Drops the first `count` bytes pushed, then passes the rest on: a ZIP entry's data that starts
/// past the window its header was found in.
final class SkipLayer: ByteSink {
  private var remaining: Int
  private let target: any ByteSink

  init(_ count: Int, then target: any ByteSink) {
    remaining = count
    self.target = target
  }

  func push(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard remaining > 0 else { return target.push(bytes) }
    let skipped = min(remaining, bytes.count)
    remaining -= skipped
    return skipped == bytes.count || target.push(UnsafeRawBufferPointer(rebasing: bytes[skipped...]))
  }

  func finish() { target.finish() }
}
