import Foundation
import VaultTestSupport
import XCTest

@testable import VaultScan

/// Records in the syntaxes programs write them in (JSON of every layout, Python reprs, YAML, CSV,
/// XML, UTF-16 text), found where only ciphertext should be, and keys in JSON configuration.
final class RecordSyntaxTests: XCTestCase {
  var temporary: TemporaryDirectory!

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  /// Builds one SQLite database per value (a random blob row, then the value as a blob row) and
  /// returns each database's findings as `detector/region`.
  private func findingsInSQLiteCells(_ values: [String: String]) throws -> [String: [String]] {
    var result: [String: [String]] = [:]
    for (name, value) in values {
      let path = temporary.sub("\(name).db")
      try python(
        """
        import random,sqlite3,sys
        c=sqlite3.connect(sys.argv[1]); c.execute('create table t(id integer primary key, v blob)')
        c.execute('insert into t(v) values (?)', (random.Random(7).randbytes(64),))
        c.execute('insert into t(v) values (?)', (sys.argv[2].encode(),)); c.commit()
        """, [path, value])
      result[name] = try Scanner(canaries: []).scan([path]).findings.map { "\($0.detector)/\($0.region)" }
    }
    return result
  }

  func testJSONInEveryLayoutWritersUseIsFoundInASQLiteCell() throws {
    let found = try findingsInSQLiteCells([
      "pretty": "{\n  \"user\": \"ana\",\n  \"card\": \"4111111111111111\"\n}\n",
      "pretty-nested": "{\n  \"user\": {\n    \"name\": \"ana\"\n  },\n  \"card\": \"4111111111111111\"\n}\n",
      "foundation": "{\n  \"user\" : \"ana.silva\",\n  \"card\" : \"4111111111111111\"\n}",
      "space-after-brace": "{ \"user\": \"ana.silva\", \"card\": \"4111111111111111\", \"cvv\": \"123\" }",
      "bom-and-newlines": "\u{feff}{\n  \"user\": \"ana\",\n  \"card\": \"4111111111111111\"\n}\n",
      "one-member": "{\"card\":\"4111111111111111\"}",
      "array-of-strings": "[\"ana.silva\",\"4111111111111111\",\"123\",\"Rua das Flores 12\"]",
    ])
    for (name, findings) in found {
      XCTAssertEqual(findings, ["json-text/live-cell"], name)
    }
  }

  func testRecordSyntaxesOtherThanJSONAreFoundInASQLiteCell() throws {
    let found = try findingsInSQLiteCells([
      "python-repr": "{'user': 'ana.silva', 'card': '4111111111111111', 'cvv': '123', 'city': 'Lisboa'}",
      "yaml": "user: ana.silva\ncard: 4111111111111111\ncvv: 123\naddress: Rua das Flores 12\n",
      "csv": "ana.silva,4111111111111111,123,Rua das Flores 12,Lisboa,1200-195\n",
      "xml": "<user><name>ana.silva</name><card>4111111111111111</card><cvv>123</cvv></user>",
    ])
    for (name, findings) in found {
      XCTAssertEqual(findings, ["key-value-text/live-cell"], name)
    }
  }

  /// Schema text, prose lists and two `key: value` lines are not records.
  func testOrdinaryTextInsideBinaryDataIsNotARecord() throws {
    let found = try findingsInSQLiteCells([
      "list": "red, green, blue, 255, 128, 64, alpha, beta",
      "two-fields": "Content-Type: text/plain\nContent-Length: 1234\n",
      "one-member-short": "{\"ok\":true}                                   ",
    ])
    for (name, findings) in found {
      XCTAssertEqual(findings, [], name)
    }
  }

  func testPrettyPrintedJSONRecordsInTextFilesAreFoundNestedDocumentsAreNot() throws {
    let files = [
      "request.json": "{\n  \"user\": \"ana.silva\",\n  \"card\": \"4111111111111111\",\n  \"cvv\": \"123\"\n}\n",
      "state.json": "{\n  \"user\" : \"ana.silva\",\n  \"card\" : \"4111111111111111\"\n}\n",
      "package.json": """
      {
        "name": "left-pad",
        "version": "1.0.0",
        "repository": {
          "type": "git",
          "url": "https://github.com/x/left-pad.git"
        },
        "license": "MIT"
      }
      """,
    ]
    for (name, text) in files { try text.write(toFile: temporary.sub(name), atomically: true, encoding: .utf8) }
    let report = try Scanner(canaries: []).scan([temporary.path])
    XCTAssertEqual(
      report.findings.map { "\(($0.file as NSString).lastPathComponent)/\($0.detector)" },
      ["request.json/json-text", "state.json/json-text"])
  }

