import Foundation

/// Heuristic detectors for an app's plaintext records: key=value records and long natural-language
/// lines, judged line by line in text or in printable runs inside binary data. Which of them run
/// on a file depends on what the file is (`ContentKind`).
enum TextDetectors {
  struct Hit {
    let start: Int
    let end: Int
    let detector: String
  }

  // Byte classes, looked up once per byte: letter (also any non-ASCII byte), word byte
  // (letters, digits, '_' and '-'), '=' and space.
  private static let letter: UInt8 = 1
  private static let word: UInt8 = 2
  private static let equals: UInt8 = 4
  private static let space: UInt8 = 8
  private static let classes: [UInt8] = (0..<256).map { value in
    var bits: UInt8 = 0
    let isLetter = (0x41...0x5a).contains(value) || (0x61...0x7a).contains(value) || value >= 0x80
    if isLetter { bits |= letter | word }
    if (0x30...0x39).contains(value) || value == 0x5f || value == 0x2d { bits |= word }
    if value == 0x3d { bits |= equals }
    if value == 0x20 { bits |= space }
    return bits
  }

  /// Lines with two or more `key=value` pairs (`user=ana&card=4111`, `token=… scope=…`), and lines
  /// of at least eight words of two or more letters that are at least 80% letters and spaces
  /// (sentences someone typed).
  static func findings(_ bytes: UnsafeRawBufferPointer) -> [Hit] { judgeLines(bytes).hits }

  /// The lines `findings` would report in a log, per detector only while they are rare there: at
  /// most two, or one line in twenty (of 16 bytes or more). A typed note or a form post between
  /// machine records stands out; a log whose every message reads like prose, or is all
  /// `key=value` pairs (logfmt), says nothing by that.
  static func rareLineFindings(_ bytes: UnsafeRawBufferPointer) -> [Hit] {
    let (hits, lines) = judgeLines(bytes)
    var kept: [Hit] = []
    for detector in lineDetectors {
      let these = hits.filter { $0.detector == detector }
      if isRare(these.count, amongLines: lines) { kept += these }
    }
    return kept.sorted { $0.start < $1.start }
  }

  /// The two detectors `judgeLines` reports, judged rare in a log.
  static let lineDetectors = ["key-value-text", "natural-language"]

  /// The index of the line break at or after `start` in `bytes`, or `bytes.count` (memchr is
  /// vectorised: a loop over the bytes was a quarter of a scan of pretty-printed JSON files).
  @inline(__always)
  private static func lineEnd(_ bytes: UnsafeRawBufferPointer, from start: Int, base: UnsafeRawPointer) -> Int {
    memchr(base + start, 0x0a, bytes.count - start).map { base.distance(to: UnsafeRawPointer($0)) } ?? bytes.count
  }

  /// The rule `rareLineFindings` judges by: `count` lines of one detector are rare among `lines`
  /// lines (of 16 bytes or more) when they are at most two, or one in twenty.
  static func isRare(_ count: Int, amongLines lines: Int) -> Bool { count <= max(2, lines / 20) }

  /// A log's sentences and `key=value` lines, judged rare (`isRare`) among the lines of one window
  /// of the file whatever size of chunk the file is read in: lines counted in a chunk of 128 KiB
  /// were too many for 150 sentences among 300 KB of log lines to be rare, and they were dropped
  /// (review). Windows are `size` bytes from the file's start, and the last one runs to the file's
  /// end whenever what would follow it is shorter than half a window (3 sentences in a last
  /// window of 1 KB were not rare among its 13 lines: review). Lines are counted and findings held
  /// as chunks come; `flush` says which stand when the window ends.
  struct RareLineWindow {
    /// 4 MiB: what a chunk was when the rule was made (and tuned on logs).
    static let size = 4 << 20
    /// Which window the byte at `offset` of a file of `fileSize` bytes is in.
    static func index(of offset: Int, fileSize: Int) -> Int {
      min(offset / size, max(0, (fileSize - size / 2) / size))
    }
    /// Which window (`index(of:fileSize:)`) the lines and findings are of.
    private(set) var index = 0
    private var lines = 0
    /// Per detector (`lineDetectors`), how many findings the window holds and the first of them (no more than a file lists, `findingsPerDetectorPerFile`): a finding is made
    /// only for those, so a log of nothing but sentences costs a count per line and its memory
    /// stays bounded (making one per line took twice the time: review).
    private var counts = [0, 0]
    private var held: [[Finding]] = [[], []]

