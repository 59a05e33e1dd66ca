import Foundation

/// What a file holds, judged from its first bytes (never from its name), and so which of the
/// heuristic detectors mean something in it.
///
/// The heuristics (`json-text`, `key-value-text`, `natural-language`) look for an app's plaintext
/// records where only ciphertext should be. A sentence in a SQLite page, a journal or a core dump
/// is such a record; a sentence in a README, a docstring in Python bytecode or a message string in
/// a shared library is not. Canary matches, key material and envelope checks run on every kind.
enum ContentKind: String {
  /// A SQLite database, WAL, rollback journal or shm file: vault keeps only ciphertext there, so
  /// every printable run of text in any region is judged.
  case sqlite
  /// An ELF core dump: a process's memory, where records sit as printable runs between binary data.
  case memoryImage
  /// Machine code or bytecode (ELF executables, libraries and objects, `ar` archives, Python
  /// bytecode, Java classes, WebAssembly, Mach-O) and compiled resources (gettext catalogs, GObject
  /// typelibs): its strings are the program's own literals and translations.
  case compiledCode
  /// Text whose lines mostly start with a date or a time: a log. Sentences and key=value pairs are
  /// judged there when they are rare in it (a typed note between machine records stands out).
  case textLog
  /// Any other text: documents (PDF and PostScript too), source code, configuration. Prose and `key=value` pairs are what
  /// such files are made of; only JSON objects and HTTP form bodies (`a=1&b=2` alone on a line)
  /// are judged.
  case text
  /// vault's own manifest and memo history: paths and states, not user data. A backup bundle
  /// (`VAULTBKP` magic) counts as one too: its JSON manifest is metadata by design and its
  /// snapshots hold sealed envelopes; canaries and key material are still searched in all of it,
  /// while plaintext in its container pages is judged by scanning the containers themselves.
  case vaultMetadata
  /// Anything else (spill files, caches, images): printable runs of text are judged.
  case binary

  /// Classifies a file from its first 64 KiB and the SQLite kind its header gave.
  static func of(head: [UInt8], fileKind: FileKind, vaultMetadata: Bool) -> ContentKind {
    if vaultMetadata || head.starts(with: Array("VAULTBKP".utf8)) { return .vaultMetadata }
    if fileKind != .other { return .sqlite }
    if let code = codeOrCore(head) { return code }
    // PDF and PostScript documents (their magic numbers): prose and drawing operators, also in
    // the compressed page streams a PDF holds.
    if head.starts(with: Array("%PDF-".utf8)) || head.starts(with: Array("%!PS".utf8)) { return .text }
    guard isText(head.prefix(4096)) else { return .binary }
    return isLog(head) ? .textLog : .text
  }

  /// Whether the heuristic `json-text` detector runs on this kind.
  var judgesJSON: Bool { self != .compiledCode && self != .vaultMetadata }

  /// The `key-value-text` and `natural-language` findings in one chunk of a file of this kind.
  /// `braces`: `RecordSyntax.quotedBraces(bytes)`, when the caller has it already; `wholeText`:
  /// false when `bytes` is one chunk of a larger file (`RecordSyntax.objects`). In a log, the lines
  /// are judged rare among those of `bytes` (`Scanner.scanFile` judges them over a fixed window).
  func textFindings(
    _ bytes: UnsafeRawBufferPointer, braces: [Int]? = nil, wholeText: Bool = true
  ) -> [TextDetectors.Hit] {
    switch self {
    case .sqlite, .memoryImage, .binary:
      TextDetectors.runFindings(bytes) + TextDetectors.structuredFindings(bytes, braces: braces, wholeText: wholeText)
        + TextDetectors.utf16Findings(bytes)
    case .textLog: TextDetectors.rareLineFindings(bytes)
    case .text: TextDetectors.formBodies(bytes)
    case .compiledCode, .vaultMetadata: []
    }
  }

