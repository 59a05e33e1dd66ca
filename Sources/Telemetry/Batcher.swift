import Foundation
import VaultCrypto

/// A batch ready to send: the gzip body and the ids it carries.
public struct TelemetryBatch: Sendable, Equatable {
  /// The ids of the events in the body, in order: the records to settle by the answer.
  public let ids: [UUID]
  /// gzip of `{"events":[…]}`.
  public let body: [UInt8]

  /// SHA-256 over the sorted, newline-joined lowercase ids, as hex: the same for every retry of the
  /// same set of events, different for any other set.
  public var idempotencyKey: String {
    let joined = ids.map(\.lowercased).sorted().joined(separator: "\n")
    let digest = (try? SHA256.hash(Array(joined.utf8))) ?? []
    return digest.map { String(format: "%02x", $0) }.joined()
  }
}

/// Packs events into gzip batches whose compressed body is at most `limit` bytes, judged against
/// the compressed size while packing (not split afterwards).
public enum BatchPacker {
  static let prefix = Array(#"{"events":["#.utf8)
  static let suffix = Array("]}".utf8)
  /// Room kept for the closing bytes, the final deflate block and the 8-byte gzip trailer.
  static let closingAllowance = 64

  /// Takes events (id and JSON) in order and returns the first batch that fits, plus the events it
  /// could not take: `oversized` (one alone exceeds the limit compressed) and `rest` (for the next batch).
  ///
  /// - Parameters:
  ///   - events: the events' ids and JSON texts, in the order they should be sent.
  ///   - limit: the largest compressed body, in bytes.
  /// - Returns: the batch (nil when no event fits even alone), the ids of the events that never
  ///   fit, and the events after the batch.
  /// - Throws: `GzipError` when zlib fails.
  public static func pack(_ events: [(id: UUID, json: [UInt8])], limit: Int) throws
    -> (batch: TelemetryBatch?, oversized: [UUID], rest: [(id: UUID, json: [UInt8])])
  {
    var oversized: [UUID] = []
    var queue = events[...]
    while let first = queue.first {
      // Stream events into one deflate stream, flushing after each so the compressed size is exact.
      let stream = try GzipStream()
      try stream.append(prefix)
      var taken: [(id: UUID, json: [UInt8])] = []
      for event in queue {
        try stream.append((taken.isEmpty ? [] : Array(",".utf8)) + event.json)
        if stream.compressedCount + closingAllowance > limit { break }
        taken.append(event)
      }
      if taken.isEmpty {
        // Even alone the first event does not fit: it can never be sent.
        oversized.append(first.id)
        queue = queue.dropFirst()
        continue
      }
      // Compress exactly the taken events in one pass; that is never larger than the flushed
      // stream, but check anyway and give back events until it fits.
      while !taken.isEmpty {
        var json = prefix
        for (index, event) in taken.enumerated() {
          if index > 0 { json += Array(",".utf8) }
          json += event.json
        }
        json += suffix
        let body = try gzip(json)
        if body.count <= limit {
          return (
            TelemetryBatch(ids: taken.map(\.id), body: body), oversized, Array(queue.dropFirst(taken.count))
          )
        }
        taken.removeLast()
      }
      oversized.append(first.id)
      queue = queue.dropFirst()
    }
    return (nil, oversized, [])
  }
}