    /// Counts `lines` lines of 16 bytes or more that start in the window.
    mutating func count(lines more: Int) { lines += more }

    /// Counts a line of `detector` (one of `judgeLines`'s two) in the window, and holds its finding
    /// (`finding()`) if it may be listed.
    mutating func hold(_ detector: String, _ finding: () -> Finding) {
      let slot = detector == lineDetectors[0] ? 0 : 1
      assert(detector == lineDetectors[slot], "judgeLines reports two detectors")
      counts[slot] += 1
      if held[slot].count < ScanReport.findingsPerDetectorPerFile { held[slot].append(finding()) }
    }

    /// Adds to `report` the findings that are rare in the window that ends (those held listed,
    /// the rest counted), and starts the window numbered `next`.
    mutating func flush(into report: inout ScanReport, startingWindow next: Int) {
      for slot in 0..<2 where counts[slot] > 0 && isRare(counts[slot], amongLines: lines) {
        for finding in held[slot] { report.add(finding) }
        report.count(counts[slot] - held[slot].count, moreOf: lineDetectors[slot])
      }
      self = RareLineWindow()
      index = next
    }
  }

  /// Lines that are an HTTP form body and nothing else: two or more `key=value` pairs joined by
  /// `&`, no spaces (`user=ana&card=4111&amount=90`), as an app's request records are. In documents
  /// and source code, pairs come with spaces, quotes, a URL or a command line around them.
  static func formBodies(_ bytes: UnsafeRawBufferPointer) -> [Hit] {
    guard let base = bytes.baseAddress else { return [] }
    var hits: [Hit] = []
    var lineStart = 0
    while lineStart < bytes.count {
      let lineEnd = lineEnd(bytes, from: lineStart, base: base)
      var end = lineEnd
      if end > lineStart, bytes[end - 1] == 0x0d { end -= 1 }
      if end - lineStart >= 16, isFormBody(UnsafeRawBufferPointer(rebasing: bytes[lineStart..<end])) {
        hits.append(Hit(start: lineStart, end: end, detector: "key-value-text"))
      }
      lineStart = lineEnd + 1
    }
    return hits
  }

  private static func isFormBody(_ line: UnsafeRawBufferPointer) -> Bool {
    var pairs = 0
    var filledValues = 0
    var keyLength = 0
    var valueLength = 0
    var inValue = false
    for byte in line {
      let isKeyByte = classes[Int(byte)] & word != 0 || byte == 0x2e || byte == 0x25 || byte == 0x5b || byte == 0x5d
      if !inValue {
        if byte == 0x3d, keyLength > 0 {
          inValue = true
          valueLength = 0
        } else if isKeyByte {
          keyLength += 1
        } else {
          return false
        }
      } else if byte == 0x26 {
        pairs += 1
        if valueLength > 0 { filledValues += 1 }
        inValue = false
        keyLength = 0
      } else if byte <= 0x20 || byte == 0x3d || byte == 0x7f {
        return false
      } else {
        valueLength += 1
      }
    }
    guard inValue else { return false }
    pairs += 1
    if valueLength > 0 { filledValues += 1 }
    return pairs >= 2 && filledValues >= 2
  }

