import Foundation
import XCTest

@testable import Vault

/// `millisecondTimestamp` computes the years 1970 to 9999 itself; its text must be the formatter's
/// exactly (JSON output, `queue list` and telemetry events kept the formatter's until then).
final class TimestampTests: XCTestCase {
  private let formatter: ISO8601DateFormatter = {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    formatter.timeZone = TimeZone(identifier: "UTC")
    return formatter
  }()

  func testComputedTimestampsAreTheFormattersText() {
    // Half milliseconds, 2000-02-29, the last millisecond of 9999 and one that rounds into 10000
    // (the formatter's), times before 1970 (the formatter's), far future.
    var times: [Double] = [
      0, 0.0004, 0.0005, 0.0009999, 0.9995, 1.9999, 951_782_400, 4_107_542_399.9996,
      253_402_300_799.999, 253_402_300_799.9996, 253_402_300_800, -0.0004, -0.5, -1, -62_135_596_800, 1e12,
    ]
    for _ in 0..<20_000 {
      times.append(Double.random(in: 0..<4.2e9))
      times.append(Double(Int64.random(in: 0..<4_200_000_000_000)) / 1000 + 0.0005)
      times.append(Double(Int64.random(in: 0..<253_402_300_800_000)) / 1000)
    }
    for time in times {
      let date = Date(timeIntervalSince1970: time)
      XCTAssertEqual(millisecondTimestamp(date), formatter.string(from: date), "at \(time)")
    }
    XCTAssertEqual(millisecondTimestamp(Date(timeIntervalSince1970: 951_782_400.25)), "2000-02-29T00:00:00.250Z")
  }
}