  func testUTF16TextInsideBinaryDataIsJudgedLikeASCIIText() throws {
    try python(
      """
      import random,sys
      r=random.Random(3)
      leaks={'json':'{"user":"ana.silva","card":"4111111111111111","cvv":"123"}',
             'form':'user=ana.silva&card=4111111111111111&exp=12%2F29&cvv=123',
             'sentence':'Please transfer the remaining balance to my savings account before Friday, thanks'}
      for name,leak in leaks.items():
        for codec in ('utf-16-le','utf-16-be'):
          open(sys.argv[1]+'/'+name+'-'+codec+'.bin','wb').write(r.randbytes(5001)+leak.encode(codec)+r.randbytes(5000))
      """, [temporary.path])
    let report = try Scanner(canaries: []).scan([temporary.path])
    let found = report.findings.map { "\(($0.file as NSString).lastPathComponent)/\($0.detector)" }.sorted()
    XCTAssertEqual(
      found,
      [
        "form-utf-16-be.bin/key-value-text", "form-utf-16-le.bin/key-value-text", "json-utf-16-be.bin/json-text",
        "json-utf-16-le.bin/json-text", "sentence-utf-16-be.bin/natural-language",
        "sentence-utf-16-le.bin/natural-language",
      ])
  }

  /// SQLite stores all text of a UTF-16 database as UTF-16, its schema too (which is no finding).
  func testAUTF16SQLiteDatabaseIsJudgedAndItsSchemaIsNot() throws {
    try python(
      """
      import sqlite3,sys
      c=sqlite3.connect(sys.argv[1]); c.execute("pragma encoding='UTF-16le'")
      c.execute('create table notes (id integer primary key, body text, created text, author text)')
      c.execute('insert into notes(body) values (?)', ('Please transfer the remaining balance to my savings account before Friday',))
      c.commit()
      """, [temporary.sub("u16.db")])
    let report = try Scanner(canaries: []).scan([temporary.sub("u16.db")])
    XCTAssertEqual(report.findings.map { "\($0.detector)/\($0.region)" }, ["natural-language/live-cell"])
  }

  func testAKeyInAJSONConfigIsKeyMaterialButADigestOrAMACIsNot() throws {
    let hex = (0..<32).map { String(format: "%02x", ($0 &* 73 &+ 11) & 0xff) }.joined()
    try "{\n  \"key\": \"\(hex)\"\n}\n".write(toFile: temporary.sub("config.json"), atomically: true, encoding: .utf8)
    try "{\n  \"sha256\": \"\(hex)\",\n  \"name\": \"x\"\n}\n".write(
      toFile: temporary.sub("digest.json"), atomically: true, encoding: .utf8)
    try "{\n  \"format\" : 2,\n  \"mac\" : \"\(hex)\"\n}\n".write(
      toFile: temporary.sub("manifest.json"), atomically: true, encoding: .utf8)
    let report = try Scanner(canaries: []).scan([temporary.path])
    let keys = report.findings.filter { $0.detector == "key-material" }
    XCTAssertEqual(keys.map { ($0.file as NSString).lastPathComponent }, ["config.json"])
    XCTAssertEqual(keys.first?.encoding, "hex")
  }

  /// An object that never closes is measured once, not again from every brace inside it.
  func testUnclosedNestedObjectsCostLinearTime() throws {
    let text = Array(String(repeating: "{\"a\":[", count: 10000).utf8)
    let started = Date()
    let found = text.withUnsafeBytes { RecordSyntax.objects($0, quotes: [0x22]) }
    XCTAssertLessThan(Date().timeIntervalSince(started), 1)
    XCTAssertTrue(found.allSatisfy { $0.members == 0 || !$0.closed })
  }
}