  /// The lines of `bytes` that `findings` reports, and how many lines of 16 bytes or more start
  /// in `counted` (by default, all of them).
  static func judgeLines(
    _ bytes: UnsafeRawBufferPointer, counting counted: Range<Int> = 0..<Int.max
  ) -> (hits: [Hit], lines: Int) {
    guard let base = bytes.baseAddress else { return ([], 0) }
    var hits: [Hit] = []
    var lines = 0
    classes.withUnsafeBufferPointer { table in
      var lineStart = 0
      // Each byte of a line is classified once.
      while lineStart < bytes.count {
        let lineEnd = lineEnd(bytes, from: lineStart, base: base)
        if lineEnd - lineStart >= 16, counted.contains(lineStart) { lines += 1 }
        if lineEnd - lineStart >= 16, !couldBePairs(base + lineStart, lineEnd - lineStart) {
          // A pre-filter: without two '=' the line can only be a sentence, and it stops being
          // one as soon as too many of its bytes are neither letters nor spaces (a log line's date
          // and numbers rule it out within a few bytes).
          if let hit = sentence(table, base + lineStart, lineEnd - lineStart) {
            hits.append(Hit(start: lineStart + hit.start, end: lineStart + hit.end, detector: hit.detector))
          }
        } else if lineEnd - lineStart >= 16 {
          var letters = 0
          var spaces = 0
          var words = 0
          var wordLength = 0
          var keyLength = 0
          var pairs = 0
          var previousWasPairEquals = false
          var pointer = base.assumingMemoryBound(to: UInt8.self) + lineStart
          let stop = base.assumingMemoryBound(to: UInt8.self) + lineEnd
          while pointer < stop {
            let byte = pointer.pointee
            let bits = table[Int(byte)]
            if previousWasPairEquals && byte > 0x20 { pairs &+= 1 }
            previousWasPairEquals = false
            if bits & letter != 0 {
              letters &+= 1
              wordLength &+= 1
            } else {
              // A word ends where a run of two or more letters stops.
              if wordLength >= 2 { words &+= 1 }
              wordLength = 0
              if bits & space != 0 { spaces &+= 1 }
            }
            if bits & word != 0 {
              keyLength &+= 1
            } else {
              previousWasPairEquals = bits & equals != 0 && keyLength >= 2
              keyLength = 0
            }
            pointer += 1
          }
          if wordLength >= 2 { words += 1 }
          if pairs >= 2 {
            hits.append(Hit(start: lineStart, end: lineEnd, detector: "key-value-text"))
          } else if words >= 8, Double(letters + spaces) >= Double(lineEnd - lineStart) * 0.8 {
            hits.append(Hit(start: lineStart, end: lineEnd, detector: "natural-language"))
          }
        }
        lineStart = lineEnd + 1
      }
    }
    return (hits, lines)
  }

  /// Whether the line holds two '=' or more: a line of two `key=value` pairs needs them.
  @inline(__always)
  private static func couldBePairs(_ line: UnsafeRawPointer, _ count: Int) -> Bool {
    guard let first = memchr(line, 0x3d, count) else { return false }
    let after = line.distance(to: UnsafeRawPointer(first)) + 1
    return memchr(line + after, 0x3d, count - after) != nil
  }

  /// The natural-language judgement of `judgeLines` for a line that cannot be two pairs: at least
  /// eight words of two or more letters, and letters and spaces at least 80 % of the line. The
  /// count stops once the other bytes already make the 80 % impossible.
  private static func sentence(
    _ table: UnsafeBufferPointer<UInt8>, _ line: UnsafeRawPointer, _ count: Int
  ) -> (start: Int, end: Int, detector: String)? {
    let needed = Double(count) * 0.8
    let allowed = count < othersAllowedByCount.count ? othersAllowedByCount[count] : othersAllowed(count)
    guard allowed >= 0 else { return nil }
    // Eight bytes at a time first: most lines that are no sentence fail here.
    var others = 0
    var at = 0
    while at + 8 <= count {
      others &+= 8 &- highBits(letterOrSpace(line.loadUnaligned(fromByteOffset: at, as: UInt64.self)))
      if others > allowed { return nil }
      at += 8
    }
    var letters = 0
    var spaces = 0
    others = 0
    var words = 0
    var wordLength = 0
    let bytes = line.assumingMemoryBound(to: UInt8.self)
    for index in 0..<count {
      let bits = table[Int(bytes[index])]
      if bits & letter != 0 {
        letters &+= 1
        wordLength &+= 1
        continue
      }
      if wordLength >= 2 { words &+= 1 }
      wordLength = 0
      if bits & space != 0 {
        spaces &+= 1
      } else {
        others &+= 1
        if others > allowed { return nil }
      }
    }
    if wordLength >= 2 { words += 1 }
    guard words >= 8, Double(letters + spaces) >= needed else { return nil }
    return (0, count, "natural-language")
  }

