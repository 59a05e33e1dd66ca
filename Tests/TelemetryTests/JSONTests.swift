import XCTest

@testable import Telemetry

/// The payload parser and writer: strict RFC 8259, numbers kept as written.
final class JSONTests: XCTestCase {
  func testNumbersKeepTheirText() throws {
    for text in ["0", "-0", "12345678901234567891", "0.10000000000000000000001", "-1.5e+300", "1E2", "2e-7", "1.0"] {
      XCTAssertEqual(JSONNumber(text)?.text, text)
      XCTAssertEqual(try JSONValue(parsing: "[\(text)]").serialized(), Array("[\(text)]".utf8))
    }
    for text in ["01", "1.", ".5", "+1", "-", "1e", "1e+", "NaN", "Infinity", "0x10", " 1", "1 ", ""] {
      XCTAssertNil(JSONNumber(text), text)
    }
  }

  func testDoublesAndIntegersBecomeNumbers() {
    XCTAssertEqual(JSONValue.number(3.0), .number(JSONNumber("3")!))
    XCTAssertEqual(JSONValue.number(1.5), .number(JSONNumber("1.5")!))
    XCTAssertEqual(JSONValue.number(1e300), .number(JSONNumber("1e+300")!))
    XCTAssertEqual(JSONValue.number(Int.max), .number(JSONNumber("9223372036854775807")!))
    XCTAssertEqual(JSONValue.number(Double.nan), .null, "JSON has no NaN")
    XCTAssertEqual(JSONValue.number(-Double.infinity), .null)
  }

