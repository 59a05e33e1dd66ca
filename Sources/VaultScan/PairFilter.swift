internal import CScanKernels

/// A pre-filter for byte pairs that runs 32 positions at a time with AVX2
/// (`vault_scan_pair_positions_avx2`): it passes every position where one of its pairs starts and
/// some others, so each position it passes is then checked exactly.
///
/// Pairs with the same first byte share one of eight buckets; each group joins the bucket whose
/// nibble sets it widens least (counted in pairs passed), largest groups first. For the stream
/// signatures (46 pairs) about 0.9 % of random positions pass, against 0.07 % that match.
struct PairFilter: Sendable {
  /// Whether this CPU and kernel run AVX2 code (CPUID and XGETBV); without it callers go byte by byte.
  static let available = vault_scan_has_avx2() == 1

  /// 64 bytes: the bucket bits of the first byte's low and high nibble, then of the second byte's.
  let masks: [UInt8]

  /// - Parameter pairs: each pair as `first << 8 | second`.
  init(pairs: [Int]) {
    var groups: [Int: (low: UInt16, high: UInt16)] = [:]
    for pair in pairs {
      groups[pair >> 8, default: (0, 0)].low |= 1 << (pair & 15)
      groups[pair >> 8, default: (0, 0)].high |= 1 << (pair >> 4 & 15)
    }
    /// Each bucket's four nibble sets, 16 bits each.
    var buckets = [[UInt16]](repeating: [0, 0, 0, 0], count: 8)
    func passed(_ sets: [UInt16]) -> Int { sets.reduce(1) { $0 * $1.nonzeroBitCount } }
    func size(_ group: (key: Int, value: (low: UInt16, high: UInt16))) -> Int {
      group.value.low.nonzeroBitCount * group.value.high.nonzeroBitCount
    }
    for (first, second) in groups.sorted(by: { (size($0), $1.key) > (size($1), $0.key) }) {
      let sets: [UInt16] = [1 << (first & 15), 1 << (first >> 4), second.low, second.high]
      let widened = buckets.map { bucket in zip(bucket, sets).map { $0 | $1 } }
      let growth = widened.indices.map { passed(widened[$0]) - passed(buckets[$0]) }
      let best = growth.indices.min { growth[$0] < growth[$1] }!
      buckets[best] = widened[best]
    }
    var masks = [UInt8](repeating: 0, count: 64)
    for (index, bucket) in buckets.enumerated() {
      for (part, set) in bucket.enumerated() {
        for nibble in 0..<16 where set & (1 << nibble) != 0 { masks[part * 16 + nibble] |= 1 << index }
      }
    }
    self.masks = masks
  }

  /// Whether the pair `first`, `second` passes (what the AVX2 loop computes for one position).
  func passes(_ first: UInt8, _ second: UInt8) -> Bool {
    masks[Int(first & 15)] & masks[16 + Int(first >> 4)] & masks[32 + Int(second & 15)] & masks[48 + Int(second >> 4)]
      != 0
  }

  /// Calls `body` with every position from `from` on that passes, in order, 32 at a time while
  /// at least 33 bytes are left. Returns the first position not looked at: the caller checks the
  /// positions from there to the end itself. Only when `available`.
  @inline(__always)
  func forEachCandidate(in bytes: UnsafeRawBufferPointer, from: Int, _ body: (Int) -> Void) -> Int {
    guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), from < bytes.count else {
      return max(from, 0)
    }
    return masks.withUnsafeBufferPointer { masks in
      withUnsafeTemporaryAllocation(of: Int.self, capacity: 512) { positions in
        var offset = max(from, 0)
        while true {
          var found = 0
          let next = vault_scan_pair_positions_avx2(
            base, bytes.count, offset, masks.baseAddress, positions.baseAddress, positions.count, &found)
          for index in 0..<found { body(positions[index]) }
          // Stopped short of the end only when `positions` was nearly full.
          guard next > offset, found > positions.count - 32 else { return next }
          offset = next
        }
      }
    }
  }
}