  /// The most bytes of a line of `count` bytes that may be neither letters nor spaces for it to be a
  /// sentence (-1: none): letters and spaces can be at most `count - others`, which must stay at
  /// least 80 % of `count`, compared in floating point as `sentence` compares them.
  static func othersAllowed(_ count: Int) -> Int {
    let needed = Double(count) * 0.8
    var allowed = Int((Double(count) * 0.2).rounded(.down))
    while allowed + 1 <= count, Double(count - allowed - 1) >= needed { allowed += 1 }
    while allowed >= 0, Double(count - allowed) < needed { allowed -= 1 }
    return allowed
  }

  /// `othersAllowed` of every line length below 4,096, computed once (per line it cost a third of
  /// `sentence` on a log, whose lines mostly fail within 16 bytes).
  private static let othersAllowedByCount: [Int] = (0..<4096).map(othersAllowed)

  /// How many bytes of `mask` are 0x80, when each is 0x80 or 0: the eight bits, moved to the low bit
  /// of each byte, summed into the top byte by one multiplication (the baseline x86-64 the package
  /// builds for has no popcnt instruction; `nonzeroBitCount` is a dozen).
  @inline(__always)
  static func highBits(_ mask: UInt64) -> Int {
    Int(truncatingIfNeeded: ((mask &>> 7) &* 0x0101_0101_0101_0101) &>> 56)
  }

  /// The high bit of each byte of `word` that `classes` calls a letter (ASCII letters and every
  /// byte from 0x80) or a space, computed for all 8 at once.
  @inline(__always)
  static func letterOrSpace(_ word: UInt64) -> UInt64 {
    let high: UInt64 = 0x8080_8080_8080_8080
    // Folded to lower case, 7 bits per byte: 'a'...'z' is 0x61...0x7a (no sum carries out of a byte).
    let folded = (word | 0x2020_2020_2020_2020) & 0x7f7f_7f7f_7f7f_7f7f
    let ascii = (folded &+ 0x1f1f_1f1f_1f1f_1f1f) & ~(folded &+ 0x0505_0505_0505_0505)
    let other = word ^ 0x2020_2020_2020_2020
    let space = ~(((other & 0x7f7f_7f7f_7f7f_7f7f) &+ 0x7f7f_7f7f_7f7f_7f7f) | other)
    return (word | ascii | space) & high
  }

  /// Runs of at least `minimum` bytes of printable text and white space (32: eight short words)
  /// inside binary data, judged like text lines and as records (`recordFindings`). Only 16-byte
  /// blocks (with AVX2) or every `minimum - 7`-th byte are looked at until one is printable; the run
  /// around it is then measured and skipped, so random data costs little more than one load per
  /// 32 bytes. Line breaks belong to the run, so a pretty-printed or one-field-per-line record is
  /// judged whole. SQL schema text (SQLite's own `CREATE TABLE …`) is not a finding.
  static func runFindings(
    _ bytes: UnsafeRawBufferPointer, minimum: Int = 32, vectorised: Bool = PairFilter.available
  ) -> [Hit] {
    guard let base = bytes.baseAddress, bytes.count >= minimum else { return [] }
    let data = base.assumingMemoryBound(to: UInt8.self)
    @inline(__always) func printable(_ byte: UInt8) -> Bool {
      (byte >= 0x20 && byte < 0x7f) || byte == 0x0a || byte == 0x0d || byte == 0x09
    }
    var hits: [Hit] = []
    var scannedUpTo = 0
    /// Measures the run through `position` (a printable byte, past `scannedUpTo`), judges it when
    /// it is `minimum` long or more, and returns its end.
    func measureRun(through position: Int) -> Int {
      var start = position
      while start > scannedUpTo, printable(data[start - 1]) { start -= 1 }
      var end = position + 1
      while end < bytes.count, printable(data[end]) { end += 1 }
      if end - start >= minimum {
        let run = UnsafeRawBufferPointer(start: base + start, count: end - start)
        for hit in judgeRun(run) {
          hits.append(Hit(start: start + hit.start, end: start + hit.end, detector: hit.detector))
        }
      }
      scannedUpTo = end
      return end
    }
    // With AVX2 and `minimum` of 31 or more, 16-byte blocks all printable are looked for 32 bytes at
    // a time, from the start and again from the end of each run measured: every run of `minimum`
    // that ends where that loop stops holds one, and is measured through it, once, whole.
    let filtered = minimum >= 14
    let step = filtered ? minimum - 7 : minimum
    let blocks = vectorised && minimum >= 31
    var position = blocks ? 0 : step - 1
    if blocks {
      position = Self.printableBytes.forEachBlock(in: bytes, from: 0, span: 16, measureRun)
    }
    // From there (and without AVX2, from the start), with `minimum` of 14 or more, every
    // `minimum - 7`-th position is looked at, by the 8 bytes starting there (one test of all 8,
    // without a branch per byte; random data fails it nearly always): a run of `minimum` printable
    // bytes holds the 8 bytes from one of any `minimum - 7` consecutive positions of its first
    // ones. So every run of `minimum` or more is still measured, once, whole; the runs judged are
    // the same. (A run of `minimum` through the AVX2 loop's stopping point whose 8 bytes from there
    // are not all inside it began 16 bytes or more before it, so it holds the last block that loop
    // looked at.)
    while position < bytes.count {
      if filtered, position + 8 <= bytes.count, !allPrintable((base + position).loadUnaligned(as: UInt64.self)) {
        position += step
        continue
      }
      guard printable(data[position]) else {
        position += step
        continue
      }
      // The next run of `minimum` or more starts past the end (not printable), and holds one of these.
      position = measureRun(through: position) + step
    }
    return hits
  }

