import Foundation
import VaultTestSupport
import XCTest

@testable import VaultScan

/// The leak corpus (tools/leak-corpus.py) found whole, and ordinary files left alone: the two
/// halves of the scanner's promise (issue 10 items 4 and 5).
final class GeneratedLeakCorpusTests: XCTestCase {
  private struct Manifest: Decodable {
    struct Case: Decodable {
      let id: String
      let file: String
      let detector: String
      let encoding: String?
      let region: String?
    }
    let canaries: [String]
    let cases: [Case]
    let clean: [Case]
  }

  private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path

  private func matches(_ entry: Manifest.Case, in report: ScanReport, root: String) -> [Finding] {
    report.findings.filter {
      $0.file == root + "/" + entry.file && $0.detector == entry.detector
        && (entry.encoding == nil || $0.encoding == entry.encoding)
        && (entry.region == nil || $0.region == entry.region)
    }
  }

  func testEveryCaseOfTheLeakCorpusIsFoundAndNoNearMissIs() throws {
    let temporary = TemporaryDirectory()
    let corpus = temporary.sub("corpus")
    let result = try Spawn.run("/usr/bin/env", ["python3", Self.root + "/tools/leak-corpus.py", corpus])
    XCTAssertEqual(result.status, 0, result.error)
    let manifest = try JSONDecoder().decode(
      Manifest.self, from: Data(contentsOf: URL(fileURLWithPath: corpus + "/manifest.json")))
    // Every class the scanner claims, so a generator that silently wrote less would fail here.
    XCTAssertGreaterThanOrEqual(manifest.cases.count, 59)
    let report = try Scanner(canaries: manifest.canaries).scan([corpus])
    for entry in manifest.cases {
      XCTAssertFalse(matches(entry, in: report, root: corpus).isEmpty, "missed \(entry.id)")
    }
    for entry in manifest.clean {
      XCTAssertEqual(matches(entry, in: report, root: corpus), [], "false alarm \(entry.id)")
    }
    // Nothing secret in the report: no excerpt holds a whole record or key.
    let json = String(decoding: try JSONEncoder().encode(report), as: UTF8.self)
    for secret in ["plumber", "4111111111111111", "Qx7", "BEGIN"] {
      XCTAssertFalse(json.contains(secret), secret)
    }
  }

  /// Real files every machine with tools/setup.sh's packages has (licence texts, READMEs, shared
  /// libraries), and Python bytecode compiled here: prose, key=value pairs and string tables that
  /// are no app's records. The scanner used to flag each of them.
  func testOrdinaryFilesRaiseNoHeuristicFinding() throws {
    let temporary = TemporaryDirectory()
    let tree = temporary.sub("ordinary")
    try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
    let real = [
      "/usr/share/doc/libsqlite3-dev/copyright", "/usr/share/doc/dbus/copyright",
      "/usr/share/doc/openssl/README.optimization", "/usr/share/doc/procps/README.Debian",
      "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0", "/usr/lib/x86_64-linux-gnu/libcurl.so.4",
    ]
    for (index, path) in real.enumerated() {
      let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
      XCTAssertTrue(FileManager.default.fileExists(atPath: resolved), "\(path): run tools/setup.sh")
      try FileManager.default.copyItem(
        atPath: resolved, toPath: tree + "/\(index)-" + (path as NSString).lastPathComponent)
    }
    let compile = try Spawn.run(
      "/usr/bin/env",
      [
        "python3", "-c",
        """
        import py_compile, sys, os, argparse, json.decoder, email.message
        for module in (argparse, json.decoder, email.message):
            py_compile.compile(module.__file__, cfile=os.path.join(sys.argv[1], module.__name__ + '.pyc'), doraise=True)
        """,
        tree,
      ])
    XCTAssertEqual(compile.status, 0, compile.error)
    let report = try Scanner(canaries: []).scan([tree])
    XCTAssertEqual(report.filesScanned, real.count + 3)
    let heuristic = report.findings.filter { $0.detector != "canary" }
    XCTAssertEqual(heuristic, [], "\(heuristic.map { ($0.file as NSString).lastPathComponent + " " + $0.detector })")
  }

  /// The same prose is a finding where vault keeps only ciphertext, and in a log between machine
  /// records, but not in a document made of prose.
  func testProseIsJudgedByWhereItSits() throws {
    let temporary = TemporaryDirectory()
    let sentence = "Dear Ana, the plumber comes on Tuesday so please leave the spare key with the neighbour"
    var log = (0..<50).map { "2026-11-30T10:00:\(String(format: "%02d", $0))Z worker \($0) sent batch \($0 * 7)" }
    log.insert("2026-11-30T10:00:20Z note: " + sentence, at: 20)
    try (log.joined(separator: "\n") + "\n").write(toFile: temporary.sub("app.log"), atomically: true, encoding: .utf8)
    let document = (0..<12).map { _ in sentence + " and the letter goes on about the garden" }
    try document.joined(separator: "\n").write(toFile: temporary.sub("letter.txt"), atomically: true, encoding: .utf8)
    var binary = (0..<4000).map { UInt8(truncatingIfNeeded: $0 &* 151 &+ 7) | 0x80 }
    binary.replaceSubrange(1000..<(1000 + sentence.utf8.count), with: Array(sentence.utf8))
    try Data(binary).write(to: URL(fileURLWithPath: temporary.sub("record.bin")))
    let report = try Scanner(canaries: []).scan([temporary.path])
    let flagged = Set(
      report.findings.filter { $0.detector == "natural-language" }.map { ($0.file as NSString).lastPathComponent })
    XCTAssertEqual(flagged, ["app.log", "record.bin"])
  }

