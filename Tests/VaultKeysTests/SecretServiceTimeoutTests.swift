import Foundation
import VaultTestSupport
import XCTest

@testable import VaultKeys

/// A timeout that cannot be a deadline (infinite, NaN, huge, negative) is clamped, never trapped
/// on: each operation turns it into a Dispatch time and a D-Bus timeout in milliseconds (Int32).
final class SecretServiceTimeoutTests: XCTestCase {
  override func setUpWithError() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
  }

  func testTimeoutsThatCannotBeADeadlineAreClampedNotTrappedOn() {
    let cases: [(Double, Double)] = [
      (.infinity, 86_400), (1e300, 86_400), (3e6, 86_400), (.nan, 5), (-1, 0), (-.infinity, 0),
    ]
    for (given, expected) in cases {
      let store = SecretServiceStore(timeout: given)
      XCTAssertEqual(store.timeout, expected, "\(given)")
      // Reaches the provider lookup, which turns the timeout into Int32 milliseconds.
      let probe = store.probe()
      if expected > 0 { XCTAssertEqual(probe, .available, "\(given)") }
    }
  }
}