  /// `runFindings`' printable bytes for the AVX2 block search.
  static let printableBytes = ByteClass { ($0 >= 0x20 && $0 < 0x7f) || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }

  /// Whether all 8 bytes of `word` are printable as `runFindings` counts them (0x20–0x7e, tab,
  /// line feed, carriage return), tested on all 8 at once.
  @inline(__always)
  static func allPrintable(_ word: UInt64) -> Bool {
    let high: UInt64 = 0x8080_8080_8080_8080
    // A byte from 0x80 is never printable (random data: nearly every word stops here).
    guard word & high == 0 else { return false }
    // Per byte (no carry crosses bytes, all sums stay below 0x100): 0x20...0x7e.
    let visible = (word &+ 0x6060_6060_6060_6060) & ~(word &+ 0x0101_0101_0101_0101) & high
    if visible == high { return true }
    // A zero byte of `value` (at most 0x7f each) marks its high bit.
    @inline(__always) func zeros(_ value: UInt64) -> UInt64 { ~((value &+ 0x7f7f_7f7f_7f7f_7f7f) | value) & high }
    let controls =
      zeros(word ^ 0x0909_0909_0909_0909) | zeros(word ^ 0x0a0a_0a0a_0a0a_0a0a) | zeros(word ^ 0x0d0d_0d0d_0d0d_0d0d)
    return visible | controls == high
  }

  /// A run of text found inside binary data, judged line by line and as records; schema text is not.
  private static func judgeRun(_ run: UnsafeRawBufferPointer) -> [Hit] {
    isSchemaText(run) ? [] : findings(run) + recordFindings(run)
  }

  /// Records in a run of text inside binary data that are neither sentences nor `key=value`
  /// pairs, all reported as `key-value-text`: three or more consecutive YAML `key: value` lines,
  /// CSV rows (`RecordSyntax.isDelimitedRow`) and two or more XML leaf elements with text. In a
  /// document these are configuration, tables and markup; where only ciphertext should be, they
  /// are an app's records.
  static func recordFindings(_ run: UnsafeRawBufferPointer) -> [Hit] {
    var hits: [Hit] = []
    var fieldLines = 0
    var fieldsStart = 0
    var lineStart = 0
    // One copy of the run, whose slices are the lines (not an array per line).
    let text = Array(run)
    while lineStart <= run.count {
      var lineEnd = lineStart
      while lineEnd < run.count, run[lineEnd] != 0x0a { lineEnd += 1 }
      var end = lineEnd
      if end > lineStart, run[end - 1] == 0x0d { end -= 1 }
      let line = text[lineStart..<end]
      if RecordSyntax.isColonField(line) {
        if fieldLines == 0 { fieldsStart = lineStart }
        fieldLines += 1
      } else {
        if fieldLines >= 3 { hits.append(Hit(start: fieldsStart, end: lineStart, detector: "key-value-text")) }
        fieldLines = 0
      }
      if line.count >= 16, RecordSyntax.isDelimitedRow(line) {
        hits.append(Hit(start: lineStart, end: end, detector: "key-value-text"))
      }
      lineStart = lineEnd + 1
    }
    if fieldLines >= 3 { hits.append(Hit(start: fieldsStart, end: run.count, detector: "key-value-text")) }
    if hits.isEmpty, RecordSyntax.hasXMLFields(run) {
      hits.append(Hit(start: 0, end: run.count, detector: "key-value-text"))
    }
    return hits
  }

