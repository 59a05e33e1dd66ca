import Foundation
import VaultTestSupport
import XCTest

/// `vault version [--json]` and `vault --version`, through the real binary.
final class VersionCommandTests: XCTestCase {
  func testVersionAndDashDashVersionPrintTheSameLine() throws {
    for arguments in [["version"], ["--version"]] {
      let run = try vault(arguments)
      XCTAssertEqual(run.status, 0, run.error)
      XCTAssertEqual(run.outputText, "vault 0.1.0\n", "\(arguments)")
      XCTAssertEqual(run.error, "")
    }
  }

  func testVersionJSONNamesFormatsAndTheLibrariesLoadedAtRunTime() throws {
    // It needs no vault, and an unusable environment setting does not stop it.
    let run = try vault(
      ["--home", "/nonexistent/vault", "version", "--json"],
      environment: environment(["VAULT_SECRET_SERVICE_TIMEOUT": "nan"]))
    XCTAssertEqual(run.status, 0, run.error)
    let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [String: Any])
    XCTAssertEqual(Set(report.keys), ["version", "envelopes", "manifests", "libraries"])
    XCTAssertEqual(report["version"] as? String, "0.1.0")
    let envelopes = try XCTUnwrap(report["envelopes"] as? [String: Any])
    XCTAssertEqual(envelopes["seals"] as? Int, 2)
    XCTAssertEqual(envelopes["opens"] as? [Int], [1, 2])
    let manifests = try XCTUnwrap(report["manifests"] as? [String: Any])
    XCTAssertEqual(manifests["reads"] as? [Int], [1, 2, 3])
    XCTAssertEqual(manifests["writes"] as? [Int], [2, 3])
    let libraries = try XCTUnwrap(report["libraries"] as? [String: Any])
    XCTAssertEqual(Set(libraries.keys), ["openssl", "sqlite"], "absent values are null, never omitted")
    let openssl = try XCTUnwrap(libraries["openssl"] as? String)
    XCTAssertTrue(openssl.hasPrefix("OpenSSL "), openssl)
    let sqlite = try XCTUnwrap(libraries["sqlite"] as? String)
    XCTAssertNotNil(sqlite.range(of: #"^3\.\d+\.\d+"#, options: .regularExpression), sqlite)
  }

  func testVersionRefusesArgumentsItDoesNotTake() throws {
    let run = try vault(["version", "extra"])
    XCTAssertEqual(run.status, 64)
    XCTAssertEqual(
      run.error, "Error: unexpected argument 'extra'\nUsage: vault version [--json]\n  See 'vault help version'.\n")
  }
}
