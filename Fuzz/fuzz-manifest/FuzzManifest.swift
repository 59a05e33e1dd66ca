// Fuzz target: `manifest.json` bytes through `ManifestFile.parse` (the MAC split, the JSON decode,
// the format and invariant checks). A manifest that parses must verify (or not) without trapping,
// and signing it again must give a file that parses. See Fuzz/README.md.
import Foundation
import FuzzSupport
import VaultCrypto
import VaultKeys

enum ManifestTarget {
  /// The all-zero test integrity key (not a secret: it signs only fuzz seeds).
  static let key: SymmetricKey = {
    let zero = [UInt8](repeating: 0, count: SymmetricKey.byteCount)
    return try! zero.withUnsafeBytes { try SymmetricKey(copying: $0) }
  }()

  static func run(_ input: UnsafeRawBufferPointer) {
    let signed: ManifestFile.Signed
    do {
      signed = try ManifestFile.parse(Array(input), path: "manifest.json")
    } catch {
      expect(error is ManifestFile.Failure, error)
      return
    }
    do {
      _ = try signed.isAuthentic(under: key)
      let again = try ManifestFile.sign(signed.manifest, key: key)
      _ = try ManifestFile.parse(again, path: "manifest.json")
    } catch ManifestFile.Failure.tooLarge {
      // Re-encoding may grow a file near the limit (escapes, pretty-printing).
    } catch {
      fatalError("a manifest that parsed did not survive signing again: \(error)")
    }
  }

  /// Writes manifests made by the real encoder (format 3 signed with the test key, and a
  /// format-1 one without a MAC) as seeds into `directory`.
  static func writeSeeds(into directory: String) throws {
    let keyring = KeyringID(bytes: Array(0..<8))!
    var manifest = Manifest(
      vaultID: keyring, store: StoreDescriptor(kind: .keyfile, keyfile: "/home/u/.local/share/vault/keys"),
      createdAt: "2026-01-01T00:00:00Z", home: "/home/u/.vault")
    try Data(try ManifestFile.sign(manifest, key: key)).write(to: URL(fileURLWithPath: "\(directory)/pending"))
    manifest.setState(.active, of: 1)
    manifest.versions.append(KeyVersionRecord(version: 2, state: .decryptOnly, createdAt: "2026-02-01T00:00:00Z"))
    manifest.highestVersion = 2
    manifest.containers = [
      ContainerRecord(path: "/srv/queue.db", id: "c1"), ContainerRecord(path: "/srv/other.db", id: nil),
    ]
    manifest.externalSealVersions = [1]
    manifest.resealing = 2
    try Data(try ManifestFile.sign(manifest, key: key)).write(to: URL(fileURLWithPath: "\(directory)/containers"))
    let legacy = """
      {"format":1,"vault_id":"0001020304050607","store":{"kind":"memory"},"active_version":1,\
      "versions":[{"version":1,"state":"active","created_at":"2025-01-01T00:00:00Z"}],\
      "containers":["/srv/queue.db"],"newer_field":{"a":[1,2.5,null,true,"x"]}}
      """
    try Data(legacy.utf8).write(to: URL(fileURLWithPath: "\(directory)/format1"))
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  ManifestTarget.run(UnsafeRawBufferPointer(start: data, count: size))
  return 0
}

@main enum Main {
  static func main() throws { exit(try FuzzMain.run(fuzz, seeds: ManifestTarget.writeSeeds)) }
}