  /// Whether a JSON object is a record wherever it is found (`Scanner.jsonText`): two or more
  /// members, on one line (a JSON-lines log, a payload in a log line), or pretty-printed when it
  /// is the whole text (a request or state dump: `json.dumps(indent=2)`, Foundation's
  /// `.prettyPrinted`) and one flat record (every value a string, number or literal, the closing
  /// brace found). A nested document written over many lines (API documentation, a package
  /// manifest, a configuration tree) and a JSON example inside a document are not records.
  static func isJSONRecord(_ object: RecordSyntax.Object) -> Bool {
    guard object.members >= 2, object.end - object.start >= 16 else { return false }
    return !object.multiLine || (object.flat && object.closed && object.alone)
  }

  /// Structured records inside binary data beyond what `Scanner.jsonText` reports anywhere: JSON
  /// objects of any layout and nesting with two or more members, a closed one-member object with
  /// a substantive value (a string of 8 bytes or more, or a nested value) and closed arrays of two
  /// or more strings, as `json-text`; Python dict reprs (`{'user': 'ana', …}`, two or more
  /// members) as `key-value-text`. `includeJSONRecords` also reports what `jsonText` would (for
  /// text this scanner decoded itself, such as UTF-16).
  static func structuredFindings(
    _ bytes: UnsafeRawBufferPointer, includeJSONRecords: Bool = false, braces: [Int]? = nil, wholeText: Bool = true
  ) -> [Hit] {
    var hits: [Hit] = []
    var objects: [(start: Int, end: Int)] = []
    let parsed = RecordSyntax.objects(bytes, quotes: [0x22, 0x27], braces: braces, wholeText: wholeText)
    for object in parsed where object.quote == 0x22 {
      objects.append((object.start, object.end))
      let record = isJSONRecord(object)
      let substantive = object.closed && (object.longestString >= 8 || !object.flat)
      if record ? includeJSONRecords : object.members >= 2 || substantive {
        hits.append(Hit(start: object.start, end: object.end, detector: "json-text"))
      }
    }
    for array in RecordSyntax.stringArrays(bytes)
    where !objects.contains(where: { $0.start <= array.start && array.end <= $0.end }) {
      hits.append(Hit(start: array.start, end: array.end, detector: "json-text"))
    }
    for object in parsed where object.quote == 0x27 && object.members >= 2 {
      hits.append(Hit(start: object.start, end: object.end, detector: "key-value-text"))
    }
    return hits
  }

