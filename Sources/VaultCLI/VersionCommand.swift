import Vault
import VaultCrypto
import VaultKeys
import VaultQueue

/// What `vault version --json` prints: the version, the formats this build writes and reads, and
/// the C libraries it runs with (as they name themselves at run time; null when one does not).
struct VersionReport: Encodable {
  struct Formats: Encodable {
    let seals: Int
    let opens: [Int]
  }

  struct ManifestFormats: Encodable {
    let writes: [Int]
    let reads: [Int]
  }

  struct Libraries: Encodable {
    let openssl: String?
    let sqlite: String?

    func encode(to encoder: any Encoder) throws {
      var values = encoder.container(keyedBy: Key.self)
      // Absent is null, never omitted.
      try values.encode(openssl, forKey: .openssl)
      try values.encode(sqlite, forKey: .sqlite)
    }

    enum Key: String, CodingKey { case openssl, sqlite }
  }

  let version: String
  let envelopes: Formats
  let manifests: ManifestFormats
  let libraries: Libraries

  /// This build's report. Envelopes: format 2 is sealed (format 1 only while a key version made
  /// before format 2 is still active), both are opened. Manifests: format 1 is read and upgraded.
  static var current: VersionReport {
    VersionReport(
      version: VersionCommand.number,
      envelopes: Formats(seals: Int(Envelope.format2), opens: [Int(Envelope.format1), Int(Envelope.format2)]),
      manifests: ManifestFormats(
        writes: Array(Manifest.suiteOneFormat...Manifest.currentFormat), reads: Array(1...Manifest.currentFormat)),
      libraries: Libraries(openssl: OpenSSLLibrary.version, sqlite: SQLiteLibrary.version))
  }
}

extension VaultCommandLine {
  /// `vault version [--json]`: the same line as `vault --version`, or the whole report.
  func version(_ arguments: Arguments) throws {
    guard arguments.flags.contains("--json") else {
      terminal.print(VersionCommand.line)
      return
    }
    terminal.printBlock(try JSON.encode(VersionReport.current))
  }
}

/// `vault version`.
enum VersionCommand: Subcommand {
  /// This release, as `vault version --json` gives it.
  static let number = "0.1.0"
  /// What `vault --version` and `vault version` print.
  static let line = "vault \(number)"

  static let declaration = CommandDeclaration(
    name: "version", abstract: "Show the version (with --json, also the formats and libraries).",
    discussion: "Prints the same line as 'vault --version'. It needs no vault and reads nothing.",
    parameters: [
      .flag(
        "--json",
        help: """
          Print JSON: version, envelopes (seals: the format written, opens: the formats read), manifests \
          (writes, reads), libraries (openssl, sqlite: as the libraries loaded at run time name themselves; null \
          when one does not).
          """)
    ],
    usesHome: false)

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.version(arguments)
    return ExitCode.success.rawValue
  }
}
