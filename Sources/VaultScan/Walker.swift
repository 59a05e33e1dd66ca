// C boundary: open, openat, fstatat, fdopendir and readdir, for the scan's one walk of the tree.
import Foundation
import Vault

/// How the scan shows a path that is raw bytes: as valid UTF-8 that names it exactly.
///
/// A backslash is shown as `\\`; each byte that is not part of valid UTF-8, or belongs to a control
/// character (U+0000–U+001F, U+007F–U+009F), as `\xHH` (two lowercase hex digits); every other
/// character as itself. Replacing each `\\` by `\` and each `\xHH` by the byte HH gives back the
/// name's bytes, so two different names never show the same, and a name cannot start a new line
/// or send a terminal escape.
public enum PathText {
  /// `bytes` (a path or a name) shown as described above.
  ///
  /// - Parameter bytes: the raw bytes of a path or a name, as the file system holds them.
  /// - Returns: valid UTF-8 text that names those bytes exactly and holds no control character.
  public static func display(_ bytes: [UInt8]) -> String {
    var shown = ""
    shown.reserveCapacity(bytes.count)
    var index = 0
    while index < bytes.count {
      let byte = bytes[index]
      if byte == 0x5c {
        shown += "\\\\"
        index += 1
      } else if byte < 0x80 {
        if byte < 0x20 || byte == 0x7f { shown += hex(byte) } else { shown.unicodeScalars.append(Unicode.Scalar(byte)) }
        index += 1
      } else if let scalar = scalar(in: bytes, at: index) {
        let width = UTF8.width(scalar)
        if scalar.value <= 0x9f {
          for byte in bytes[index..<(index + width)] { shown += hex(byte) }
        } else {
          shown.unicodeScalars.append(scalar)
        }
        index += width
      } else {
        shown += hex(byte)
        index += 1
      }
    }
    return shown
  }

  /// The scalar whose valid UTF-8 starts at `index`, or nil (a byte that starts no valid sequence:
  /// a stray continuation, an overlong form, a surrogate, a sequence cut short).
  private static func scalar(in bytes: [UInt8], at index: Int) -> Unicode.Scalar? {
    var iterator = bytes[index..<min(bytes.count, index + 4)].makeIterator()
    var decoder = UTF8()
    if case .scalarValue(let scalar) = decoder.decode(&iterator) { return scalar }
    return nil
  }

  private static func hex(_ byte: UInt8) -> String {
    let digits = Array("0123456789abcdef".unicodeScalars)
    return "\\x" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0xf)])
  }
}

/// The scan's one walk: the only code that chooses which files are read. Names stay bytes; every
/// child is looked at (`fstatat`) and opened (`openat`) relative to its parent's open descriptor,
/// never by a path that could be swapped under it, and never through a symlink.
extension Scanner {
  /// A directory by device and inode: the same directory reached twice (a bind mount of an
  /// ancestor inside itself) has the same identity.
  struct DirectoryIdentity: Equatable {
    let device: UInt64
    let inode: UInt64

    init(_ info: stat) {
      device = UInt64(info.st_dev)
      inode = UInt64(info.st_ino)
    }
  }

