import Foundation
import VaultTestSupport
import XCTest

/// Issue 8, item 15: a context is bytes. Two contexts that differ only in bytes that are not
/// UTF-8 must never open each other's envelopes (Swift's `CommandLine.arguments` repairs both to
/// the same U+FFFD), so the real binary is run with the raw bytes in its argv.
final class ContextBytesTests: XCTestCase {
  var temporary: TemporaryDirectory!
  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  /// Runs `vault --home HOME ACTION --context CTX` through sh, with CTX made by printf from
  /// `format` (octal escapes), so argv carries bytes a Swift String cannot.
  private func run(_ action: String, home: String, context format: String, inline: Bool = false, input: [UInt8])
    throws -> Spawned
  {
    let option = inline ? "--context=\"$(printf '\(format)')\"" : "--context \"$(printf '\(format)')\""
    return try Spawn.run(
      "/bin/sh", ["-c", "exec \"$0\" --home \"$1\" \(action) \(option)", vaultBinary(), home], input: input)
  }

  func testContextsDifferingOnlyInInvalidUTF8NeverOpenEachOthersEnvelopes() throws {
    let home = temporary.sub("home")
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/v.keys"))
    let plaintext = Array("bound to its place".utf8)

    let sealed = try run("seal", home: home, context: "ctx\\377", input: plaintext)
    XCTAssertEqual(sealed.status, 0, sealed.error)
    let same = try run("open", home: home, context: "ctx\\377", input: sealed.output)
    XCTAssertEqual(same.status, 0, same.error)
    XCTAssertEqual(same.output, plaintext)
    let sameInline = try run("open", home: home, context: "ctx\\377", inline: true, input: sealed.output)
    XCTAssertEqual(sameInline.output, plaintext, "--context=CTX carries the same bytes")

    for other in ["ctx\\376", "ctx\\357\\277\\275", "ctx"] {  // another invalid byte, a real U+FFFD, none
      let opened = try run("open", home: home, context: other, input: sealed.output)
      XCTAssertEqual(opened.status, 1, "context \(other) must not open an envelope sealed under ctx\\377")
      XCTAssertTrue(opened.output.isEmpty)
      XCTAssertTrue(opened.error.contains("the context differs from the one it was sealed with"), opened.error)
    }
    let inlineOther = try run("open", home: home, context: "ctx\\376", inline: true, input: sealed.output)
    XCTAssertEqual(inlineOther.status, 1)

    // And the other way round: sealed under a real U+FFFD, opened by neither invalid byte.
    let replacement = try run("seal", home: home, context: "ctx\\357\\277\\275", input: plaintext)
    XCTAssertEqual(replacement.status, 0, replacement.error)
    XCTAssertEqual(try run("open", home: home, context: "ctx\\377", input: replacement.output).status, 1)
    XCTAssertEqual(
      try run("open", home: home, context: "ctx\\357\\277\\275", input: replacement.output).output, plaintext)
  }
}
