import Foundation
import VaultTestSupport
import XCTest

@testable import VaultKeys

/// A timeout that cannot be a deadline (infinite, NaN, huge, negative) is clamped, never trapped
/// on: each operation turns it into a Dispatch time and a D-Bus timeout in milliseconds (Int32).
/// A daemon that did not answer is not asked again at once.
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

  /// A rotation that met a stopped daemon made up to five more calls (best-effort steps, clean-up),
  /// each waiting the whole timeout: 5 s at timeout 1, 25 s at the default. A call made within the
  /// timeout of one that went unanswered fails at once, from any store of the process, and says
  /// it was not asked; once that time has passed the daemon is asked again.
  func testACallJustAfterATimeoutFailsAtOnceAndTheDaemonIsAskedAgainLater() throws {
    let keyring = try KeyringID.random()
    let store = SecretServiceStore(timeout: 1)
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [])
    try TestKeyring.signalDaemon("STOP")
    var stopped = true
    defer { if stopped { XCTAssertNoThrow(try TestKeyring.signalDaemon("CONT")) } }

    var started = Date()
    XCTAssertThrowsError(try store.storedVersions(keyring: keyring)) { error in
      guard case KeyStoreError.timedOut(1, _) = error else { return XCTFail("\(error)") }
    }
    XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.9, "the first call waited its deadline")
    started = Date()
    for call in [
      { _ = try store.loadKey(keyring: keyring, version: 1) },
      { _ = try SecretServiceStore(timeout: 5).loadRecord(.integrityKey, keyring: keyring) },
    ] {
      XCTAssertThrowsError(try call()) { error in
        guard case KeyStoreError.timedOut(1, let operation) = error else { return XCTFail("\(error)") }
        XCTAssertTrue(operation.hasSuffix(" not asked: list keys went unanswered moments before"), operation)
        XCTAssertTrue(
          (error as? KeyStoreError)?.description.contains("the keyring daemon may be hung: restart it") == true)
      }
    }
    XCTAssertLessThan(Date().timeIntervalSince(started), 0.9, "neither call waited for the stopped daemon")

    try TestKeyring.signalDaemon("CONT")
    stopped = false
    Thread.sleep(forTimeInterval: 1.2)
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [], "asked again once the timeout has passed")
  }
}
