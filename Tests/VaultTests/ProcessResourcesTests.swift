import Foundation
import XCTest

@testable import Vault

/// `ProcessResources` given counts an app should never pass: nothing is asked for, and nothing
/// traps (an outside review: `rlim_t(-1)` and a negative thread range trapped the app).
final class ProcessResourcesTests: XCTestCase {
  func testNegativeCountsAskForNothingAndDoNotTrap() throws {
    var files = rlimit()
    XCTAssertEqual(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files), 0)
    XCTAssertEqual(ProcessResources.raiseOpenFileLimit(to: -1), Int(clamping: files.rlim_cur), "never lowered")
    XCTAssertEqual(ProcessResources.raiseOpenFileLimit(to: Int.min), Int(clamping: files.rlim_cur))
    XCTAssertNoThrow(try ProcessResources.ensure(openFiles: -1, threads: -1))
    XCTAssertNoThrow(try ProcessResources.ensure(openFiles: Int.min, threads: Int.min))
  }
}