  /// Runs of at least `minimum` UTF-16 characters (little or big endian) that are printable ASCII,
  /// white space or Latin-1 letters, inside binary data (Windows and Java heaps, a SQLite database
  /// in UTF-16): transcoded to one byte per character and judged as `runFindings` and
  /// `structuredFindings` judge text. Every (2 × `minimum` - 2)-th byte is looked at until one
  /// could be half of such a character, so random data costs about one check per 62 bytes.
  static func utf16Findings(_ bytes: UnsafeRawBufferPointer, minimum: Int = 32) -> [Hit] {
    guard bytes.count >= 2 * minimum else { return [] }
    @inline(__always) func character(_ at: Int, _ littleEndian: Bool) -> UInt8? {
      guard at >= 0, at + 1 < bytes.count else { return nil }
      let (low, high) = littleEndian ? (bytes[at], bytes[at + 1]) : (bytes[at + 1], bytes[at])
      guard high == 0 else { return nil }
      return (low >= 0x20 && low < 0x7f) || low == 0x0a || low == 0x0d || low == 0x09 || low >= 0xa0 ? low : nil
    }
    var hits: [Hit] = []
    // Any 2 × `minimum` - 1 bytes of such a run hold a byte this lands on and its neighbour.
    let step = 2 * minimum - 2
    var position = minimum
    var scannedUpTo = 0
    while position < bytes.count {
      // A pre-filter: every character tried below has a zero byte at `position - 1`, `position`
      // or `position + 1` (random data: about one sample in 85).
      if position >= 1, position + 1 < bytes.count, bytes[position - 1] != 0, bytes[position] != 0,
        bytes[position + 1] != 0
      {
        position += step
        continue
      }
      // Text in one byte order also reads as text in the other, one byte later and one character
      // short: of the runs through this byte, the one that starts first is the real one.
      var best: (first: Int, end: Int, littleEndian: Bool)?
      for start in [position - 1, position] where start >= scannedUpTo {
        for littleEndian in [true, false] where character(start, littleEndian) != nil {
          var first = start
          while first - 2 >= scannedUpTo, character(first - 2, littleEndian) != nil { first -= 2 }
          var end = start
          while character(end, littleEndian) != nil { end += 2 }
          if best.map({ first < $0.first || (first == $0.first && end > $0.end) }) ?? true {
            best = (first, end, littleEndian)
          }
        }
      }
      guard let run = best, (run.end - run.first) / 2 >= minimum else {
        position += step
        continue
      }
      let text = stride(from: run.first, to: run.end, by: 2).map { character($0, run.littleEndian) ?? 0x20 }
      text.withUnsafeBytes { bytes in
        for hit in judgeRun(bytes) + structuredFindings(bytes, includeJSONRecords: true) {
          hits.append(Hit(start: run.first + 2 * hit.start, end: run.first + 2 * hit.end, detector: hit.detector))
        }
      }
      scannedUpTo = run.end
      position = run.end + step
    }
    return hits
  }

  /// SQL schema text: a run whose first 64 bytes hold "CREATE TABLE ", "CREATE INDEX ",
  /// "CREATE UNIQUE INDEX ", "CREATE VIEW " or "CREATE TRIGGER " (any case), as SQLite's own
  /// schema table does. Whole phrases, so a sentence that merely says "create the …" still counts.
  static func isSchemaText(_ run: UnsafeRawBufferPointer) -> Bool {
    // In place, without a lower-cased copy: every phrase starts with "create ", so the rest of each
    // is compared only where that does (a run of text inside binary data costs a few hundred
    // instructions here, not a few thousand).
    let count = min(64, run.count)
    @inline(__always) func matches(_ text: [UInt8], at start: Int) -> Bool {
      guard start + text.count <= count else { return false }
      for index in text.indices {
        let byte = run[start + index]
        if (byte >= 0x41 && byte <= 0x5a ? byte | 0x20 : byte) != text[index] { return false }
      }
      return true
    }
    guard count >= schemaPrefix.count else { return false }
    for start in 0...(count - schemaPrefix.count) where run[start] | 0x20 == 0x63 && matches(schemaPrefix, at: start) {
      if schemaObjects.contains(where: { matches($0, at: start + schemaPrefix.count) }) { return true }
    }
    return false
  }

  /// The phrases `isSchemaText` looks for: "create " and then one of these.
  private static let schemaPrefix = Array("create ".utf8)
  private static let schemaObjects: [[UInt8]] = ["table ", "index ", "unique index ", "view ", "trigger "].map {
    Array($0.utf8)
  }
}

extension Scanner {
  /// JSON objects that are records (`TextDetectors.isJSONRecord`): compact, pretty-printed or with
  /// `"key" : value` spacing, after a BOM or anything else, with where each starts and ends.
  /// `braces`: `RecordSyntax.quotedBraces(bytes)`, when the caller has it already; `wholeText`:
  /// false when `bytes` is one chunk of a larger file (`RecordSyntax.objects`).
  func jsonText(
    _ bytes: UnsafeRawBufferPointer, braces: [Int]? = nil, wholeText: Bool = true
  ) -> [(start: Int, end: Int)] {
    RecordSyntax.objects(bytes, quotes: [0x22], braces: braces, wholeText: wholeText).filter(
      TextDetectors.isJSONRecord
    ).map { ($0.start, $0.end) }
  }
}
