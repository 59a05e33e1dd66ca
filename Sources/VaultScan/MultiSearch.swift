import Foundation

/// Finds many patterns (each at least 4 bytes) in one pass over a buffer, looking at only every
/// `step`-th position.
///
/// With L the shortest pattern's length, any occurrence covers a position that is a multiple of
/// step = L − 3 somewhere in its first step bytes. So the filter holds, for each pattern, the
/// 4-byte grams at its offsets 0 ..< step; the scan hashes the 4 bytes at every step-th position
/// into a 65,536-bit filter and verifies hits in full. A 20-byte canary is checked at every 17th
/// byte instead of every byte, whatever the number of encodings searched.
struct MultiSearcher {
  private var filter = [UInt64](repeating: 0, count: 1024)
  private var grams: [UInt32: [(pattern: Int, offset: Int)]] = [:]
  let patterns: [[UInt8]]
  let step: Int

  init(_ patterns: [[UInt8]]) {
    self.patterns = patterns.filter { $0.count >= 4 }
    step = max(1, (self.patterns.map(\.count).min() ?? 4) - 3)
    for (index, pattern) in self.patterns.enumerated() {
      for offset in 0..<step {
        let gram = pattern.withUnsafeBytes { ($0.baseAddress! + offset).loadUnaligned(as: UInt32.self) }
        let hash = Self.hash(gram)
        filter[Int(hash >> 6)] |= 1 << (hash & 63)
        grams[gram, default: []].append((index, offset))
      }
    }
  }

  @inline(__always)
  static func hash(_ value: UInt32) -> UInt32 { (value &* 0x9E37_79B1) >> 16 }

  /// Calls `found(offset, patternIndex)` once for every occurrence of every pattern.
  func search(_ buffer: UnsafeRawBufferPointer, _ found: (Int, Int) -> Void) {
    guard buffer.count >= 4, !grams.isEmpty, let base = buffer.baseAddress else { return }
    let end = buffer.count - 3
    filter.withUnsafeBufferPointer { bits in
      var position = 0
      while position < end {
        let value = (base + position).loadUnaligned(as: UInt32.self)
        let hash = Self.hash(value)
        if bits[Int(hash >> 6)] & (1 << (hash & 63)) != 0, let candidates = grams[value] {
          for (index, offset) in candidates {
            let start = position - offset
            let pattern = patterns[index]
            if start >= 0, start + pattern.count <= buffer.count,
              pattern.withUnsafeBytes({ memcmp(base + start, $0.baseAddress!, pattern.count) }) == 0
            {
              found(start, index)
            }
          }
        }
        position += step
      }
    }
  }
}