  /// Executable formats by their magic numbers (exact); an ELF file of type ET_CORE is a memory image.
  private static func codeOrCore(_ head: [UInt8]) -> ContentKind? {
    guard head.count >= 8 else { return nil }
    let magic = UInt32(head[0]) << 24 | UInt32(head[1]) << 16 | UInt32(head[2]) << 8 | UInt32(head[3])
    if magic == 0x7f45_4c46 {  // "\x7fELF"
      guard head.count >= 18 else { return .compiledCode }
      // e_type sits at offset 16 in the file's byte order (EI_DATA: 1 little, 2 big endian).
      let type = head[5] == 2 ? UInt16(head[16]) << 8 | UInt16(head[17]) : UInt16(head[17]) << 8 | UInt16(head[16])
      return type == 4 ? .memoryImage : .compiledCode
    }
    if head.starts(with: Array("!<arch>\n".utf8)) { return .compiledCode }
    // Java class (also a Mach-O fat binary), WebAssembly, Mach-O 32/64 in both byte orders, and
    // compiled resources made of the program's own strings: gettext message catalogs (msgfmt's
    // .mo, both byte orders) and GObject typelibs.
    let compiled: [UInt32] = [
      0xcafe_babe, 0x0061_736d, 0xfeed_face, 0xfeed_facf, 0xcefa_edfe, 0xcffa_edfe, 0x9504_12de, 0xde12_0495,
    ]
    if compiled.contains(magic) || head.starts(with: Array("GOBJ\nMETADATA\r\n\u{1a}".utf8)) { return .compiledCode }
    // Python bytecode: a two-byte little-endian version magic, then "\r\n".
    let python = Int(head[0]) | Int(head[1]) << 8
    if head[2] == 0x0d, head[3] == 0x0a, (2900...4000).contains(python) || (60000...62300).contains(python) {
      return .compiledCode
    }
    return nil
  }

  /// At least 95% printable: ASCII text, tabs, line breaks and well-formed UTF-8 sequences (random
  /// high bytes are not text). A file shorter than 64 bytes must be all printable, so a short key
  /// or record is not mistaken for binary, nor a short binary for text.
  static func isText(_ head: ArraySlice<UInt8>) -> Bool {
    guard !head.isEmpty else { return false }
    return head.withUnsafeBufferPointer { isText($0) }
  }

  private static func isText(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    // Once even all the bytes left could not bring the printable ones to the share needed, the
    // answer is no (random data: within a few hundred bytes, not 4 KiB).
    let needed = Double(bytes.count) * 0.95
    var printable = 0
    var index = 0
    while index < bytes.count {
      if bytes.count < 64 ? printable < index : Double(printable + bytes.count - index) < needed { return false }
      let byte = bytes[index]
      if (byte >= 0x20 && byte < 0x7f) || byte == 0x0a || byte == 0x0d || byte == 0x09 {
        printable += 1
        index += 1
        continue
      }
      let length =
        byte >= 0xc2 && byte <= 0xdf ? 2 : byte >= 0xe0 && byte <= 0xef ? 3 : byte >= 0xf0 && byte <= 0xf4 ? 4 : 0
      var valid = length > 0
      var next = index + 1
      // A sequence cut off by the end of the head counts as text.
      while valid, next < min(index + length, bytes.count) {
        valid = bytes[next] & 0xc0 == 0x80
        next += 1
      }
      if valid {
        printable += next - index
        index = next
      } else {
        index += 1
      }
    }
    return bytes.count < 64 ? printable == bytes.count : Double(printable) >= Double(bytes.count) * 0.95
  }

  /// At least two lines, and 30% of the lines (of 16 bytes or more), carry a date (`2026-11-30`,
  /// `2026/11/30`) or a time (`10:00:01`) in their first 40 bytes, as log records do; multi-line
  /// records (stack traces) leave room for the rest. (A script whose one `$Id: … 2005-07-03 …$`
  /// line is a third of it is no log.)
  static func isLog(_ head: [UInt8]) -> Bool {
    var lines = 0
    var stamped = 0
    var start = 0
    while start < head.count {
      let end = head[start...].firstIndex(of: 0x0a) ?? head.count
      if end - start >= 16 {
        lines += 1
        if hasTimestamp(head[start..<min(end, start + 40)]) { stamped += 1 }
      }
      start = end + 1
    }
    return stamped >= 2 && stamped * 10 >= lines * 3
  }

  private static func hasTimestamp(_ prefix: ArraySlice<UInt8>) -> Bool {
    let bytes = Array(prefix)
    func digits(_ at: Int, _ count: Int) -> Bool {
      at + count <= bytes.count && bytes[at..<(at + count)].allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }
    for at in bytes.indices {
      // 2026-11-30 or 2026/11/30
      if digits(at, 4), at + 10 <= bytes.count, bytes[at + 4] == bytes[at + 7],
        bytes[at + 4] == 0x2d || bytes[at + 4] == 0x2f, digits(at + 5, 2), digits(at + 8, 2)
      {
        return true
      }
      // 10:00:01
      if digits(at, 2), at + 8 <= bytes.count, bytes[at + 2] == 0x3a, bytes[at + 5] == 0x3a, digits(at + 3, 2),
        digits(at + 6, 2)
      {
        return true
      }
    }
    return false
  }
}
