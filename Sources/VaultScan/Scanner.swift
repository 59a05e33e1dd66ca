import Foundation
import Vault
import VaultCrypto

/// Looks through files for plaintext that should not be on disk: known canaries in many encodings,
/// key material outside the key store, and records where only ciphertext belongs, judged by what a
/// file is (`ContentKind`). Compressed data (gzip, zlib, ZIP, xz, bzip2, zstd, and base64 of them)
/// is decoded to its end and searched the same way (`Compressed.swift`, `DecodedStream.swift`).
/// Knows the structure of SQLite databases, WAL files and rollback journals, so each finding names
/// the kind of region it sits in. Files are streamed, never loaded whole. vault's own containers
/// are also audited record by record (`ContainerAudit.swift`).
///
/// One walk (`Walker.swift`) chooses every file that is read, by every pass: symlinks are never
/// followed, FIFOs, sockets and devices never opened, and what cannot be read is listed in
/// `ScanReport.incomplete`.
public struct Scanner {
  /// The canaries searched for (those of at least 4 bytes).
  public let canaries: [String]
  /// The vault whose envelopes are opened (`--verify`); nil to check containers without keys only.
  public let vault: Vault?
  let patterns: [Pattern]
  let searcher: MultiSearcher
  /// The longest canary form, in bytes (what consecutive windows must overlap by).
  let longestPattern: Int
  /// Called with files and bytes done so far (for a progress line), on the thread that called
  /// `scan`, when they have changed: after each file is put in the report, and about four times a
  /// second while a file is read.
  public var progress: ((_ files: Int, _ bytes: Int) -> Void)?
  /// What inflating compressed streams may cost per file; a file that exceeds it is reported as
  /// incomplete (`ScanReport.incomplete`), with what was inflated up to then still searched.
  public var inflateBudget = InflateBudget()
  /// Whether the scan may read files in the process's own descriptor table when its threads cannot
  /// get one of their own (`unshare` refused). Only for a process with no container open but
  /// the audit's own, such as `vault scan`: there, closing what was read drops no one's locks.
  package var sharesProcessDescriptorTable = false
  /// How much of a file each read brings in and every detector searches before the next read:
  /// small enough that the read's copy and every detector's pass stay in a core's L2 cache (with
  /// 4 MiB, each pass read memory again). No heuristic judges a chunk as a whole: a log's lines
  /// are judged rare over 4 MiB windows of the file (`TextDetectors.RareLineWindow`), and a file
  /// that may be one pretty-printed record is read in one piece (`wholeRecordLimit`). (Before
  /// both, 128 KiB chunks missed a 140 KB JSON record and a cluster of 150 sentences in a 300 KB
  /// log: review, `ChunkEdgeTests`.)
  static let chunk = 256 << 10
  /// A file of up to this many bytes whose first character (after a byte order mark and white
  /// space) opens a JSON object or array is read in one piece (`RecordSyntax.mayOpenJSONDocument`),
  /// so that a pretty-printed record that is the whole file is judged whole
  /// (`TextDetectors.isJSONRecord`) and no chunk begins inside a document's nested objects: 4 MiB
  /// and the overlap, what one chunk was when those rules were made.
  static let wholeRecordLimit = (4 << 20) + chunkOverlap
  /// How far before the end of a buffer a JSON value's reading may stop for the value to go on in
  /// the next chunk: a member's string of 4 KiB (`RecordSyntax.stringEnd`), its key and more.
  static let jsonMemberReach = (4 << 10) + 512
  /// `chunk`, which tests make smaller or larger to show that no finding depends on it (a power of
  /// two, at most `TextDetectors.RareLineWindow.size`).
  var chunkSize = chunk
  /// lseek's SEEK_DATA (3 on Linux, <unistd.h>; Swift's Glibc module does not define _GNU_SOURCE).
  static let seekData: Int32 = 3
  /// How much of an overflow payload is searched at a time (tests make it small to put window
  /// edges where they want them). Far larger than `overflowOverlap`, which each window reads again.
  var overflowWindow = 4 << 20
  /// Consecutive chunks (and windows of decoded output) share at least this many bytes, more than
  /// `StreamStart.lookahead`, so nothing that starts near an edge is missed.
  static let minimumOverlap = 256
  /// Consecutive chunks of a file share this many bytes (or the longest canary form): a JSON
  /// object or a PEM key of up to this length is judged whole by the chunk that reports it,
  /// wherever a chunk's edge falls (the text heuristics read 255 bytes of it: see `scanFile`).
  /// With 255 bytes, a 900-byte JSON line cut by an edge was judged by neither chunk.
  static let chunkOverlap = 8 << 10
  /// Consecutive windows of an overflow payload share this many bytes (or the longest canary
  /// form): a PEM key of up to 64 KiB split by a window's edge is still seen whole.
  static let overflowOverlap = 64 << 10

