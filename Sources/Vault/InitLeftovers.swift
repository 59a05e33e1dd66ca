import Foundation
import VaultCrypto
import VaultKeys

/// What an `init` that was killed part-way leaves behind, told apart from anything that could
/// belong to a vault, so that running `init` again is not refused over its own debris.
///
/// A killed `init` has sealed nothing: its only key version is still pending (no record was ever
/// sealed under a pending version). What it can leave is a manifest temporary file in the home
/// (killed between writing the temporary and renaming it into place) and a keyfile that holds
/// the integrity key, perhaps a copy of that pending-only manifest, and no key. Both protect
/// nothing; everything else stays in the way of `init`.
extension Vault {
  /// The length of the random suffix `SecureFile.atomicWrite` gives its temporary files: 6 bytes
  /// in lowercase hex.
  static let temporarySuffixLength = 12

  /// Whether `name` is exactly what `SecureFile.atomicWrite` names a manifest's temporary file:
  /// `manifest.json.tmp-` and 12 lowercase hex digits. Anything else in a home is someone's file.
  static func isManifestTemporaryName(_ name: String) -> Bool {
    let prefix = Manifest.fileName + ".tmp-"
    guard name.hasPrefix(prefix) else { return false }
    let suffix = name.utf8.dropFirst(prefix.utf8.count)
    return suffix.count == temporarySuffixLength
      && suffix.allSatisfy {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
      }
  }

  /// Whether the entry `name` in `home` is a manifest temporary file a killed write left: the
  /// name `isManifestTemporaryName` accepts, a regular file (a symlink is never followed) owned by
  /// this user. Such a file never became the manifest, so no vault depends on it.
  static func isStaleManifestTemporary(_ name: String, home: String) -> Bool {
    guard isManifestTemporaryName(name) else { return false }
    var info = stat()
    return lstat(home + "/" + name, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_uid == geteuid()
  }

  /// Removes the manifest temporary files killed writes left in `home`. The caller holds the
  /// home's lock, so no write in progress is touched (every manifest write holds it).
  ///
  /// - Throws: `KeyStoreError.io` when one cannot be removed, or the directory cannot be synced.
  static func removeStaleManifestTemporaries(home: String) throws {
    var removed = false
    for name in (try? FileManager.default.contentsOfDirectory(atPath: home)) ?? []
    where isStaleManifestTemporary(name, home: home) {
      let path = home + "/" + name
      guard unlink(path) == 0 || errno == ENOENT else {
        throw KeyStoreError.io(path: path, operation: "unlink", errno: errno)
      }
      removed = true
    }
    // The home must not come back after a crash still holding them, or the next init is refused.
    if removed { try SecureFile.syncDirectory(home) }
  }
}
