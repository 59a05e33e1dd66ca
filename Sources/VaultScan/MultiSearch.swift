import Foundation

/// Finds many patterns (each at least 4 bytes) in one pass over a buffer, looking at only every
/// `step`-th position.
///
/// With L the shortest pattern's length, any occurrence covers a position that is a multiple of
/// step = L − 3 somewhere in its first step bytes. So the filter holds, for each pattern, the
/// grams at its offsets 0 ..< step; the scan hashes the bytes at every step-th position into a
/// 65,536-bit filter and verifies hits in full. A 20-byte canary is checked at every 17th byte
/// instead of every byte, whatever the number of encodings searched.
///
/// With more than `fewPatterns` patterns, a gram is 8 bytes for a pattern long enough to hold one
/// at each of those offsets, else 4, with a filter and a table for each width (and step = L − 7
/// when every pattern can). Patterns that share their first
/// four bytes (a canary's encodings agree up to its first character an encoder changes; canaries
/// made of common words share them too) all came up as candidates wherever those four bytes did:
/// 10,000 canaries with spaces, each with its URL-encoded forms, took 131 s on 10 MB of prose with
/// 4-byte grams alone (review); eight bytes tell them apart.
struct MultiSearcher {
  private var filter4 = [UInt64](repeating: 0, count: 1024)
  private var filter8 = [UInt64](repeating: 0, count: 1024)
  // 32-bit entries: 10,000 canaries with all their forms hold millions of them.
  private var grams4: [UInt32: [(pattern: Int32, offset: Int32)]] = [:]
  private var grams8: [UInt64: [(pattern: Int32, offset: Int32)]] = [:]
  let patterns: [[UInt8]]
  let step: Int

  init(_ patterns: [[UInt8]]) {
    self.patterns = patterns.filter { $0.count >= 4 }
    let shortest = self.patterns.map(\.count).min() ?? 4
    // A few canaries' forms (up to 64 patterns) share few grams: 4 bytes each, at the widest step.
    // More take 8 where they can; all of them when the shortest has 12 bytes or more, at a step
    // four bytes shorter, which probes one table where both widths would probe two.
    let manyPatterns = self.patterns.count > Self.fewPatterns
    step = max(1, shortest - (manyPatterns && shortest >= 12 ? 7 : 3))
    for (index, pattern) in self.patterns.enumerated() {
      let wide = manyPatterns && pattern.count >= step + 7
      for offset in 0..<step {
        pattern.withUnsafeBytes { bytes in
          if wide {
            let gram = (bytes.baseAddress! + offset).loadUnaligned(as: UInt64.self)
            let hash = Self.hash(gram)
            filter8[Int(hash >> 6)] |= 1 << (hash & 63)
            grams8[gram, default: []].append((Int32(index), Int32(offset)))
          } else {
            let gram = (bytes.baseAddress! + offset).loadUnaligned(as: UInt32.self)
            let hash = Self.hash(UInt64(gram))
            filter4[Int(hash >> 6)] |= 1 << (hash & 63)
            grams4[gram, default: []].append((Int32(index), Int32(offset)))
          }
        }
      }
    }
  }

  /// Up to this many patterns, every gram is 4 bytes (as fast as 8 for so few, and one table).
  static let fewPatterns = 64

  /// Whether any pattern uses 8-byte grams (the others use 4).
  var usesWideGrams: Bool { !grams8.isEmpty }

  @inline(__always)
  static func hash(_ value: UInt64) -> UInt64 { (value &* 0x9E37_79B9_7F4A_7C15) >> 48 }

  /// Calls `found(offset, patternIndex)` once for every occurrence of every pattern.
  func search(_ buffer: UnsafeRawBufferPointer, _ found: (Int, Int) -> Void) {
    guard buffer.count >= 4, !patterns.isEmpty, let base = buffer.baseAddress else { return }
    let end = buffer.count - 3
    let (narrow, wide) = (!grams4.isEmpty, !grams8.isEmpty)
    @inline(__always) func verify(_ candidates: [(pattern: Int32, offset: Int32)], at position: Int) {
      for (index, offset) in candidates {
        let start = position - Int(offset)
        let pattern = patterns[Int(index)]
        if start >= 0, start + pattern.count <= buffer.count,
          pattern.withUnsafeBytes({ memcmp(base + start, $0.baseAddress!, pattern.count) }) == 0
        {
          found(start, Int(index))
        }
      }
    }
    filter4.withUnsafeBufferPointer { bits4 in
      filter8.withUnsafeBufferPointer { bits8 in
        var position = 0
        // A few canaries' forms have 4-byte grams only: a loop that probes nothing else, four
        // positions an iteration (random data passes the filter at about one position in 300).
        if narrow, !wide {
          @inline(__always) func passes(_ at: Int) -> Bool {
            let hash = Self.hash(UInt64((base + at).loadUnaligned(as: UInt32.self)))
            return bits4[Int(hash >> 6)] & (1 << (hash & 63)) != 0
          }
          @inline(__always) func probe(_ at: Int) {
            if passes(at), let candidates = grams4[(base + at).loadUnaligned(as: UInt32.self)] {
              verify(candidates, at: at)
            }
          }
          while position + 3 * step < end {
            if passes(position) || passes(position + step) || passes(position + 2 * step)
              || passes(position + 3 * step)
            {
              probe(position)
              probe(position + step)
              probe(position + 2 * step)
              probe(position + 3 * step)
            }
            position += 4 * step
          }
          while position < end {
            probe(position)
            position += step
          }
          return
        }
        while position < end {
          if narrow {
            let value = (base + position).loadUnaligned(as: UInt32.self)
            let hash = Self.hash(UInt64(value))
            if bits4[Int(hash >> 6)] & (1 << (hash & 63)) != 0, let candidates = grams4[value] {
              verify(candidates, at: position)
            }
          }
          // A pattern with 8-byte grams that occurs here holds all eight bytes of this position.
          if wide, position + 8 <= buffer.count {
            let value = (base + position).loadUnaligned(as: UInt64.self)
            let hash = Self.hash(value)
            if bits8[Int(hash >> 6)] & (1 << (hash & 63)) != 0, let candidates = grams8[value] {
              verify(candidates, at: position)
            }
          }
          position += step
        }
      }
    }
  }
}