  /// A log whose every message reads like prose says nothing by one more: only rare lines count.
  func testALogMadeOfProseIsNotFlaggedLineByLine() throws {
    let temporary = TemporaryDirectory()
    let log = (0..<40).map {
      "2026-11-30 10:00:\(String(format: "%02d", $0)) the connection to the upstream server was closed by the remote side"
        + " before the reply came back"
    }
    try log.joined(separator: "\n").write(toFile: temporary.sub("prose.log"), atomically: true, encoding: .utf8)
    XCTAssertEqual(try Scanner(canaries: []).scan([temporary.path]).findings, [])
  }

  func testTheKindOfAFileComesFromItsBytes() {
    func kind(_ bytes: [UInt8], _ fileKind: FileKind = .other) -> ContentKind {
      ContentKind.of(head: bytes, fileKind: fileKind, vaultMetadata: false)
    }
    let elf: [UInt8] = [0x7f, 0x45, 0x4c, 0x46, 2, 1, 1] + [UInt8](repeating: 0, count: 9)
    XCTAssertEqual(kind(elf + [3, 0] + [UInt8](repeating: 0, count: 40)), .compiledCode)  // ET_DYN
    XCTAssertEqual(kind(elf + [4, 0] + [UInt8](repeating: 0, count: 40)), .memoryImage)  // ET_CORE
    XCTAssertEqual(kind([0xa7, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0] + [UInt8](repeating: 0x41, count: 40)), .compiledCode)
    XCTAssertEqual(kind(Array("!<arch>\n".utf8) + [UInt8](repeating: 0x20, count: 60)), .compiledCode)
    XCTAssertEqual(kind(Array("Zürich, Genève: a letter to Ana about the garden and the plumber".utf8)), .text)
    XCTAssertEqual(kind((0..<200).map { UInt8(truncatingIfNeeded: $0 &* 151) | 0x80 }), .binary)
    let log = "2026-11-30 10:00:01 started\n2026-11-30 10:00:02 stopped\n"
    XCTAssertEqual(kind(Array(log.utf8)), .textLog)
    XCTAssertEqual(
      kind(Array("# $Id: start 305 2005-07-03 18:51:43Z $\n\nexec $STARTUP # sourced by Xsession\n".utf8)), .text)
    XCTAssertEqual(kind([0xde, 0x12, 0x04, 0x95] + [UInt8](repeating: 0, count: 60)), .compiledCode)  // gettext .mo
    XCTAssertEqual(kind(Array("plain words here".utf8), .journal), .sqlite)
  }
}

final class KeyMaterialTests: XCTestCase {
  private func finding(_ bytes: [UInt8], name: String = "k") throws -> [Finding] {
    let temporary = TemporaryDirectory()
    try Data(bytes).write(to: URL(fileURLWithPath: temporary.sub(name)))
    return try Scanner(canaries: []).scan([temporary.sub(name)]).findings.filter { $0.detector == "key-material" }
  }

