import Foundation

// The time formats vault writes, in one place: the manifest keeps ISO 8601 UTC to the second;
// every JSON output, `queue list` and telemetry events use ISO 8601 UTC with milliseconds.

/// ISO 8601 in UTC with seconds, as the manifest keeps times.
package func timestamp(_ date: Date) -> String { formatter(fractional: false).string(from: date) }

/// ISO 8601 in UTC with milliseconds (`2026-12-01T14:58:46.000Z`), as every `--json` output,
/// `queue list` and telemetry events write times.
package func millisecondTimestamp(_ date: Date) -> String {
  civilMillisecondTimestamp(date) ?? formatter(fractional: true).string(from: date)
}

/// `millisecondTimestamp` for the years 1970 to 9999, computed instead of formatted: the
/// formatter cost about 25,000 instructions per telemetry event (callgrind), this a few hundred.
/// The same text as the formatter's, rounding included: Foundation rounds the time to the nearest
/// millisecond, from the seconds since 2001 it keeps, as below (400,000 random and half-millisecond
/// times compared equal). Nil outside those years, where the formatter is used.
private func civilMillisecondTimestamp(_ date: Date) -> String? {
  let rounded =
    ((date.timeIntervalSinceReferenceDate + Date.timeIntervalBetween1970AndReferenceDate) * 1000 + 0.5)
    .rounded(.down)
  // 253,402,300,800,000 ms after 1970 is 10000-01-01T00:00:00Z.
  guard rounded >= 0, rounded < 253_402_300_800_000 else { return nil }
  let milliseconds = Int64(rounded)
  let seconds = Int(milliseconds / 1000)
  let (year, month, day) = civilDate(daysSince1970: seconds / 86_400)
  let time = seconds % 86_400
  return String(unsafeUninitializedCapacity: 24) { out in
    var index = 0
    func put(_ value: Int, digits: Int, then separator: UInt8) {
      var remaining = value
      for position in stride(from: index + digits - 1, through: index, by: -1) {
        out[position] = UInt8(ascii: "0") + UInt8(remaining % 10)
        remaining /= 10
      }
      out[index + digits] = separator
      index += digits + 1
    }
    put(year, digits: 4, then: UInt8(ascii: "-"))
    put(month, digits: 2, then: UInt8(ascii: "-"))
    put(day, digits: 2, then: UInt8(ascii: "T"))
    put(time / 3600, digits: 2, then: UInt8(ascii: ":"))
    put(time / 60 % 60, digits: 2, then: UInt8(ascii: ":"))
    put(time % 60, digits: 2, then: UInt8(ascii: "."))
    put(Int(milliseconds % 1000), digits: 3, then: UInt8(ascii: "Z"))
    return index
  }
}

/// The proleptic Gregorian date `days` after 1970-01-01 (not before it): the usual conversion
/// through 400-year eras of 146,097 days, each counted from 1 March so that leap days fall last.
private func civilDate(daysSince1970 days: Int) -> (year: Int, month: Int, day: Int) {
  let shifted = days + 719_468  // days from 0000-03-01 to 1970-01-01
  let era = shifted / 146_097
  let dayOfEra = shifted - era * 146_097
  let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
  let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
  let monthFromMarch = (5 * dayOfYear + 2) / 153
  let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
  let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
  return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
}

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
