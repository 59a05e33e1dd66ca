import Foundation
import Vault

extension QueueContainer: SealedContainer {
  public var name: String { path }

  public func raiseMinimumSealVersion(to version: UInt32) throws {
    try withStorage { storage in try storage.transaction { try storage.setMinimumSealVersion(version) } }
  }

  /// Re-seals every record under a version older than `version` (pending, in flight, parked and in
  /// review alike) in transactions of `configuration.resealBatch` records, then checkpoints the WAL.
  /// A record that does not open is left as it is (its version then cannot be retired).
  /// Idempotent: a record already at `version` is never touched, so a crash and a rerun finish the job.
  public func reseal(with vault: Vault, to version: UInt32) throws -> Int {
    try withStorage { storage in
      var resealed = 0
      var after: Int64 = 0
      while true {
        let (batch, last) = try storage.transaction { () -> (Int, Int64?) in
          var rows: [(seq: Int64, id: String, queue: String, envelope: [UInt8])] = []
          try storage.olderThanVersion.query([
            .integer(Int64(version)), .integer(after), .integer(Int64(configuration.resealBatch)),
          ]) { rows.append(($0.int(0), $0.text(1) ?? "", $0.text(2) ?? "", $0.blob(3))) }
          var count = 0
          for row in rows {
            let context = Self.context(queue: row.queue, id: row.id)
            guard let payload = try? vault.open(row.envelope, context: context) else { continue }
            let envelope = try vault.seal(payload, context: context)
            let sealedVersion = try Envelope.header(of: envelope).version
            try envelope.withUnsafeBytes { bytes in
              count += try storage.replaceEnvelope.run([
                .blob(bytes), .integer(Int64(sealedVersion)), .integer(Int64(envelope.count)), .integer(row.seq),
                .integer(Int64(version)),
              ])
            }
          }
          return (count, rows.last?.seq)
        }
        resealed += batch
        guard let last else { break }
        after = last
      }
      storage.checkpoint()
      return resealed
    }
  }

  public func recordCounts() throws -> [UInt32: Int] {
    try withStorage { storage in
      var counts: [UInt32: Int] = [:]
      try storage.countByVersion.query { counts[UInt32($0.int(0))] = Int($0.int(1)) }
      return counts
    }
  }
}
