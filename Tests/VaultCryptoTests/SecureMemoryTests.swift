import Foundation
import VaultTestSupport
import XCTest

@testable import VaultCrypto

/// Key buffers are kept out of core dumps and, where RLIMIT_MEMLOCK allows, out of swap
/// (issue 8, item 14), as the kernel itself reports in /proc/self/smaps.
final class SecureMemoryTests: XCTestCase {
  private func flags(_ bytes: SecureBytes) -> MappingFlags? {
    bytes.withUnsafeBytes { MemoryMappings.flags(of: UnsafeRawPointer($0.baseAddress!)) }
  }

  func testKeyBytesAreExcludedFromCoreDumpsAndLockedInMemory() throws {
    let key = try SymmetricKey.generate()
    let flags = try XCTUnwrap(flags(key.storage), "the key lives in a mapping of this process")
    XCTAssertTrue(flags.dontDump, "VmFlags has dd (MADV_DONTDUMP)")
    // AddressSanitizer and ThreadSanitizer make mlock a no-op that succeeds: nothing is locked.
    try XCTSkipIf(Sanitizer.current != nil, "sanitizers make mlock a no-op")
    // This test runs with CAP_IPC_LOCK or an RLIMIT_MEMLOCK of several pages (Debian's default is
    // 8 MiB); the fallback without either is tested end to end (ResourceLimitTests).
    XCTAssertTrue(flags.locked, "VmFlags has lo and Locked: is non-zero (mlock)")
  }

  func testSmallBuffersSharePagesAndLargeOnesAreMarkedToo() throws {
    let keys = try (0..<100).map { _ in try SymmetricKey.generate() }
    let pages = Set(keys.map { key in key.withUnsafeBytes { UInt(bitPattern: $0.baseAddress!) / 4096 } })
    XCTAssertLessThanOrEqual(pages.count, 4, "100 keys do not take a page each")
    for page in pages {
      XCTAssertEqual(MemoryMappings.flags(of: UnsafeRawPointer(bitPattern: page * 4096)!)?.dontDump, true)
    }

    let large = SecureBytes(count: 3 * 4096 + 5) { $0.initializeMemory(as: UInt8.self, repeating: 0x5a) }
    let last = large.withUnsafeBytes { MemoryMappings.flags(of: UnsafeRawPointer($0.baseAddress! + $0.count - 1)) }
    XCTAssertEqual(flags(large)?.dontDump, true)
    XCTAssertEqual(last?.dontDump, true, "every page of a large buffer")
    XCTAssertTrue(large.withUnsafeBytes { $0.allSatisfy { $0 == 0x5a } })
  }

  func testReleasedSlotsAreZeroedAndReused() throws {
    var address: UInt = 0
    do {
      let bytes = SecureBytes(count: 32) { $0.initializeMemory(as: UInt8.self, repeating: 0xa5) }
      address = bytes.withUnsafeBytes { UInt(bitPattern: $0.baseAddress!) }
    }
    // The next buffer of the same size takes the slot just freed, and starts zeroed.
    let next = SecureBytes(count: 32) { _ in }
    XCTAssertEqual(next.withUnsafeBytes { UInt(bitPattern: $0.baseAddress!) }, address)
    XCTAssertTrue(next.withUnsafeBytes { $0.allSatisfy { $0 == 0 } })
  }

  /// An initializer that throws gives its memory back once: it used to be released by the catch
  /// and again by `deinit`, so the slot went to the next two buffers at once (found when a wrong
  /// backup passphrase was followed by a crash in another test).
  func testAThrowingInitializerReleasesItsMemoryOnce() {
    struct Refused: Error {}
    for _ in 0..<3 {
      XCTAssertThrowsError(try SecureBytes(count: 48) { _ in throw Refused() })
    }
    let first = SecureBytes(count: 48) { $0.initializeMemory(as: UInt8.self, repeating: 1) }
    let second = SecureBytes(count: 48) { $0.initializeMemory(as: UInt8.self, repeating: 2) }
    let third = SecureBytes(count: 48) { $0.initializeMemory(as: UInt8.self, repeating: 3) }
    let addresses = [first, second, third].map { $0.withUnsafeBytes { UInt(bitPattern: $0.baseAddress!) } }
    XCTAssertEqual(Set(addresses).count, 3, "three live buffers, three slots")
    XCTAssertTrue(first.withUnsafeBytes { $0.allSatisfy { $0 == 1 } })
    XCTAssertTrue(second.withUnsafeBytes { $0.allSatisfy { $0 == 2 } })
  }

  func testManyBuffersAcrossThreadsStayDistinctAndIntact() {
    DispatchQueue.concurrentPerform(iterations: 8) { thread in
      var held: [SecureBytes] = []
      for i in 0..<500 {
        let fill = UInt8(truncatingIfNeeded: thread * 31 + i)
        held.append(SecureBytes(count: 1 + i % 200) { $0.initializeMemory(as: UInt8.self, repeating: fill) })
        if i % 3 == 0 { held.removeFirst() }
      }
      for bytes in held {
        let first = bytes.withUnsafeBytes { $0[0] }
        XCTAssertTrue(bytes.withUnsafeBytes { $0.allSatisfy { $0 == first } })
      }
    }
  }
}