  func testStringsRoundTrip() throws {
    let value = try JSONValue(parsing: #"{"s": "a\"b\\c\/d\b\f\n\r\t\u0000\u001f é\u00e9 \ud83d\ude00 \u2028"}"#)
    XCTAssertEqual(value, .object(["s": .string("a\"b\\c/d\u{8}\u{c}\n\r\t\u{0}\u{1f} éé 😀 \u{2028}")]))
    XCTAssertEqual(
      String(decoding: value.serialized(), as: UTF8.self),
      #"{"s":"a\"b\\c/d\b\f\n\r\t\u0000\u001f éé 😀 "#
        + "\u{2028}\"}")
    XCTAssertEqual(try JSONValue(parsing: value.serialized()), value)
  }

  /// Every ASCII character, alone and between runs of plain text (the writer copies such runs
  /// whole): control characters as `\uXXXX` or their short escape, quote and backslash escaped,
  /// the rest as it is; Foundation's parser reads back the same string.
  func testEveryASCIICharacterIsWrittenAsJSONRequires() throws {
    let short: [UInt8: String] = [0x08: #"\b"#, 0x09: #"\t"#, 0x0A: #"\n"#, 0x0C: #"\f"#, 0x0D: #"\r"#]
    for byte in UInt8(0)..<0x80 {
      let character = String(UnicodeScalar(byte))
      let expected: String =
        switch byte {
        case UInt8(ascii: "\""): #"\""#
        case UInt8(ascii: "\\"): #"\\"#
        case 0..<0x20: short[byte] ?? String(format: "\\u%04x", byte)
        default: character
        }
      for text in [character, "ab" + character + "cd" + character] {
        let written = String(decoding: JSONValue.string(text).serialized(), as: UTF8.self)
        XCTAssertEqual(written, "\"" + text.replacingOccurrences(of: character, with: expected) + "\"")
        let parsed = try JSONSerialization.jsonObject(with: Data(written.utf8), options: .fragmentsAllowed)
        XCTAssertEqual(parsed as? String, text)
      }
    }
  }

  func testKeysAreSortedAndStructureIsKept() throws {
    let text = #" { "b" : [ 1 , true , null , { } , [ ] ] , "a" : { "z" : false } } "#
    XCTAssertEqual(
      String(decoding: try JSONValue(parsing: text).serialized(), as: UTF8.self),
      #"{"a":{"z":false},"b":[1,true,null,{},[]]}"#)
  }

  func testMalformedTextIsRefusedWithAReasonAndNoContent() {
    let cases: [(String, JSONParseError.Reason)] = [
      (#"{"a": 1, "a": 2}"#, .duplicateKey), (#"{"a": 1,}"#, .unexpectedByte), (#"[1,]"#, .unexpectedByte),
      (#"{"a" 1}"#, .unexpectedByte), (#"{"a": 01}"#, .invalidNumber), (#"[1.]"#, .invalidNumber),
      (#"["\ud800"]"#, .invalidUnicode), (#"["\udc00"]"#, .invalidUnicode), (#"["\x"]"#, .invalidEscape),
      ("[\"a\u{1}\"]", .controlCharacter), (#"{"a": 1} 2"#, .trailingContent), (#"{"a": "#, .unexpectedEnd),
      ("[tru]", .unexpectedByte), ("", .unexpectedEnd), ("\u{FEFF}{}", .unexpectedByte),
    ]
    for (text, reason) in cases {
      XCTAssertThrowsError(try JSONValue(parsing: text), text) { error in
        XCTAssertEqual((error as? JSONParseError)?.reason, reason, text)
        XCTAssertFalse("\(error)".contains("\""), "the text is not echoed")
      }
    }
    XCTAssertThrowsError(try JSONValue(parsing: [0x5B, 0x22, 0xFF, 0x22, 0x5D])) { error in
      XCTAssertEqual((error as? JSONParseError)?.reason, .invalidUnicode)
    }
  }

  func testLimits() throws {
    let deep = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
    XCTAssertNoThrow(try JSONValue(parsing: deep))
    XCTAssertThrowsError(try JSONValue(parsing: "[" + deep + "]")) { error in
      XCTAssertEqual((error as? JSONParseError)?.reason, .tooDeep)
    }
    let big = "[\"" + String(repeating: "x", count: 100) + "\"]"
    XCTAssertThrowsError(try JSONValue(parsing: big, limits: JSONLimits(maxBytes: 100))) { error in
      XCTAssertEqual((error as? JSONParseError)?.reason, .tooLarge)
    }
    XCTAssertNoThrow(try JSONValue(parsing: big, limits: JSONLimits(maxBytes: 104)))
  }

  /// `encoded()` writes the event's members itself, in their sorted order; these are the bytes the
  /// general writer gives for the same object, whatever the payload, type and session hold.
  func testAnEventIsEncodedAsItsObjectIsSerialized() throws {
    let payloads: [[String: JSONValue]] = [
      [:], ["screen": "home", "taps": 3, "ok": true, "none": nil],
      ["nested": ["a": [1, 2, ["b": "c"]], "quote\"key": "line\nbreak\u{0}"], "é": "ü", "": 1.5],
    ]
    for (index, payload) in payloads.enumerated() {
      let event = TelemetryEvent(
        id: UUID(), date: Date(timeIntervalSince1970: 1_700_000_000.123 + Double(index)),
        type: ["t", "écran \"vu\"", String(repeating: "x", count: 128)][index], payload: payload,
        sessionID: ["s", "", "session\\id"][index])
      let members: [String: JSONValue] = [
        "id": .string(event.id.uuidString.lowercased()), "ts": .string(event.ts), "type": .string(event.type),
        "payload": .object(payload), "session_id": .string(event.sessionID),
      ]
      XCTAssertEqual(try event.encoded(), JSONValue.object(members).serialized(), "payload \(index)")
    }
  }

  func testEventsCarryPayloadNumbersVerbatim() throws {
    guard case .object(let payload) = try JSONValue(parsing: #"{"n": 12345678901234567891, "d": 1.10}"#) else {
      return XCTFail("not an object")
    }
    let event = TelemetryEvent(
      id: UUID(), date: Date(timeIntervalSince1970: 0), type: "t", payload: payload, sessionID: "s")
    let text = String(decoding: try event.encoded(), as: UTF8.self)
    XCTAssertEqual(
      text,
      #"{"id":"\#(event.id.uuidString.lowercased())","payload":{"d":1.10,"n":12345678901234567891},"session_id":"s","ts":"1970-01-01T00:00:00.000Z","type":"t"}"#
    )
  }
}
