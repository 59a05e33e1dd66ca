import Foundation
import VaultCrypto
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

/// Two threads of one process reloading the manifest at once: the one that read the older file
/// must not install it over the newer one the other installed. The active version would go back,
/// and a queue writer that trusts it would store a record under a version a rotation has retired.
final class ManifestReloadRaceTests: XCTestCase {
  func testAReloadThatReadAnOlderManifestNeverInstallsItOverANewerOne() throws {
    let temporary = TemporaryDirectory()
    let shared = InMemoryKeyStore()
    let armed = LockedValue(false)
    let (paused, resume, finished) = (
      DispatchSemaphore(value: 0), DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)
    )
    // The slow reload stops where it looks for the key store's copy of the manifest, until the test
    // lets it go; it then finds none, so it keeps the file it read (older by then).
    let slow = InterposedKeyStore(shared) { call in
      guard call == .loadRecord(.manifestMirror),
        armed.withLock({ armed in
          defer { armed = false }
          return armed
        })
      else { return .forward }
      paused.signal()
      resume.wait()
      return .absent
    }
    let home = temporary.sub("home")
    let rotator = try Vault.create(home: home, store: StoreDescriptor(kind: .memory), resolver: .fixed(shared))
    let reader = try Vault.open(home: home, resolver: .fixed(slow))
    let before = reader.activeVersion
    armed.withLock { $0 = true }
    let failure = LockedValue<String?>(nil)
    Thread {
      do { try reader.reload() } catch { failure.withLock { $0 = "\(error)" } }
      finished.signal()
    }.start()
    XCTAssertEqual(paused.wait(timeout: .now() + 60), .success, "the slow reload reached the key store")
    try rotator.rotate()
    // Another thread of the reader's process reads and installs the rotated manifest meanwhile.
    try reader.reload()
    let after = reader.activeVersion
    XCTAssertGreaterThan(after, before)
    resume.signal()
    XCTAssertEqual(finished.wait(timeout: .now() + 60), .success)
    XCTAssertNil(failure.withLock { $0 })
    XCTAssertEqual(reader.activeVersion, after, "the active version never goes back")
    XCTAssertEqual(reader.manifest, rotator.manifest)
  }
}