  /// A WAL with no frame is its 32-byte header: magic, version, page size, checkpoint, salts and
  /// checksums, as random-looking as a key (the scanner called it a raw key).
  func testALiveWALHeaderAloneIsNotAKey() throws {
    var generator = SystemRandomNumberGenerator()
    for magic: UInt8 in [0x82, 0x83] {
      var header: [UInt8] = [0x37, 0x7f, 0x06, magic, 0x00, 0x2d, 0xe2, 0x18, 0, 0, 0x10, 0, 0, 0, 0, 0]
      header += (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
      XCTAssertEqual(try finding(header, name: "live.db-wal"), [])
      XCTAssertEqual(try finding(header, name: "header.bin"), [], "by content, not by name")
    }
  }

  func testShortTextIsNotAKey() throws {
    XCTAssertEqual(try finding(Array("INPUT(libncursesw.so.6 -ltinfo)\n".utf8)), [])
    XCTAssertEqual(try finding(Array("The quick brown fox jumps over it".utf8)), [])
  }

  func testAKeyIsFoundInEachEncoding() throws {
    let key = (0..<32).map { UInt8(truncatingIfNeeded: $0 &* 97 &+ 31) }
    let base64 = Data(key).base64EncodedString()
    let url = base64.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
    let hex = key.map { String(format: "%02x", $0) }.joined()
    let cases: [([UInt8], String)] = [
      (key, "raw-32-bytes"), (key + [0x0a], "raw-32-bytes"), (Array((base64 + "\n").utf8), "base64"),
      (Array(base64.dropLast().utf8), "base64"), (Array(url.dropLast().utf8), "base64url"),
      (Array(hex.utf8), "hex"), (Array((hex.uppercased() + "\r\n").utf8), "hex"),
      (Array("A=1\nexport SYNC_KEY=\"\(base64)\"\nB=2\n".utf8), "base64"),
      (Array("secret: '\(hex)'\n".utf8), "hex"),
    ]
    for (bytes, encoding) in cases {
      let found = try finding(bytes)
      XCTAssertEqual(found.map(\.encoding), [encoding], String(decoding: bytes.prefix(12), as: UTF8.self))
      // Not even two characters of a key (12 bits of a base64 one) go to a report or a log (outside
      // operator review): its length only.
      // (The text excerpt's "ab…" form is the only one that shows characters of what matched.)
      XCTAssertEqual(found.first?.excerpt.contains("…"), false, found.first?.excerpt ?? "")
      XCTAssertEqual(found.first?.excerpt.contains("redacted)"), true, found.first?.excerpt ?? "")
    }
  }

  /// A key line does not end the search: the rest of an .env file is still read (a key file alone
  /// holds nothing else).
  func testAFileWithAKeyLineIsStillSearchedForCanaries() throws {
    let temporary = TemporaryDirectory()
    let key = Data((0..<32).map { UInt8(truncatingIfNeeded: $0 &* 97 &+ 31) }).base64EncodedString()
    try "VAULT_KEY=\(key)\nGREETING=env-canary-31\n".write(
      toFile: temporary.sub("app.env"), atomically: true, encoding: .utf8)
    let report = try Scanner(canaries: ["env-canary-31"]).scan([temporary.sub("app.env")])
    XCTAssertEqual(Set(report.findings.map(\.detector)), ["key-material", "canary"])
  }

  func testDigestsAndPublicArmourAreNotKeys() throws {
    let hex = (0..<32).map { String(format: "%02x", UInt8(truncatingIfNeeded: $0 &* 97 &+ 31)) }.joined()
    XCTAssertEqual(try finding(Array("sha256sum=\(hex)\n".utf8)), [])
    // Source code assigning a test vector: spaces around '=' are not shell or .env syntax.
    XCTAssertEqual(try finding(Array("int main() {\n  xs = \"\(hex.uppercased())\";\n}\n".utf8)), [])
    let body = Data((0..<600).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 5) }).base64EncodedString(
      options: .lineLength64Characters)
    for label in ["CERTIFICATE", "PUBLIC KEY", "PGP PUBLIC KEY BLOCK"] {
      XCTAssertEqual(try finding(Array("-----BEGIN \(label)-----\n\(body)\n-----END \(label)-----\n".utf8)), [])
    }
    // Documentation that shows armour with an ellipsis for a body.
    XCTAssertEqual(
      try finding(
        Array("Keys look like this:\n-----BEGIN RSA PRIVATE KEY-----\n...\n-----END RSA PRIVATE KEY-----\n".utf8)),
      [])
  }

  func testArmouredPrivateKeysAreFoundInsideLargerFiles() throws {
    let body = Data((0..<900).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 5) }).base64EncodedString(
      options: .lineLength64Characters)
    let armour = Array(
      "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n\n\(body)\n-----END RSA PRIVATE KEY-----\n".utf8)
    let binary = [UInt8](repeating: 0x90, count: 5000) + armour + [UInt8](repeating: 0x00, count: 5000)
    let found = try finding(binary)
    XCTAssertEqual(found.map(\.encoding), ["pem"])
    XCTAssertEqual(found.first?.offset, 5000)
    XCTAssertFalse(found.first?.excerpt.contains("PRIVATE") ?? true, "redacted")
  }

  /// A key that starts in the first chunk and whose END line the first chunk's buffer (the chunk and
  /// its overlap) cuts: the next chunk starts after its BEGIN line, so only the first can report it.
  /// Every cut inside the END line, in a text file whose other lines raise nothing (review: the
  /// differential scan found such keys missed, the scan clean).
  func testAKeyWhoseEndLineTheChunkCutsIsFound() throws {
    let body = Data((0..<900).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 5) }).base64EncodedString(
      options: .lineLength64Characters)
    let head = Array("-----BEGIN RSA PRIVATE KEY-----\n\(body)\n".utf8)
    let armour = head + Array("-----END RSA PRIVATE KEY-----\n".utf8)
    let line = Array("2026-12-01 10:00:00 service started, nothing to report\n".utf8)
    // The first chunk's buffer ends at `Scanner.chunk + Scanner.chunkOverlap` (no canary longer).
    let bufferEnd = Scanner.chunk + Scanner.chunkOverlap
    for cut in [1, 5, 9, 20, 29] {
      let start = bufferEnd - head.count - cut
      var file = Array(line.cycled(count: start / line.count + 1).prefix(start - 1)) + [0x0a]
      file += armour + line
      XCTAssertEqual(try finding(file).map(\.offset), [start], "END line cut after \(cut) bytes")
    }
  }
}

extension Collection {
  /// The elements repeated `count` times.
  fileprivate func cycled(count: Int) -> [Element] { (0..<count).flatMap { _ in self } }
}