  /// A scanner for `canaries` (in each encoding `Finding.encoding` lists) and, given a vault, an
  /// auditor of the envelopes in vault's containers.
  ///
  /// - Parameters:
  ///   - canaries: strings that must not appear; each must be at least 4 bytes of UTF-8 (shorter
  ///     ones match too much to mean anything and are ignored).
  ///   - vault: when given, every envelope in every vault container scanned is opened with it, and
  ///     the report's `verify` counts them.
  public init(canaries: [String], verifyingWith vault: Vault? = nil) {
    self.vault = vault
    self.canaries = canaries.filter { $0.utf8.count >= 4 }
    patterns = self.canaries.enumerated().flatMap { Patterns.variants(of: $0.element, index: $0.offset) }
    searcher = MultiSearcher(patterns.map(\.bytes))
    longestPattern = patterns.map(\.bytes.count).max() ?? 1
    precondition(searcher.patterns.count == patterns.count, "every canary form is at least 4 bytes")
  }

  /// Scans files and directories (recursively), each path as `walk(root:)` describes: symlinks
  /// and special files inside a directory are reported in `skipped` and never opened; one given
  /// as a path itself is never opened either, and is listed in `incomplete` (it was asked for
  /// and not read), as is what cannot be read. Paths in the report are shown as `PathText.display` shows them.
  ///
  /// Files are opened, read and closed on threads with a descriptor table of their own, so a
  /// process may scan containers it has open without dropping their SQLite locks; `progress` is
  /// called on the calling thread, and the scanner is released there.
  ///
  /// - Parameter paths: files and directories to scan, in order.
  /// - Returns: every finding (sorted by file and offset), with what was skipped or could not be
  ///   read in full. Only a report both `clean` and `complete` says the paths hold nothing found.
  /// - Throws: `ScanError.unreadable` when a path given cannot be looked at;
  ///   `ScanError.noPrivateDescriptorTable` when the scan threads cannot get a descriptor table of
  ///   their own (nothing is read); `ProcessResources.Shortage.threads` when the scan's thread
  ///   cannot be started; with a vault, a key store error that stops envelopes from being opened.
  public func scan(_ paths: [String]) throws -> ScanReport {
    // Files are read on two threads and put in the report in walk order (`FilePipeline`).
    let depthLimit = Self.depthLimit()
    let roots = Self.withJournals(paths)
    var report = try FilePipeline(scanner: self).run { files, segment in
      for path in roots { try walk(root: path, depthLimit: depthLimit, report: &segment, files: files) }
    }
    report.findings.sort { ($0.file, $0.offset) < ($1.file, $1.offset) }
    return report
  }

  /// `paths`, each once, with the `-wal` and `-journal` files beside a file given by itself when
  /// they are regular files there: whoever reads that database reads what they hold (an outside
  /// review: `vault scan app.db` said clean of a row still in `app.db-wal`). A directory's walk
  /// finds them anyway.
  static func withJournals(_ paths: [String]) -> [String] {
    var roots: [String] = []
    var seen = Set<String>()
    for path in paths {
      if seen.insert(path).inserted { roots.append(path) }
      var info = stat()
      guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
      for side in [path + "-wal", path + "-journal"] {
        guard lstat(side, &info) == 0, info.st_mode & S_IFMT == S_IFREG, seen.insert(side).inserted else { continue }
        roots.append(side)
      }
    }
    return roots
  }