  /// How deep directories are walked: each level holds one descriptor, so a tree deeper than the
  /// open-file limit allows is cut (and listed as incomplete) instead of failing at random. 4,096,
  /// or half the soft limit less 16 when that is lower (at least 8).
  static func depthLimit() -> Int {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 64 }
    let soft = Int(clamping: limit.rlim_cur)
    return max(8, min(4096, soft / 2 - 16))
  }

  /// Walks one path given to `scan`: a directory recursively, a file, or a symlink or special file
  /// (not followed or opened, and listed as incomplete: nothing of that path was read).
  /// - Throws: `ScanError.unreadable` when `path` cannot be looked at (it does not exist); what
  ///   `audit` throws.
  func walk(root given: String, depthLimit: Int, report: inout ScanReport, files: FilePipeline) throws {
    let path = Self.plainPath(given)
    let (bytes, shown) = screenedPath(Array(path.utf8), in: nil, report: &report)
    var info = stat()
    guard lstat(path, &info) == 0 else { throw ScanError.unreadable(path: shown, errno: errno) }
    switch info.st_mode & S_IFMT {
    case S_IFDIR:
      let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
      guard fd >= 0 else {
        report.incomplete.append(Skipped(path: shown, reason: "directory not readable (\(Self.reason(errno)))"))
        return
      }
      try walkDirectory(fd, raw: bytes, shown: shown, depthLimit: depthLimit, report: &report, files: files)
    case S_IFREG:
      try files.submit(in: AT_FDCWD, name: bytes, shown: shown, segment: &report)
    case S_IFLNK:
      // Not followed here either; but a PATH that is a symlink was asked for and nothing of it was
      // read, so the audit cannot say it is clean (inside a tree a symlink holds no data of its own).
      report.incomplete.append(
        Skipped(path: shown, reason: "symlink given as a path (not followed: scan what it points to)"))
    default:
      // Like a symlink given as a path: asked for and never read, so the audit is incomplete
      // (inside a tree, special files are only listed as skipped).
      report.incomplete.append(Skipped(path: shown, reason: Self.notRead(info) + ", given as a path"))
    }
  }

  /// Why a path that is not a directory or a regular file was not read.
  static func notRead(_ info: stat) -> String {
    switch info.st_mode & S_IFMT {
    case S_IFLNK: "symlink (not followed)"
    case S_IFIFO: "FIFO (never opened)"
    case S_IFSOCK: "socket (never opened)"
    case S_IFCHR: "character device (never opened)"
    case S_IFBLK: "block device (never opened)"
    default: "not a regular file (never opened)"
    }
  }

  /// The system's name for an error (a kind, never anything read from a file).
  static func reason(_ code: Int32) -> String { String(cString: strerror(code)) }

  /// A directory being walked: its descriptor and stream, how it is shown, its names in byte
  /// order and which comes next.
  private struct DirectoryFrame {
    let fd: Int32
    let stream: OpaquePointer
    /// The directory's path as bytes (what canaries are looked for in) and as shown.
    let raw: [UInt8]
    let shown: String
    let identity: DirectoryIdentity
    let names: [[UInt8]]
    var next = 0
  }

  /// Walks the directory open at `fd` (taking it over and closing it): lists every name, then
  /// looks at each one in byte order, depth first. The walk keeps its own stack of open
  /// directories (not the thread's: a tree thousands of levels deep must not overflow it); the
  /// directories on that stack are also what a directory loop is checked against.
  private func walkDirectory(
    _ fd: Int32, raw: [UInt8], shown: String, depthLimit: Int, report: inout ScanReport, files: FilePipeline
  ) throws {
    var stack: [DirectoryFrame] = []
    defer { for frame in stack { closedir(frame.stream) } }
    guard let root = Self.openFrame(fd, raw: raw, shown: shown, report: &report) else { return }
    screenAttributes(root.fd, path: root.shown, report: &report)
    stack.append(root)
    while let top = stack.indices.last {
      guard stack[top].next < stack[top].names.count else {
        closedir(stack.removeLast().stream)
        continue
      }
      let name = stack[top].names[stack[top].next]
      stack[top].next += 1
      let fd = stack[top].fd
      let (childRaw, childShown) = screenedPath(name, in: (stack[top].raw, stack[top].shown), report: &report)
      var child = stat()
      guard Self.withCString(name, { fstatat(fd, $0, &child, AT_SYMLINK_NOFOLLOW) }) == 0 else {
        report.incomplete.append(Skipped(path: childShown, reason: "vanished or unreadable (\(Self.reason(errno)))"))
        continue
      }
      switch child.st_mode & S_IFMT {
      case S_IFDIR:
        if stack.contains(where: { $0.identity == DirectoryIdentity(child) }) {
          report.skipped.append(Skipped(path: childShown, reason: "directory loop (already being scanned above)"))
          continue
        }
        guard stack.count < depthLimit else {
          report.incomplete.append(
            Skipped(path: childShown, reason: "directory nested deeper than \(depthLimit) levels: not read"))
          continue
        }
        let childFD = Self.withCString(name) { openat(fd, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        guard childFD >= 0 else {
          let code = errno
          let reason = code == ELOOP || code == ENOTDIR ? "changed while being scanned" : Self.reason(code)
          report.incomplete.append(Skipped(path: childShown, reason: "directory not readable (\(reason))"))
          continue
        }
        var opened = stat()
        guard fstat(childFD, &opened) == 0, DirectoryIdentity(opened) == DirectoryIdentity(child) else {
          close(childFD)
          report.incomplete.append(
            Skipped(path: childShown, reason: "directory not read (changed while being scanned)"))
          continue
        }
        if let frame = Self.openFrame(childFD, raw: childRaw, shown: childShown, report: &report) {
          screenAttributes(frame.fd, path: frame.shown, report: &report)
          stack.append(frame)
        }
      case S_IFREG:
        try files.submit(in: fd, name: name, shown: childShown, segment: &report)
      case S_IFLNK:
        // Not followed; but what it points to is written on disk too.
        if let target = Self.linkTarget(in: fd, name: name) {
          screenTarget(target, of: childShown, report: &report)
        }
        report.skipped.append(Skipped(path: childShown, reason: Self.notRead(child)))
      default:
        report.skipped.append(Skipped(path: childShown, reason: Self.notRead(child)))
      }
    }
  }

  /// The path of `name` in the directory whose path is `parent` (its bytes, and as shown; nil for
  /// a path given to the scan), searched whole for every form of every canary: names are written
  /// on disk too (an app that names a file after its user's address), and a canary with a slash
  /// in it (`acct/4242`) spans two names. Each canary form that matches where the match ends in
  /// `name` or on the slash before it is one finding (region "file-name", offset 0), however often it matches there (an
  /// outside review: one finding per match made a 4 KiB name thousands); one wholly inside
  /// `parent` was reported with it. The path comes back as `PathText.display` shows it, each match
  /// replaced by `\{canary}`, which `display` never writes (it writes a backslash as `\\`): no
  /// line of the report holds the canary, and a masked name cannot be taken for another name.
  ///
  /// - Returns: the path's bytes, and the path as shown.
  func screenedPath(_ name: [UInt8], in parent: (raw: [UInt8], shown: String)?, report: inout ScanReport)
    -> (raw: [UInt8], shown: String)
  {
    let separator: [UInt8] = parent.map { $0.raw.last == 0x2f ? [] : [0x2f] } ?? []
    let raw = (parent?.raw ?? []) + separator + name
    let matches = canaryMatches(in: raw)
    guard !matches.isEmpty else {
      // No canary anywhere in it, the parent's part included: shown as it always was.
      return (raw, (parent.map { $0.shown + (separator.isEmpty ? "" : "/") } ?? "") + PathText.display(name))
    }
    let shown = Self.masked(raw, matches.map(\.range))
    // Reported here when it ends past the parent's path: in `name`, or on the slash before it
    // (a canary `secretdir/` ends there; a security review found it reported nowhere).
    let parentEnd = parent?.raw.count ?? 0
    var said = Set<String>()
    reportForms(
      of: matches.filter { $0.range.upperBound > parentEnd }, in: raw, at: shown, region: "file-name", said: &said,
      report: &report)
    return (raw, shown)
  }

  /// `path` with each run of slashes written as one and each `.` name after a slash left out
  /// (`tree//acct/./4242` is `tree/acct/4242`), as the kernel reads it: the path is searched for
  /// canaries as written, and a canary `acct/4242` was missed in `tree//acct/4242` (a review). A
  /// leading `./` and a final `/` stay, as they say something (a relative path; a directory).
  static func plainPath(_ path: String) -> String {
    // By bytes, not characters: a slash and a combining mark after it are one Character.
    let slash = UInt8(ascii: "/")
    let dot = UInt8(ascii: ".")
    let bytes = Array(path.utf8)
    var plain: [UInt8] = []
    for (index, part) in bytes.split(separator: slash, omittingEmptySubsequences: false).enumerated()
    where index == 0 || !(part.isEmpty || part.elementsEqual([dot])) {
      if index > 0 { plain.append(slash) }
      plain += part
    }
    // `dir/.` and `dir//` end on an empty name or a dropped one: say the directory with one slash.
    if bytes.last == slash || bytes.suffix(2).elementsEqual([slash, dot]), plain.last != slash { plain.append(slash) }
    return plain.isEmpty ? path : String(decoding: plain, as: UTF8.self)
  }

  /// A symlink's target, searched for every form of every canary: one finding per form found
  /// (region "symlink-target", offset 0) at the link's path as shown.
  func screenTarget(_ target: [UInt8], of link: String, report: inout ScanReport) {
    var said = Set<String>()
    reportForms(
      of: canaryMatches(in: target), in: target, at: link, region: "symlink-target", said: &said, report: &report)
  }

  /// One canary finding (offset 0, in `region`, at `file`) per form among `matches` (found in
  /// `bytes`) not in `said` yet, however often it matches: a name, a link target or an attribute
  /// holding a canary many times is one leak (an outside review: one finding per match made 2,000
  /// long link targets 2 million findings).
  func reportForms(
    of matches: [(range: Range<Int>, encoding: String)], in bytes: [UInt8], at file: String, region: String,
    said: inout Set<String>, report: inout ScanReport
  ) {
    for match in matches where said.insert(match.encoding).inserted {
      report.findings.append(
        Finding(
          file: file, offset: 0, region: region, detector: "canary", encoding: match.encoding,
          excerpt: redact(bytes[match.range])))
    }
  }

  /// Every match of every form of every canary in `bytes`: where, and which form.
  func canaryMatches(in bytes: [UInt8]) -> [(range: Range<Int>, encoding: String)] {
    guard !patterns.isEmpty else { return [] }
    var matches: [(range: Range<Int>, encoding: String)] = []
    bytes.withUnsafeBytes { buffer in
      searcher.search(buffer) { start, index in
        matches.append((start..<(start + patterns[index].bytes.count), patterns[index].encoding))
      }
    }
    return matches
  }

  /// `bytes` as `render` (by default `PathText.display`) shows them, each of `ranges` replaced by
  /// `mask` (overlapping or adjacent ones, such as a canary inside another or hex in both cases,
  /// as one).
  static func masked(
    _ bytes: [UInt8], _ ranges: [Range<Int>], render: ([UInt8]) -> String = PathText.display
  ) -> String {
    var merged: [Range<Int>] = []
    for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
      if let last = merged.last, range.lowerBound <= last.upperBound {
        merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
      } else {
        merged.append(range)
      }
    }
    var shown = ""
    var next = 0
    for range in merged {
      shown += render(Array(bytes[next..<range.lowerBound])) + mask
      next = range.upperBound
    }
    return shown + render(Array(bytes[next...]))
  }

  /// `text` (a queue name, an id: text a report quotes from a file) with each canary form in it
  /// replaced by `mask`; the rest as it is.
  func maskingCanaries(_ text: String) -> String {
    let bytes = Array(text.utf8)
    let matches = canaryMatches(in: bytes)
    guard !matches.isEmpty else { return text }
    return Self.masked(bytes, matches.map(\.range)) { String(decoding: $0, as: UTF8.self) }
  }

  /// What a canary found in a name is shown as.
  static let mask = "\\{canary}"

  /// The target of the symlink `name` in the directory open at `directory`; nil when it cannot be
  /// read (it changed meanwhile: nothing of it is on disk to search).
  static func linkTarget(in directory: Int32, name: [UInt8]) -> [UInt8]? {
    var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = withCString(name) { path in
      buffer.withUnsafeMutableBytes {
        readlinkat(directory, path, $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count)
      }
    }
    return count > 0 ? Array(buffer[0..<count]) : nil
  }

  /// Takes over the directory open at `fd` and lists its names (closing it when it cannot be read).
  private static func openFrame(_ fd: Int32, raw: [UInt8], shown: String, report: inout ScanReport) -> DirectoryFrame? {
    var info = stat()
    guard fstat(fd, &info) == 0, let stream = fdopendir(fd) else {
      report.incomplete.append(Skipped(path: shown, reason: "directory not readable (\(Self.reason(errno)))"))
      close(fd)
      return nil
    }
    var names: [[UInt8]] = []
    while true {
      errno = 0
      guard let entry = readdir(stream) else {
        if errno != 0 {
          report.incomplete.append(
            Skipped(path: shown, reason: "directory not fully listed (\(Self.reason(errno)))"))
        }
        break
      }
      let name = directoryEntryName(entry)
      if name != [0x2e], name != [0x2e, 0x2e] { names.append(name) }
    }
    names.sort { $0.lexicographicallyPrecedes($1) }
    return DirectoryFrame(
      fd: fd, stream: stream, raw: raw, shown: shown, identity: DirectoryIdentity(info), names: names)
  }

  /// Opens the regular file `name` in the directory open at `directory` (or a path, with
  /// `AT_FDCWD`) without following a symlink or waiting on a FIFO swapped in since it was looked
  /// at, checks it is still a regular file, and reads it on this thread: the detectors, then the
  /// container audit for a SQLite database, both on this one descriptor. (A scan reads the files
  /// it walks this way on two threads: `FilePipeline`.)
  func readFile(in directory: Int32, name: [UInt8], shown: String, report: inout ScanReport) throws {
    guard let file = openFile(in: directory, name: name, shown: shown, report: &report) else { return }
    defer { close(file.fd) }
    let kind = readDetectors(file, scratch: ScanScratch(), report: &report) { _ in }
    try completeFile(file, kind: kind, links: .process, report: &report)
  }

  /// Calls `body` with `bytes` as a NUL-terminated C string.
  static func withCString<T>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> T) -> T {
    (bytes + [0]).withUnsafeBufferPointer { buffer in
      buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { body($0) }
    }
  }
}
