import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// Configuration values that would lose records are refused when a container is opened for
/// writing, naming the value: an outside review found `maximumAge: 0` (or negative, or under a
/// millisecond) dropped every record as soon as it was stored while each enqueue said `.stored`,
/// and a `byteCap` below the envelope of an empty record (89 bytes) was accepted at open and
/// refused every enqueue as a record too large.
final class ConfigurationCheckTests: XCTestCase {
  func testAByteCapOrMaximumAgeThatKeepsNothingIsRefusedAtOpen() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let refused: [(QueueConfiguration, String)] =
      [0, -1, Int.min, 1, 88].map { (QueueConfiguration(byteCap: $0), "byteCap") }
      + [0, -5, -.infinity, 0.000_4].map { (QueueConfiguration(maximumAge: $0), "maximumAge") }
    for (index, (configuration, parameter)) in refused.enumerated() {
      let path = temporary.sub("refused-\(index).sqlite")
      XCTAssertThrowsError(try QueueContainer(path: path, vault: vault, configuration: configuration)) { error in
        guard case QueueError.invalidConfiguration(let named, _) = error else {
          return XCTFail("\(parameter): \(error)")
        }
        XCTAssertEqual(named, parameter)
        XCTAssertEqual((error as? QueueError)?.code, "queue.invalid-configuration")
        XCTAssertTrue("\(error)".contains(parameter), "\(error)")
      }
      XCTAssertFalse(FileManager.default.fileExists(atPath: path), "\(parameter): nothing was made")
    }
    // A container that exists is refused too, and left as it was; a reader may still open it.
    let path = temporary.sub("kept.sqlite")
    let kept = try QueueContainer(path: path, vault: vault)
    try kept.enqueue(Array("kept".utf8), queue: "q")
    XCTAssertThrowsError(try QueueContainer(path: path, vault: vault, configuration: QueueConfiguration(maximumAge: 0)))
    let reader = try QueueContainer(
      path: path, vault: vault, configuration: QueueConfiguration(maximumAge: 0), mode: .readOnly)
    XCTAssertEqual(try reader.stats().total, 1)
    // NaN is no limit, as documented; the envelope of an empty record, and an age of 1 ms, are
    // what was asked for.
    for configuration in [QueueConfiguration(maximumAge: .nan), QueueConfiguration(byteCap: 89, maximumAge: 0.001)] {
      XCTAssertNoThrow(try QueueContainer(path: path, vault: vault, configuration: configuration))
    }
    XCTAssertEqual(try kept.stats().total, 1)
  }
}
