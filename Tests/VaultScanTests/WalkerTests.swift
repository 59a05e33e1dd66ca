import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import VaultScan

/// The walker's pieces in-process: how paths are shown, how a file is opened, and the container
/// audit reached through the library alone.
final class WalkerTests: XCTestCase {
  /// The inverse of `PathText.display`, as the README tells a reader to undo it.
  private func undisplay(_ shown: String) -> [UInt8] {
    let bytes = Array(shown.utf8)
    var out: [UInt8] = []
    var index = 0
    while index < bytes.count {
      if bytes[index] == 0x5c, index + 1 < bytes.count, bytes[index + 1] == 0x5c {
        out.append(0x5c)
        index += 2
      } else if bytes[index] == 0x5c, index + 3 < bytes.count, bytes[index + 1] == 0x78,
        let byte = UInt8(String(decoding: bytes[(index + 2)...(index + 3)], as: UTF8.self), radix: 16)
      {
        out.append(byte)
        index += 4
      } else {
        out.append(bytes[index])
        index += 1
      }
    }
    return out
  }

  func testPathTextEscapesExactlyWhatIsNotPrintableUTF8() {
    XCTAssertEqual(PathText.display(Array("/tmp/dir/é ü.log".utf8)), "/tmp/dir/é ü.log")
    XCTAssertEqual(PathText.display([0x61, 0xff, 0x62]), #"a\xffb"#)
    XCTAssertEqual(PathText.display(Array(#"a\xffb"#.utf8)), #"a\\xffb"#)
    XCTAssertEqual(PathText.display([0x61, 0x0a, 0x1b, 0x7f]), #"a\x0a\x1b\x7f"#)
    XCTAssertEqual(PathText.display([0xc2, 0x9b, 0x41]), #"\xc2\x9bA"#, "C1 controls are escaped too")
    XCTAssertEqual(PathText.display([0xe2, 0x82]), #"\xe2\x82"#, "a sequence cut short")
    XCTAssertEqual(PathText.display([0xc0, 0xaf]), #"\xc0\xaf"#, "an overlong form")
    XCTAssertEqual(PathText.display([0xed, 0xa0, 0x80]), #"\xed\xa0\x80"#, "a surrogate")
    // Any bytes: the result is what `undisplay` turns back into exactly those bytes.
    var generator = SystemRandomNumberGenerator()
    for _ in 0..<2000 {
      let bytes = (0..<Int.random(in: 0..<12, using: &generator)).map { _ in
        ([0x5c, 0x78, 0x41, 0xc3, 0xa9, 0xff, 0x80, 0x0a, 0xe2, 0x82, 0xac] as [UInt8]).randomElement(
          using: &generator)!
      }
      XCTAssertEqual(undisplay(PathText.display(bytes)), bytes, "\(bytes)")
    }
  }

  /// A regular file swapped for a FIFO after it was looked at: opened without waiting for a writer
  /// (O_NONBLOCK), found not to be a regular file (fstat), never read.
  func testAFileSwappedForAFIFOIsNeitherWaitedOnNorRead() throws {
    let temporary = TemporaryDirectory()
    XCTAssertEqual(mkfifo(temporary.sub("swapped"), 0o644), 0)
    let directory = open(temporary.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    XCTAssertGreaterThanOrEqual(directory, 0)
    defer { close(directory) }
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var report = ScanReport()
    let thread = Thread {
      try? Scanner(canaries: []).readFile(
        in: directory, name: Array("swapped".utf8), shown: "swapped", report: &report)
      done.signal()
    }
    thread.start()
    XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "opening the FIFO waited for a writer")
    XCTAssertEqual(report.filesScanned, 0)
    // And one swapped for a symlink is not followed (O_NOFOLLOW): listed, not read.
    XCTAssertEqual(symlink("/etc/hostname", temporary.sub("relinked")), 0)
    try Scanner(canaries: []).readFile(
      in: directory, name: Array("relinked".utf8), shown: "relinked", report: &report)
    XCTAssertEqual(report.filesScanned, 0)
    XCTAssertEqual(
      report.incomplete.last,
      Skipped(path: "relinked", reason: "not readable (changed while being scanned (now a symlink))"))
    report.incomplete.removeLast()
    XCTAssertEqual(
      report.incomplete,
      [Skipped(path: "swapped", reason: "not read (changed while being scanned: no longer a regular file)")])
  }

  /// The container audit is the library's: `Scanner` alone checks envelope columns and, given the
  /// vault, opens every envelope with the queue's own context.
  func testTheLibraryAuditsTheContainersItWalks() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys/v.keys")))
    let path = temporary.sub("home/queue.sqlite")
    do {
      let queue = try QueueContainer(path: path, vault: vault, configuration: QueueConfiguration())
      for i in 0..<3 { try queue.enqueue(Array("audit-\(i)".utf8), queue: "outbox") }
    }
    try python(
      "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE records SET envelope = CAST('plain words here' AS BLOB) WHERE seq = 1\"); c.commit()",
      [path])
    let keyless = try Scanner(canaries: []).scan([temporary.sub("home")])
    XCTAssertNil(keyless.verify)
    XCTAssertEqual(
      keyless.findings.filter { $0.detector == "envelope-column" }.map { [$0.file, $0.encoding ?? ""] },
      [[path, "not-an-envelope"]])
    let verified = try Scanner(canaries: [], verifyingWith: vault).scan([temporary.sub("home")])
    XCTAssertEqual(verified.verify?.containers, [path: ["1": 3]])
    XCTAssertEqual(verified.verify?.opened, 2)
    XCTAssertEqual(verified.verify?.failed, 1)
    XCTAssertEqual(
      verified.findings.filter { $0.detector == "envelope-verify" }.map { $0.encoding ?? "" },
      ["input is not a vault envelope (no complete VLT header)"])
  }
}