  /// Runs the detectors over the regular file open at `fd` (the walker opened it and closes it),
  /// shown as `path`, whose last component is `name`, reading it in chunks into `scratch`.
  /// `progress` is told how many of its bytes are done after each chunk.
  /// - Returns: what kind of file it is, from its first bytes.
  @discardableResult
  func scanFile(
    _ fd: Int32, size: Int, path: String, name: String, scratch: ScanScratch, report: inout ScanReport,
    progress: (_ bytesDone: Int) -> Void = { _ in }
  ) -> FileKind {
    report.filesScanned += 1
    report.bytesScanned += size
    // Its times before the first read: a write while it is read changes them (checked at the end).
    var before = stat()
    let timed = fstat(fd, &before) == 0
    let regions = RegionMap(fd: fd, size: size, name: name)
    if let key = keyMaterial(fd: fd, size: size, path: path) {
      report.add(key.finding)
      // A file that is only a key holds nothing else; an .env file with a key line may.
      if key.wholeFile { return regions.kind }
    }
    // What the file is decides which heuristics mean something in it (ContentKind).
    let head = RegionMap.read(fd, at: 0, count: 65536)
    let content = ContentKind.of(
      head: head, fileKind: regions.kind, vaultMetadata: Self.isVaultMetadata(fd: fd, size: size, name: name))
    let holder = Holder(kind: content, isArchive: Holder.isArchive(Array(head.prefix(512))))
    let overlap = max(longestPattern - 1, Self.chunkOverlap)
    let allowance = InflateAllowance(inflateBudget, fileSize: size)
    var unreadable: String?
    var shortRead = false
    var examinedUpTo = 0
    // Per heuristic detector, how far into the file its findings so far reach: a run, line or
    // object that a chunk's edge cut was reported where it starts, and its tail at the start of
    // the next chunk is that same place, not another finding (review: one listed twice per edge).
    var reached = HeuristicReach()
    // A `json-text` finding still open at the chunk's start, and where in its structure it is.
    var jsonOpen: RecordSyntax.Nesting?
    // Two starts at one offset can decode the same data: base64 whose first characters are a
    // compressed stream's (`H4sI`, gzip) that is also wrapped in lines, decoded as a stream and
    // as a block of lines, listed every finding twice (review). A later stream at an offset lists
    // only what the streams before it there did not: each of their findings stands for one of
    // its equals (counted, not a set: two canaries in one stream are two equal findings, as a
    // finding in a stream does not say which canary it is, and both are listed; second review).
    // (Keyed by offset: the blocks of wrapped lines come after a chunk's other starts.)
    var streamFindingsAt: [Int: [Finding: Int]] = [:]
    let chunk =
      content.judgesJSON && size <= Self.wholeRecordLimit && RecordSyntax.mayOpenJSONDocument(head)
      ? size : chunkSize
    // A log's sentences and key=value lines wait for the end of their window (`RareLineWindow`);
    // the byte before the chunk says whether its first line is the tail of one counted already.
    var rareLines = TextDetectors.RareLineWindow()
    var byteBefore: UInt8?
    var offset = 0
    while offset < size {
      // A hole reads as zeros and holds nothing to find: go on from the next data, less the
      // overlap (a pattern that begins with zero bytes just before it, UTF-16BE, is still seen
      // whole). A 20 GiB sparse file was read byte by byte for eight minutes (outside operator
      // review). Where SEEK_DATA is not supported, every byte is read. Chunks stay at multiples of
      // `chunk`, so each lies in one window of `RareLineWindow`.
      let data = lseek(fd, off_t(offset), Self.seekData)
      if data < 0, errno == ENXIO {
        // No data from here to the end: a hole to its end, or a file cut short under the scan (an
        // outside review: a log truncated mid-scan, as logrotate's copytruncate does, was never
        // read past that point and the scan said clean). The end-of-file check below tells them.
        break
      }
      if data > 0, Int(data) - overlap > offset {
        offset = (Int(data) - overlap) / chunk * chunk
        byteBefore = nil
      }
      if content == .textLog {
        let window = TextDetectors.RareLineWindow.index(of: offset, fileSize: size)
        if window != rareLines.index { rareLines.flush(into: &report, startingWindow: window) }
      }
      let count = min(chunk + overlap, size - offset)
      // One pread into this thread's buffer, as `RegionMap.read` would, without a new array per chunk.
      let buffer = scratch.buffer(count)
      let got = pread(fd, buffer.baseAddress, count, off_t(offset))
      if got < 0 {
        unreadable = unreadable ?? "a read failed (\(String(cString: strerror(errno))))"
        break
      }
      let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<got])
      if bytes.count < count { shortRead = true }
      if bytes.isEmpty { break }
      // Chunks overlap: what starts in the overlap is reported by the next chunk, which sees it
      // whole (one finding per place; what a heuristic reported reaching past the edge, `reached`).
      let lastChunk = offset + count >= size
      let reportBelow = lastChunk ? Int.max : offset + chunk
      let wholeFile = offset == 0 && lastChunk
      searcher.search(bytes) { hit, index in
        guard offset + hit < reportBelow else { return }
        let pattern = patterns[index]
        report.add(
          Finding(
            file: path, offset: offset + hit, region: regions.region(at: offset + hit), detector: "canary",
            encoding: pattern.encoding, excerpt: redact(bytes[hit..<(hit + pattern.bytes.count)])))
      }
      for key in KeyMaterial.armouredKeys(bytes) where offset + key.start < reportBelow {
        report.add(
          Finding(
            file: path, offset: offset + key.start, region: regions.region(at: offset + key.start),
            detector: "key-material", encoding: "pem", excerpt: redactKey(bytes[key.start..<key.end])))
      }
      // The braces a quote follows, found once for the JSON search and the record detectors.
      let braces = content.judgesJSON ? RecordSyntax.quotedBraces(bytes) : nil
      let reachedBefore = reached
      // A JSON value that the chunk before reported across the edge goes on here: the objects
      // nested in it are not findings of their own (a line of 16 nested objects was listed 12
      // times: review), and those after it still are (an array of records on one line). It goes
      // on as far as that chunk read it, and when its reading ran into the end of that chunk's
      // buffer, to the byte that closes it or its line break, whichever comes first (a value cut
      // short in binary data, followed to the next control byte, hid megabytes of records after
      // it: second review).
      let edge = lastChunk ? bytes.count : reportBelow - offset
      var jsonGoesOnTo = max(0, reachedBefore["json-text"] - offset)
      if var nesting = jsonOpen {
        jsonOpen = nil
        if let end = RecordSyntax.follow(bytes, from: 0, to: edge, nesting: &nesting) {
          jsonGoesOnTo = max(jsonGoesOnTo, end)
        } else {
          jsonGoesOnTo = edge
          if !lastChunk { jsonOpen = nesting }
        }
      }
      var jsonCrossing: (start: Int, end: Int)?
      func admits(_ detector: String, _ start: Int, _ end: Int) -> Bool {
        guard offset + start < reportBelow, detector != "json-text" || start >= jsonGoesOnTo else { return false }
        // Only a hit at the chunk's first byte can be the tail of one the last chunk reported (a
        // record's own lines inside a reported run, elsewhere, are still listed: review). A tail
        // carries the reach on, so a line longer than a chunk is listed once (it was listed again
        // two chunks on: review).
        let isTail = start == 0 && offset < reachedBefore[detector]
        reached[detector] = max(reached[detector], offset + end)
        if detector == "json-text", !isTail, end > edge, start < (jsonCrossing?.start ?? .max) {
          jsonCrossing = (start, end)
        }
        return !isTail
      }
      func finding(_ detector: String, _ start: Int, _ end: Int) -> Finding {
        Finding(
          file: path, offset: offset + start, region: regions.region(at: offset + start), detector: detector,
          encoding: nil, excerpt: redact(bytes[start..<end]))
      }
      // The heuristics read the whole overlap (what starts before the edge is judged with up to
      // 8 KiB of what follows), and report what starts before it.
      if content.judgesJSON {
        for hit in jsonText(bytes, braces: braces, wholeText: wholeFile) where admits("json-text", hit.start, hit.end) {
          report.add(finding("json-text", hit.start, hit.end))
        }
      }
      if content == .textLog {
        // Lines that start in this chunk are counted, less the tail of one the chunk before began.
        let firstCounted = offset == 0 || byteBefore == 0x0a ? 0 : 1
        let countBelow = max(firstCounted, min(bytes.count, reportBelow - offset))
        let judged = TextDetectors.judgeLines(bytes, counting: firstCounted..<countBelow)
        rareLines.count(lines: judged.lines)
        // The tail of a line that ends in the chunk before's overlap was judged there, whole: it is
        // no line of its own (a sentence's tail, its time stamp cut off by the edge, was reported
        // mid-line: second review).
        let tailJudged = byteBefore != nil && firstCounted == 1 ? overlap : 0
        for hit in judged.hits
        where !(hit.start == 0 && hit.end < tailJudged) && admits(hit.detector, hit.start, hit.end) {
          rareLines.hold(hit.detector) { finding(hit.detector, hit.start, hit.end) }
        }
      } else {
        for hit in content.textFindings(bytes, braces: braces, wholeText: wholeFile)
        where admits(hit.detector, hit.start, hit.end) {
          report.add(finding(hit.detector, hit.start, hit.end))
        }
      }
      // The JSON value reported here that goes on past the edge (the first, which holds any other),
      // when its reading ran into the end of the buffer: a value is read up to a member whose end
      // it cannot find, and a member's string is at most 4 KiB (`RecordSyntax.stringEnd`).
      if let crossing = jsonCrossing, jsonOpen == nil, crossing.end + Self.jsonMemberReach >= bytes.count {
        var nesting = RecordSyntax.Nesting()
        if RecordSyntax.follow(bytes, from: crossing.start, to: edge, nesting: &nesting) == nil { jsonOpen = nesting }
      }
      // Signatures in the last `StreamStart.lookahead` bytes of a chunk are examined with the next
      // (which starts before them: it begins `overlap` bytes before this one ends), and only there:
      // both decoded them, and listed a stream's findings twice (review).
      for stream in streamStarts(bytes, from: examinedUpTo - offset, probe: allowance.probe)
      where lastChunk || stream.signature < count - StreamStart.lookahead {
        if let reason = stream.unreadable {
          // (A program's own constants hold these magic numbers: liblz4, libmagic.)
          if content != .compiledCode { unreadable = unreadable ?? reason }
          continue
        }
        let findings = scanCompressed(
          .file(fd: fd), at: offset + stream.start, format: stream.format, base64: stream.base64,
          path: path, fileOffset: offset + stream.start, allowance: allowance,
          reportsCorruption: regions.kind == .other, holder: holder
        ).findings
        var listed = streamFindingsAt[offset + stream.start, default: [:]]
        var unmatched = listed
        for finding in findings {
          if let count = unmatched[finding], count > 0 {
            unmatched[finding] = count - 1
            continue
          }
          report.add(finding)
          listed[finding, default: 0] += 1
        }
        if !findings.isEmpty { streamFindingsAt[offset + stream.start] = listed }
      }
      examinedUpTo = offset + count - StreamStart.lookahead
      progress(min(size, offset + count))
      if lastChunk { break }
      byteBefore = bytes.count >= chunk ? bytes[chunk - 1] : nil
      offset += chunk
    }
    rareLines.flush(into: &report, startingWindow: 0)
    if regions.kind == .database {
      scanOverflowPayloads(regions, fd: fd, path: path, allowance: allowance, report: &report)
    }
    scanLooseSeams(regions, path: path, report: &report)
    if let reason = allowance.exhausted { report.incomplete.append(Skipped(path: path, reason: reason)) }
    if let reason = allowance.unsupported { report.incomplete.append(Skipped(path: path, reason: reason)) }
    if let reason = allowance.readFailure { report.incomplete.append(Skipped(path: path, reason: reason)) }
    if let reason = unreadable { report.incomplete.append(Skipped(path: path, reason: reason)) }
    // A file that shrank or grew while it was read, or whose size says less than it holds (procfs),
    // was not read as it is. Its size now is looked at too: a file cut short while the scan was in
    // a hole, or past the last data `SEEK_DATA` found, reads nothing short.
    var now = stat()
    var failure: Int32?
    let beyond = RegionMap.read(fd, at: size, count: 1, failure: &failure)
    if shortRead || !beyond.isEmpty || fstat(fd, &now) != 0 || Int(now.st_size) != size {
      report.incomplete.append(
        Skipped(path: path, reason: "changed size while being scanned (or its size is not its content)"))
    } else if !timed || FileStamp(before) != FileStamp(now) {
      // Written in place at the same size (an outside review: a canary written over bytes already
      // read, and the scan said clean): what was read is not what the file holds.
      report.incomplete.append(Skipped(path: path, reason: "was written to or changed while being scanned"))
    } else if let failure {
      report.incomplete.append(
        Skipped(path: path, reason: "its end could not be read (\(String(cString: strerror(failure))))"))
    }
    return regions.kind
  }

  /// Data that spills onto SQLite overflow pages is interrupted by each page's 4-byte pointer, so
  /// the chunk pass cannot see a canary or a compressed stream that crosses a page. Payloads are
  /// read again without the pointers and searched; only what crosses a page boundary (or sits in
  /// a compressed stream) is reported here, the rest was found already.
  ///
  /// A payload is searched in windows of `overflowWindow` bytes that overlap by `overflowOverlap` (as the
  /// file is read in chunks), never held whole: a row of any size is searched to its end in
  /// bounded memory. A compressed stream is decoded from the payload itself, to its end. A PEM key
  /// is found when it fits in the overlap, or starts and ends in one window.
  private func scanOverflowPayloads(
    _ regions: RegionMap, fd: Int32, path: String, allowance: InflateAllowance, report: inout ScanReport
  ) {
    var seen = Set<[Int]>()
    let overlap = max(longestPattern - 1, Self.overflowOverlap)
    regions.forEachOverflowPayload { payload in
      func fileOffset(_ payloadOffset: Int) -> Int {
        let segment = payload.segments[payload.segmentIndex(holding: payloadOffset)]
        return segment.fileOffset + payloadOffset - segment.payloadOffset
      }
      func crossesPages(_ start: Int, _ count: Int) -> Bool {
        let segment = payload.segments[payload.segmentIndex(holding: start)]
        return start + count > segment.payloadOffset + segment.count
      }
      var examinedUpTo = 0
      var windowStart = 0
      while windowStart < payload.count {
        let window = payload.read(at: windowStart, count: min(overflowWindow + overlap, payload.count - windowStart))
        guard !window.isEmpty else { break }
        let last = windowStart + window.count >= payload.count
        // What starts in the overlap is reported with the next window, which sees it whole.
        let reportBelow = last ? Int.max : windowStart + overflowWindow
        window.withUnsafeBytes { bytes in
          searcher.search(bytes) { hit, index in
            let pattern = patterns[index]
            let start = windowStart + hit
            guard start < reportBelow, crossesPages(start, pattern.bytes.count),
              seen.insert([fileOffset(start), index]).inserted
            else { return }
            report.add(
              Finding(
                file: path, offset: fileOffset(start), region: "overflow-page", detector: "canary",
                encoding: pattern.encoding, excerpt: redact(window[hit..<(hit + pattern.bytes.count)])))
          }
          // A PEM key split by a page's pointer ends at the first line the pointer breaks, unmatched.
          for key in KeyMaterial.armouredKeys(bytes) {
            let start = windowStart + key.start
            guard start < reportBelow, crossesPages(start, key.end - key.start),
              seen.insert([fileOffset(start), -4]).inserted
            else { continue }
            report.add(
              Finding(
                file: path, offset: fileOffset(start), region: "overflow-page", detector: "key-material",
                encoding: "pem", excerpt: redactKey(window[key.start..<key.end])))
          }
          // Signatures in the last `StreamStart.lookahead` bytes of a window are examined with the next.
          for stream in streamStarts(bytes, from: examinedUpTo - windowStart, probe: allowance.probe)
          where stream.unreadable == nil && seen.insert([fileOffset(windowStart + stream.start), -3]).inserted {
            let start = windowStart + stream.start
            let (findings, end) = scanCompressed(
              .overflow(payload), at: start, format: stream.format, base64: stream.base64, path: path,
              fileOffset: fileOffset(start), allowance: allowance, reportsCorruption: true,
              holder: Holder(kind: .sqlite, isArchive: false))
            // A stream that ends inside one page was inflated whole by the chunk pass already.
            guard crossesPages(start, max(1, end.consumed)) else { continue }
            for var finding in findings {
              finding.region = "overflow-page"
              if !report.findings.contains(finding) { report.add(finding) }
            }
          }
        }
        if last { break }
        examinedUpTo = windowStart + window.count - StreamStart.lookahead
        windowStart += overflowWindow
      }
    }
  }

  /// Overflow chains that are no longer live cannot be reassembled from the b-trees: a deleted
  /// row's pages on a database's freelist, and page images in a WAL or a rollback journal, where
  /// the next page's image may sit anywhere (behind a frame header, a journal record's checksum
  /// and page number). A canary split by such a boundary is looked for across every seam
  /// `RegionMap.forEachLooseSeam` gives; what lies within one image was found by the chunk pass.
  private func scanLooseSeams(_ regions: RegionMap, path: String, report: inout ScanReport) {
    // Without a canary there is nothing to look for: no read at all.
    guard !patterns.isEmpty else { return }
    // A seam tried with several images of the next page finds the same hit more than once.
    var seen = Set<[Int]>()
    regions.forEachLooseSeam(reach: longestPattern - 1) { seam in
      seam.bytes.withUnsafeBytes { bytes in
        searcher.search(bytes) { hit, index in
          let pattern = patterns[index]
          let offset = seam.leftOffset + hit
          guard hit < seam.leftCount, hit + pattern.bytes.count > seam.leftCount,
            seen.insert([offset, index]).inserted
          else { return }
          report.add(
            Finding(
              file: path, offset: offset, region: regions.region(at: offset), detector: "canary",
              encoding: pattern.encoding, excerpt: redact(seam.bytes[hit..<(hit + pattern.bytes.count)])))
        }
      }
    }
  }

  /// vault's own metadata files hold JSON that is not application data: the manifest and memo's
  /// delivery history. They are still searched for canaries.
  static func isVaultMetadata(fd: Int32, size: Int, name: String) -> Bool {
    guard size < 1 << 20, name == "manifest.json" || name == "memo-history.jsonl" else { return false }
    let text = String(decoding: RegionMap.read(fd, at: 0, count: size), as: UTF8.self)
    if name == "manifest.json" { return text.contains("\"vault_id\"") && text.contains("\"versions\"") }
    return text.split(separator: "\n").allSatisfy { $0.hasPrefix("{\"id\":\"") && $0.contains("\"delivered_at\"") }
  }
}

/// How far into a file the findings of each heuristic detector (`json-text`, `key-value-text`,
/// `natural-language`) reach, kept without hashing a detector's name for every line judged (a
/// dictionary was a twentieth of a scan of a chatty log).
struct HeuristicReach {
  private var ends = [0, 0, 0]

  subscript(detector: String) -> Int {
    get { ends[Self.slot(detector)] }
    set { ends[Self.slot(detector)] = newValue }
  }

  private static func slot(_ detector: String) -> Int {
    let slot =
      switch detector.utf8.first {
      case UInt8(ascii: "j"): 0
      case UInt8(ascii: "k"): 1
      default: 2
      }
    assert(detector == ["json-text", "key-value-text", "natural-language"][slot], "a heuristic detector: \(detector)")
    return slot
  }
}
