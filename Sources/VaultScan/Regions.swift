// Reads SQLite database, WAL and journal structure to say what kind of region an offset is in.
import Foundation

/// What a file is, from its first bytes.
enum FileKind: String {
  case database = "sqlite-database"
  case wal = "sqlite-wal"
  case journal = "sqlite-journal"
  case shm = "sqlite-shm"
  case other = "file"
}

/// Classifies offsets of one file into regions: live cell, free block, unallocated space in a page,
/// freelist page, overflow or other page, committed or stale WAL frame, rollback journal.
final class RegionMap {
  let kind: FileKind
  private let fd: Int32
  private let size: Int
  private var pageSize = 4096
  private var freelist = Set<Int>()
  /// How many pages the freelist names (for tests: never more than the file has).
  var freelistCount: Int { freelist.count }
  private var reservedBytes = 0
  /// Pages holding the overflow of large cells; found on first need (one pass over the b-trees).
  private lazy var overflowPages: Set<Int> = findOverflowPages()
  private var walValid: [Bool] = []  // per frame: committed and current
  private var walFrameCount = 0
  /// Per WAL frame, the page number its header names (the image follows the 24-byte header).
  private var walFramePages: [Int] = []
  /// A rollback journal's page records: where the first starts (after the header's sector), and
  /// the page size; nil when neither the header nor a guess gives a layout.
  private var journalLayout: (recordsStart: Int, pageSize: Int)?

  init(fd: Int32, size: Int, name: String) {
    self.fd = fd
    self.size = size
    let head = Self.read(fd, at: 0, count: 100)
    if head.count >= 16, Array(head[0..<16]) == Array("SQLite format 3".utf8) + [0] {
      kind = .database
    } else if head.count >= 32, [0x37, 0x7f, 0x06].elementsEqual(head[0..<3]), head[3] == 0x82 || head[3] == 0x83 {
      kind = .wal
    } else if head.count >= 8, head[0..<8].elementsEqual([0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7]) {
      kind = .journal
    } else if name.hasSuffix("-journal") {
      // A PERSIST-mode journal zeroes its header on commit; the pages it saved stay behind it.
      kind = .journal
    } else if name.hasSuffix("-wal") {
      kind = .wal
    } else if name.hasSuffix("-shm") {
      kind = .shm
    } else {
      kind = .other
    }
    switch kind {
    case .database: loadDatabase(head)
    case .wal: loadWAL(head)
    case .journal: loadJournal(head)
    default: break
    }
  }

  /// Up to `count` bytes at `offset` (one `pread`; fewer at the end of the file, none on an error).
  /// Read straight into the array's storage: not zeroed first, not copied after.
  static func read(_ fd: Int32, at offset: Int, count: Int) -> [UInt8] {
    var failure: Int32?
    return read(fd, at: offset, count: count, failure: &failure)
  }

