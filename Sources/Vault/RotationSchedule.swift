import Foundation
import VaultKeys

/// Whether the active key version is older than a rotation policy allows: what
/// `vault rotate --if-due` decides by (a systemd timer runs it daily; it rotates when due).
public struct RotationSchedule: Codable, Sendable, Equatable {
  /// The active version: the one a rotation would replace.
  public var activeVersion: UInt32
  /// When the active version was created (ISO 8601 UTC, as the manifest records it); empty when
  /// the manifest has no record of it.
  public var activeSince: String
  /// Its age in days; nil when the manifest's time cannot be read (then it counts as due).
  public var ageDays: Double?
  /// The policy judged against: the age in days at which a version is due.
  public var maxAgeDays: Double
  /// Whether a rotation began and did not finish (stopped or killed before its re-sealing and
  /// retiring were done): the old key may still be live, so the rotation is due now, and running
  /// it resumes that rotation.
  public var unfinished: Bool
  /// Whether to rotate now: the age has reached `maxAgeDays` or is unknown, or a rotation is
  /// unfinished.
  public var due: Bool

  /// The policy's default: a version is rotated once it is 90 days old.
  public static let defaultMaxAgeDays = 90.0

  enum CodingKeys: String, CodingKey {
    case due, unfinished
    case activeVersion = "active_version"
    case activeSince = "active_since"
    case ageDays = "age_days"
    case maxAgeDays = "max_age_days"
  }

  /// Encodes every key; `active_since` as ISO 8601 UTC with milliseconds, and null (never omitted,
  /// never an empty string) when the manifest does not give it, like an unknown `age_days`.
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: the encoder's errors.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(activeVersion, forKey: .activeVersion)
    try container.encode(activeSince.isEmpty ? nil : jsonTimestamp(activeSince), forKey: .activeSince)
    try container.encode(ageDays, forKey: .ageDays)
    try container.encode(maxAgeDays, forKey: .maxAgeDays)
    try container.encode(unfinished, forKey: .unfinished)
    try container.encode(due, forKey: .due)
  }

  /// Judges `manifest`'s active version at `now` against `maxAgeDays` (0: always due).
  ///
  /// - Parameters:
  ///   - manifest: the manifest whose active version is judged.
  ///   - maxAgeDays: the policy, in days.
  ///   - now: the time the age is measured at.
  public init(manifest: Manifest, maxAgeDays: Double, now: Date) {
    let active = manifest.versions.first { $0.version == manifest.activeVersion }
    activeVersion = manifest.activeVersion
    activeSince = active?.createdAt ?? ""
    self.maxAgeDays = maxAgeDays
    ageDays = Self.ageDays(of: activeSince, now: now)
    unfinished = manifest.resealing != nil
    due = unfinished || (ageDays.map { $0 >= maxAgeDays } ?? true)
  }

  /// The age in days of a version created at `timestamp` (nil when it is not a manifest time).
  ///
  /// - Parameters:
  ///   - timestamp: an ISO 8601 time with a zone, with or without fractional seconds.
  ///   - now: the time the age is measured at.
  /// - Returns: whole and fractional days, never negative (a time in the future is age 0); nil
  ///   when `timestamp` cannot be read.
  public static func ageDays(of timestamp: String, now: Date) -> Double? {
    parseTimestamp(timestamp).map { max(0, now.timeIntervalSince($0) / 86_400) }
  }
}

extension Vault {
  /// Whether this vault's active version is due for rotation under a policy of `maxAgeDays`,
  /// judged on the manifest as this process last read it, at the vault's clock's now.
  ///
  /// - Parameter maxAgeDays: the policy, in days (0: always due).
  /// - Returns: the schedule; `due` says whether to rotate.
  public func rotationSchedule(maxAgeDays: Double = RotationSchedule.defaultMaxAgeDays) -> RotationSchedule {
    RotationSchedule(manifest: manifest, maxAgeDays: maxAgeDays, now: clock())
  }
}