/// A set of byte values as the AVX2 block search takes it (`vault_scan_find_class_block_avx2`):
/// a byte belongs when the entries its low and its high nibble select share a bit. High nibbles
/// whose bytes take the same low nibbles share one bit, so any set whose high nibbles fall into at
/// most eight such groups is held exactly.
struct ByteClass: Sendable {
  /// 32 bytes: the bits of each low nibble, then of each high nibble.
  let table: [UInt8]

  init(_ member: (UInt8) -> Bool) {
    var groups: [UInt16: Int] = [:]
    var table = [UInt8](repeating: 0, count: 32)
    for high in 0..<16 {
      let lows = (0..<16).reduce(UInt16(0)) { member(UInt8(high << 4 | $1)) ? $0 | 1 << $1 : $0 }
      guard lows != 0 else { continue }
      let bit = groups[lows] ?? groups.count
      precondition(bit < 8, "a byte class needs at most eight groups of high nibbles")
      groups[lows] = bit
      table[16 + high] |= 1 << bit
      for low in 0..<16 where lows & (1 << low) != 0 { table[low] |= 1 << bit }
    }
    self.table = table
  }

  /// Whether `byte` belongs (what the AVX2 loop computes for one byte).
  func contains(_ byte: UInt8) -> Bool { table[Int(byte & 15)] & table[16 + Int(byte >> 4)] != 0 }

  /// Calls `body` with each block `[b, b + span)` whose bytes all belong, for `b` = `from`,
  /// `from + 16`, ... (`span` 16 or 32), then looks on from the position `body` returns (past `b`),
  /// until fewer than 32 bytes are left; returns the first position not looked at (the caller looks
  /// at the rest itself). Any run of `span + 15` or more such bytes from where a search starts
  /// holds such a block. Only when `PairFilter.available`.
  @inline(__always)
  func forEachBlock(in bytes: UnsafeRawBufferPointer, from: Int, span: Int, _ body: (Int) -> Int) -> Int {
    guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return max(from, 0) }
    return table.withUnsafeBufferPointer { table in
      var position = max(from, 0)
      while position < bytes.count {
        var found: Int32 = 0
        let block = vault_scan_find_class_block_avx2(
          base, bytes.count, position, table.baseAddress, span == 32 ? 1 : 0, &found)
        guard found != 0 else { return block }
        position = max(body(block), block + 1)
      }
      return position
    }
  }
}

/// A byte value followed, `distance` bytes on, by a byte of a class: the AVX2 search
/// `vault_scan_find_byte_then_class_avx2` (random data: about one position in 65,536 for one
/// byte followed by another).
struct SpacedPair: Sendable {
  let first: UInt8
  let distance: Int
  let second: ByteClass

  /// Calls `body` with each position from `from` on where the pair occurs, in order, then looks on
  /// from the position `body` returns (past the one it was given), until fewer than `distance + 32`
  /// bytes are left; returns the first position not looked at (the caller looks at the rest
  /// itself). Only when `PairFilter.available`.
  @inline(__always)
  func forEachMatch(in bytes: UnsafeRawBufferPointer, from: Int, _ body: (Int) -> Int) -> Int {
    guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return max(from, 0) }
    return second.table.withUnsafeBufferPointer { table in
      var next = max(from, 0)
      var block = next
      while block < bytes.count {
        var mask: UInt32 = 0
        let at = vault_scan_find_byte_then_class_avx2(
          base, bytes.count, block, first, distance, table.baseAddress, &mask)
        guard mask != 0 else { return max(at, next) }
        while mask != 0 {
          let position = at + mask.trailingZeroBitCount
          mask &= mask - 1
          if position >= next { next = max(body(position), position + 1) }
        }
        block = max(at + 32, next)
      }
      return max(block, next)
    }
  }
}