  /// As `read(_:at:count:)`, with `failure` set to the `errno` of a `pread` that failed: an I/O
  /// error reads as no bytes, which must not pass for the end of the file (an outside review: a
  /// compressed stream cut short by one EIO was taken as truncated, and the scan said clean).
  static func read(_ fd: Int32, at offset: Int, count: Int, failure: inout Int32?) -> [UInt8] {
    guard count > 0 else { return [] }
    var code: Int32?
    let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
      let got = pread(fd, buffer.baseAddress, count, off_t(offset))
      if got < 0 { code = errno }
      initialized = max(0, got)
    }
    if let code { failure = failure ?? code }
    return bytes
  }

  private static func be16(_ b: [UInt8], _ i: Int) -> Int { Int(b[i]) << 8 | Int(b[i + 1]) }
  private static func be32(_ b: [UInt8], _ i: Int) -> Int {
    Int(b[i]) << 24 | Int(b[i + 1]) << 16 | Int(b[i + 2]) << 8 | Int(b[i + 3])
  }

  private func loadDatabase(_ head: [UInt8]) {
    guard head.count >= 100 else { return }  // truncated: no header to read, every offset is "page"
    let raw = Self.be16(head, 16)
    pageSize = raw == 1 ? 65536 : max(512, raw)
    reservedBytes = Int(head[20])
    // Walk the freelist: trunk pages list leaf pages; both hold no live data. Only pages the file
    // has count: a crafted list of page numbers past its end grew the set to six times the file's
    // size in memory (an outside review: 426 MB for a 65 MB file).
    let pages = (size + pageSize - 1) / pageSize
    var trunk = Self.be32(head, 32)
    var guardCount = 0
    while trunk > 0, trunk <= pages, guardCount < 1_000_000, !freelist.contains(trunk) {
      freelist.insert(trunk)
      let page = Self.read(fd, at: (trunk - 1) * pageSize, count: pageSize)
      guard page.count >= 8 else { break }
      // Bound by the bytes actually read: a truncated file can end inside the trunk page.
      let leaves = min(Self.be32(page, 4), (page.count - 8) / 4)
      for index in 0..<leaves {
        let leaf = Self.be32(page, 8 + 4 * index)
        if leaf >= 1, leaf <= pages { freelist.insert(leaf) }
      }
      trunk = Self.be32(page, 0)
      guardCount += 1
    }
  }

  private func loadWAL(_ head: [UInt8]) {
    // An empty or truncated WAL (a checkpoint truncates it to zero) has no frames.
    guard head.count >= 32 else {
      pageSize = 0
      return
    }
    pageSize = Self.be32(head, 8)
    guard pageSize >= 512, pageSize <= 65536 else {
      pageSize = 0
      return
    }
    let salt = Array(head[16..<24])
    walFrameCount = max(0, (size - 32) / (24 + pageSize))
    var lastCommit = -1
    var saltOK: [Bool] = []
    for frame in 0..<walFrameCount {
      let header = Self.read(fd, at: 32 + frame * (24 + pageSize), count: 24)
      let ok = header.count == 24 && Array(header[8..<16]) == salt
      saltOK.append(ok)
      walFramePages.append(header.count == 24 ? Self.be32(header, 0) : 0)
      if ok, Self.be32(header, 4) != 0 { lastCommit = frame }
    }
    // Frames with the current salts up to the last commit frame are the WAL's live content;
    // frames after it, or from an earlier generation (old salts), are stale.
    walValid = saltOK.enumerated().map { $0.element && $0.offset <= lastCommit }
  }

  /// Finds where a rollback journal's page records are (SQLite's pager.c: a header of magic,
  /// record count, nonce, initial page count, sector size and page size, padded to one sector;
  /// then per record a 4-byte page number, the page image and a 4-byte checksum). A PERSIST-mode
  /// journal has its first 28 bytes zeroed on commit, sizes included, though its records stay:
  /// then the sizes are guessed, as the pair under which the first records all carry plausible
  /// page numbers. A wrong guess costs nothing but seams that hold no canary.
  private func loadJournal(_ head: [UInt8]) {
    let pageSizes = [4096, 1024, 512, 2048, 8192, 16384, 32768, 65536]
    let valid = { (value: Int, low: Int) in value >= low && value <= 65536 && value & (value - 1) == 0 }
    if head.count >= 28, valid(Self.be32(head, 24), 512), valid(Self.be32(head, 20), 32) {
      journalLayout = (Self.be32(head, 20), Self.be32(head, 24))
      return
    }
    for sector in [512, 4096, 1024, 2048, 8192, 16384, 32768, 65536] {
      for page in pageSizes {
        let records = (size - sector) / (page + 8)
        guard records > 0 else { continue }
        let plausible = (0..<min(8, records)).allSatisfy { index in
          let number = Self.read(fd, at: sector + index * (page + 8), count: 4)
          return number.count == 4 && (1...(1 << 24)).contains(Self.be32(number, 0))
        }
        if plausible {
          journalLayout = (sector, page)
          return
        }
      }
    }
  }

  /// Walks every b-tree page's cells and follows each overflow chain (SQLite file format §1.6:
  /// a cell's payload beyond its local part continues on a chain of pages, each starting with the
  /// next page's number).
  private func findOverflowPages() -> Set<Int> {
    var found = Set<Int>()
    forEachOverflowingCell { _, _, _, firstOverflow, _ in
      var next = firstOverflow
      var hops = 0
      while next > 0, next <= size / pageSize, hops < size / pageSize, found.insert(next).inserted {
        let head = Self.read(fd, at: (next - 1) * pageSize, count: 4)
        guard head.count == 4 else { break }
        next = Self.be32(head, 0)
        hops += 1
      }
    }
    return found
  }

  /// Calls `body` for every b-tree cell whose payload continues on overflow pages, with its page,
  /// where its local part starts in the file, that part's length, the first overflow page and the
  /// payload's total size (SQLite file format §1.6).
  private func forEachOverflowingCell(
    _ body: (_ page: Int, _ localOffset: Int, _ localCount: Int, _ firstOverflow: Int, _ payloadSize: Int) -> Void
  ) {
    let usable = pageSize - reservedBytes
    guard kind == .database, usable >= 480 else { return }
    let pageCount = max(1, size / pageSize)
    // Read 128 KiB of pages at a time (the walk reads every page in file order): one `pread` per
    // page cost a system call per 4 KiB, two thirds of a scan's system calls on the benchmark's
    // corpus.
    let pagesPerRead = max(1, (128 << 10) / pageSize)
    var block: [UInt8] = []
    var blockFirst = 0
    for number in 1...pageCount where !freelist.contains(number) {
      if block.isEmpty || number >= blockFirst + pagesPerRead {
        blockFirst = number
        block = Self.read(fd, at: (number - 1) * pageSize, count: min(pagesPerRead, pageCount - number + 1) * pageSize)
      }
      let start = (number - blockFirst) * pageSize
      let page = start < block.count ? Array(block[start..<min(block.count, start + pageSize)]) : []
      let headerStart = number == 1 ? 100 : 0
      guard page.count == pageSize, page.count > headerStart + 12 else { continue }
      let type = page[headerStart]
      guard [0x02, 0x0a, 0x0d].contains(type) else { continue }  // table interior cells carry no payload
      let headerSize = type == 0x02 ? 12 : 8
      let maxLocal = type == 0x0d ? usable - 35 : (usable - 12) * 64 / 255 - 23
      let minLocal = (usable - 12) * 32 / 255 - 23
      let cells = Self.be16(page, headerStart + 3)
      for cell in 0..<cells {
        let pointerAt = headerStart + headerSize + 2 * cell
        guard pointerAt + 2 <= page.count else { break }
        var at = Self.be16(page, pointerAt)
        if type == 0x02 { at += 4 }  // left child pointer
        guard at < page.count, let (payload, used) = Self.varint(page, at) else { continue }
        at += used
        if type == 0x0d {
          guard let (_, rowidBytes) = Self.varint(page, at) else { continue }
          at += rowidBytes
        }
        guard payload > maxLocal else { continue }
        let surplus = minLocal + (payload - minLocal) % (usable - 4)
        let local = surplus <= maxLocal ? surplus : minLocal
        guard at + local + 4 <= page.count else { continue }
        body(number, (number - 1) * pageSize + at, local, Self.be32(page, at + local), payload)
      }
    }
  }

  /// A contiguous piece of a reassembled payload: where it sits in the file.
  struct Segment {
    let payloadOffset: Int
    let fileOffset: Int
    let count: Int
  }

  /// A payload that spills onto overflow pages, read through its segments (the local part, then
  /// each overflow page without its 4-byte next-page pointer) as if it were contiguous, a window at
  /// a time: never held whole, so a row of any size is searched in bounded memory.
  struct OverflowPayload {
    let fd: Int32
    /// In payload order, contiguous: each starts where the one before ends.
    let segments: [Segment]
    /// The payload's bytes on disk (less than the cell says when its chain ends early).
    var count: Int { segments.last.map { $0.payloadOffset + $0.count } ?? 0 }

    /// The index of the segment holding `payloadOffset` (by binary search: a payload full of hits
    /// costs hits × log(pages), not hits × pages).
    func segmentIndex(holding payloadOffset: Int) -> Int {
      var low = 0
      var high = segments.count - 1
      while low < high {
        let middle = (low + high + 1) / 2
        if segments[middle].payloadOffset <= payloadOffset { low = middle } else { high = middle - 1 }
      }
      return low
    }

    /// Up to `count` bytes from `payloadOffset` (fewer at the payload's end or where the file is
    /// short), one `pread` per segment they cover.
    func read(at payloadOffset: Int, count: Int) -> [UInt8] {
      var failure: Int32?
      return read(at: payloadOffset, count: count, failure: &failure)
    }

    /// As `read(at:count:)`, with `failure` set to the `errno` of a `pread` that failed.
    func read(at payloadOffset: Int, count: Int, failure: inout Int32?) -> [UInt8] {
      guard payloadOffset >= 0, payloadOffset < self.count, count > 0 else { return [] }
      var bytes: [UInt8] = []
      bytes.reserveCapacity(min(count, self.count - payloadOffset))
      var index = segmentIndex(holding: payloadOffset)
      var at = payloadOffset
      while index < segments.count, bytes.count < count {
        let segment = segments[index]
        let wanted = min(segment.payloadOffset + segment.count - at, count - bytes.count)
        let part = RegionMap.read(
          fd, at: segment.fileOffset + at - segment.payloadOffset, count: wanted, failure: &failure)
        bytes += part
        // A short read (the file shrank): what follows would be out of place.
        guard part.count == wanted else { break }
        at += wanted
        index += 1
      }
      return bytes
    }
  }

  /// Calls `body` with every payload that spills onto overflow pages, so data split across pages
  /// (a compressed blob, a long text) can be searched as it was written. Only each chain's pointers
  /// are read here (4 bytes a page); `OverflowPayload.read` reads the content.
  func forEachOverflowPayload(_ body: (OverflowPayload) -> Void) {
    let usable = pageSize - reservedBytes
    // A valid overflow page belongs to exactly one cell: pages are visited once in all, so a
    // crafted file whose cells share one long chain costs no more than the file's size (and its
    // segments, 24 bytes a page, no more than a small part of it).
    var visited = Set<Int>()
    forEachOverflowingCell { _, localOffset, localCount, firstOverflow, payloadSize in
      guard !visited.contains(firstOverflow) else { return }
      var segments = [Segment(payloadOffset: 0, fileOffset: localOffset, count: localCount)]
      var total = localCount
      var next = firstOverflow
      while next > 0, next <= size / pageSize, total < payloadSize, visited.insert(next).inserted {
        let pointer = Self.read(fd, at: (next - 1) * pageSize, count: 4)
        guard pointer.count == 4 else { break }
        let count = min(usable - 4, payloadSize - total)
        segments.append(Segment(payloadOffset: total, fileOffset: (next - 1) * pageSize + 4, count: count))
        total += count
        next = Self.be32(pointer, 0)
      }
      body(OverflowPayload(fd: fd, segments: segments))
    }
  }

  /// Where a chain of overflow pages that is no longer live may cross from one page image to the
  /// next: the last `leftCount` bytes of an image's content, then the first bytes of the next
  /// page's content (after its 4-byte pointer), wherever that image is in the file.
  struct Seam {
    let bytes: [UInt8]
    let leftCount: Int
    /// Where `bytes[0]` is in the file.
    let leftOffset: Int
  }

  /// How many images of one page a seam is tried with (a WAL or journal may hold several): the
  /// nearest in the file, as the pages of one row are written together.
  static let imagesPerSeam = 8

  /// Calls `body` with every seam of the overflow chains the live-cell reassembly does not see:
  /// from each freelist page of a database (a deleted row's pages), each frame's image in a WAL
  /// and each page record in a rollback journal, to the image in the same file of the page its
  /// first 4 bytes name, `reach` bytes from either side. Any page starts with 4 bytes that may be
  /// a next-page number; on a page that is not an overflow page they name a random page (or
  /// none), whose seam holds no canary across it. Each image starts at most `imagesPerSeam`
  /// seams, so the cost is linear in the file's size whatever the file holds.
  func forEachLooseSeam(reach: Int, _ body: (Seam) -> Void) {
    // Images that may start a seam, and where the images of a page number are.
    var sources: [Int] = []
    var images: [Int: [Int]] = [:]
    var imageSize = pageSize
    switch kind {
    case .database:
      let pageCount = size / pageSize
      sources = freelist.filter { $0 <= pageCount }.sorted().map { ($0 - 1) * pageSize }
    case .wal:
      guard pageSize >= 512 else { return }
      for (frame, page) in walFramePages.enumerated() {
        let image = 32 + frame * (24 + pageSize) + 24
        sources.append(image)
        images[page, default: []].append(image)
      }
    case .journal:
      guard let layout = journalLayout else { return }
      imageSize = layout.pageSize
      let stride = layout.pageSize + 8
      for record in 0..<max(0, (size - layout.recordsStart) / stride) {
        let start = layout.recordsStart + record * stride
        let number = Self.read(fd, at: start, count: 4)
        guard number.count == 4 else { break }
        sources.append(start + 4)
        images[Self.be32(number, 0), default: []].append(start + 4)
      }
    case .shm, .other: return
    }
    // Reserved bytes at each page's end are not content; only page 1 says how many.
    let reserved = kind == .database ? reservedBytes : reservedBytes(images[1]?.first, imageSize: imageSize)
    let side = min(reach, imageSize - reserved - 4)
    guard side > 0 else { return }
    for source in sources {
      let pointer = Self.read(fd, at: source, count: 4)
      guard pointer.count == 4 else { continue }
      let next = Self.be32(pointer, 0)
      let targets: ArraySlice<Int>
      if kind == .database {
        guard next > 0, next <= size / pageSize else { continue }
        targets = [(next - 1) * pageSize]
      } else {
        guard let all = images[next] else { continue }
        // The nearest images before and after the source (ascending file order: binary search).
        var low = 0
        var high = all.count
        while low < high {
          let middle = (low + high) / 2
          if all[middle] < source { low = middle + 1 } else { high = middle }
        }
        let half = Self.imagesPerSeam / 2
        targets = all[max(0, low - half)..<min(all.count, low + half)]
      }
      let leftOffset = source + imageSize - reserved - side
      let left = Self.read(fd, at: leftOffset, count: side)
      guard left.count == side else { continue }
      for target in targets where target != source {
        let right = Self.read(fd, at: target + 4, count: side)
        guard !right.isEmpty else { continue }
        body(Seam(bytes: left + right, leftCount: side, leftOffset: leftOffset))
      }
    }
  }

  /// The reserved bytes per page that page 1's image at `image` gives (0 without one, or when the
  /// value leaves less than SQLite's minimum usable size of `imageSize`-byte pages).
  private func reservedBytes(_ image: Int?, imageSize: Int) -> Int {
    guard let image else { return 0 }
    let header = Self.read(fd, at: image, count: 21)
    guard header.count == 21, header.starts(with: Array("SQLite format 3".utf8) + [0]) else { return 0 }
    let reserved = Int(header[20])
    return imageSize - reserved >= 480 ? reserved : 0
  }

  /// A SQLite varint (1–9 bytes, big-endian, 7 bits per byte, the ninth byte whole).
  static func varint(_ bytes: [UInt8], _ start: Int) -> (Int, Int)? {
    var value = 0
    for index in 0..<9 {
      guard start + index < bytes.count else { return nil }
      let byte = Int(bytes[start + index])
      if index == 8 { return ((value << 8) | byte, 9) }
      value = (value << 7) | (byte & 0x7f)
      if byte & 0x80 == 0 { return (value, index + 1) }
    }
    return nil
  }

  /// The region of `offset`.
  func region(at offset: Int) -> String {
    switch kind {
    case .database: return databaseRegion(offset)
    case .wal:
      guard offset >= 32, pageSize >= 512 else { return "wal-header" }
      let frame = (offset - 32) / (24 + pageSize)
      guard frame < walValid.count else { return "wal-tail" }
      return walValid[frame] ? "wal-frame" : "stale-wal-frame"
    case .journal: return "journal"
    case .shm: return "shm"
    case .other: return "file"
    }
  }

  private func databaseRegion(_ offset: Int) -> String {
    let pageNumber = offset / pageSize + 1
    if freelist.contains(pageNumber) { return "freelist-page" }
    let page = Self.read(fd, at: (pageNumber - 1) * pageSize, count: pageSize)
    let headerStart = pageNumber == 1 ? 100 : 0
    guard page.count > headerStart + 12 else { return "page" }
    let type = page[headerStart]
    guard [0x02, 0x05, 0x0a, 0x0d].contains(type) else {
      return overflowPages.contains(pageNumber) ? "overflow-page" : "other-page"
    }
    let inPage = offset - (pageNumber - 1) * pageSize
    let headerSize = type == 0x02 || type == 0x05 ? 12 : 8
    let cells = Self.be16(page, headerStart + 3)
    let contentStart = Self.be16(page, headerStart + 5) == 0 ? 65536 : Self.be16(page, headerStart + 5)
    let pointersEnd = headerStart + headerSize + 2 * cells
    if inPage < pointersEnd { return "page-header" }
    if inPage < contentStart { return "unallocated" }
    // Free blocks form a chain from the header; each starts with (next, size).
    var block = Self.be16(page, headerStart + 1)
    var hops = 0
    while block > 0, block + 4 <= page.count, hops < 10_000 {
      // (A corrupt page can point anywhere; the bounds check above keeps reads inside it.)
      let length = Self.be16(page, block + 2)
      if inPage >= block && inPage < block + length { return "free-block" }
      block = Self.be16(page, block)
      hops += 1
    }
    return "live-cell"
  }
}
