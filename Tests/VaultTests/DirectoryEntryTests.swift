import Foundation
import Glibc
import VaultTestSupport
import XCTest

@testable import Vault

/// `directoryEntryName` reads each name `readdir` returns in place: every name of every length
/// comes back whole, and (under AddressSanitizer, `tools/sanitize.sh address DirectoryEntryTests`)
/// nothing is read past the last entry of readdir's buffer, as copying `d_name` did.
final class DirectoryEntryTests: XCTestCase {
  func testEveryNameOfEveryLengthIsReadWholeAndInPlace() throws {
    let temporary = TemporaryDirectory()
    var made: Set<[UInt8]> = []
    // Short names fill readdir's buffer with short entries (one of them ends each fill); the long
    // ones reach the 255-byte limit.
    for index in 0..<3000 {
      let length = index % 7 == 0 ? 150 + index % 106 : 1 + index % 9
      let name = Array(String(index, radix: 36).utf8) + Array(repeating: UInt8(ascii: "x"), count: length)
      let path = temporary.path + "/" + String(decoding: name.prefix(255), as: UTF8.self)
      XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: nil), path)
      made.insert(Array(name.prefix(255)))
    }
    let stream = try XCTUnwrap(opendir(temporary.path))
    defer { closedir(stream) }
    var read: Set<[UInt8]> = []
    while let entry = readdir(stream) {
      let name = directoryEntryName(entry)
      if name != Array(".".utf8), name != Array("..".utf8) { read.insert(name) }
    }
    XCTAssertEqual(read.count, made.count)
    XCTAssertEqual(read, made)
    XCTAssertTrue(read.contains { $0.count == 255 }, "a name of the longest length was read whole")
  }
}
