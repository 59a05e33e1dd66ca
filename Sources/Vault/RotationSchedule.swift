import Foundation
import VaultKeys

/// Whether the active key version is older than a rotation policy allows: what
/// `vault rotate --if-due` decides by (a systemd timer runs it daily; it rotates when due).
public struct RotationSchedule: Codable, Sendable, Equatable {
  /// The active version, and when it was created (ISO 8601 UTC, as the manifest records it).
  public var activeVersion: UInt32
  public var activeSince: String
  /// Its age in days; nil when the manifest's time cannot be read (then it counts as due).
  public var ageDays: Double?
  public var maxAgeDays: Double
  public var due: Bool

  /// The policy's default: a version is rotated once it is 90 days old.
  public static let defaultMaxAgeDays = 90.0

  enum CodingKeys: String, CodingKey {
    case due
    case activeVersion = "active_version"
    case activeSince = "active_since"
    case ageDays = "age_days"
    case maxAgeDays = "max_age_days"
  }

  /// Judges `manifest`'s active version at `now` against `maxAgeDays` (0: always due).
  public init(manifest: Manifest, maxAgeDays: Double, now: Date) {
    let active = manifest.versions.first { $0.version == manifest.activeVersion }
    activeVersion = manifest.activeVersion
    activeSince = active?.createdAt ?? ""
    self.maxAgeDays = maxAgeDays
    ageDays = Self.ageDays(of: activeSince, now: now)
    due = ageDays.map { $0 >= maxAgeDays } ?? true
  }

  /// The age in days of a version created at `timestamp` (nil when it is not a manifest time).
  public static func ageDays(of timestamp: String, now: Date) -> Double? {
    date(timestamp).map { max(0, now.timeIntervalSince($0) / 86_400) }
  }

  private static func date(_ text: String) -> Date? {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    if let date = formatter.date(from: text) { return date }
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return formatter.date(from: text)
  }
}

extension Vault {
  /// Whether this vault's active version is due for rotation under a policy of `maxAgeDays`.
  public func rotationSchedule(maxAgeDays: Double = RotationSchedule.defaultMaxAgeDays) -> RotationSchedule {
    RotationSchedule(manifest: manifest, maxAgeDays: maxAgeDays, now: clock())
  }
}
