import Foundation

// The time formats vault writes, in one place: the manifest keeps ISO 8601 UTC to the second;
// every JSON output, `queue list` and telemetry events use ISO 8601 UTC with milliseconds.

/// ISO 8601 in UTC with seconds, as the manifest keeps times.
package func timestamp(_ date: Date) -> String { formatter(fractional: false).string(from: date) }

/// ISO 8601 in UTC with milliseconds (`2026-12-01T14:58:46.000Z`), as every `--json` output,
/// `queue list` and telemetry events write times.
package func millisecondTimestamp(_ date: Date) -> String { formatter(fractional: true).string(from: date) }

/// A time written as ISO 8601, with or without fractional seconds (manifest times have none, JSON
/// times have milliseconds); nil for anything else.
package func parseTimestamp(_ text: String) -> Date? {
  formatter(fractional: false).date(from: text) ?? formatter(fractional: true).date(from: text)
}

/// A time written with milliseconds, as `millisecondTimestamp` writes it; nil for anything else.
package func parseMillisecondTimestamp(_ text: String) -> Date? { formatter(fractional: true).date(from: text) }

/// A manifest time as JSON output writes times (milliseconds). The manifest keeps its own form;
/// only the JSON shown changes. A text that is not an ISO 8601 time is returned unchanged.
package func jsonTimestamp(_ manifestTime: String) -> String {
  parseTimestamp(manifestTime).map(millisecondTimestamp) ?? manifestTime
}

/// One formatter per thread and form: making one per call was most of `queue list`'s time on
/// 100,000 records, and a formatter is not safe to share between threads.
private func formatter(fractional: Bool) -> ISO8601DateFormatter {
  let key = fractional ? "vault.timestamp.milliseconds" : "vault.timestamp.seconds"
  let cache = Thread.current.threadDictionary
  if let formatter = cache[key] as? ISO8601DateFormatter { return formatter }
  let formatter = ISO8601DateFormatter()
  formatter.formatOptions = fractional ? [.withInternetDateTime, .withFractionalSeconds] : [.withInternetDateTime]
  formatter.timeZone = TimeZone(identifier: "UTC")
  cache[key] = formatter
  return formatter
}
