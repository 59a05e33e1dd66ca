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

  /// Whether `name` is exactly what `SecureFile.atomicWrite` names a temporary file of `fileName`:
  /// `fileName`, `.tmp-` and 12 lowercase hex digits. Anything else in a home is someone's file.
  static func isTemporaryName(_ name: String, of fileName: String = Manifest.fileName) -> Bool {
    let prefix = fileName + ".tmp-"
    guard name.hasPrefix(prefix) else { return false }
    let suffix = name.utf8.dropFirst(prefix.utf8.count)
    return suffix.count == temporarySuffixLength
      && suffix.allSatisfy {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
      }
  }

  /// Whether the entry `name` in `home` is a manifest temporary file a killed write left: the
  /// name `isTemporaryName` accepts, a regular file (a symlink is never followed) owned by
  /// this user. Such a file never became the manifest, so no vault depends on it.
  static func isStaleManifestTemporary(_ name: String, home: String) -> Bool {
    guard isTemporaryName(name) else { return false }
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

  /// Whether the keyfile at `path` was left by an `init` that was killed before it stored a key,
  /// so that a new `init` may replace it: nothing was ever sealed under it and it protects nothing.
  ///
  /// True only when all of this holds; anything else may be a vault's only copy of its keys, and
  /// is refused as before:
  /// - it is a private regular file of this user, not a symlink, with one link, in a private
  ///   directory (`SecureFile.read`'s checks for keyfiles), and it parses as a keyfile (any vault id);
  /// - it holds no key version at all;
  /// - its only records are the integrity key and, optionally, the manifest copy, and no record of
  ///   a name this release does not know;
  /// - a manifest copy, when there, verifies under the file's own integrity key, names the file's
  ///   vault, and lists only pending versions: the manifest of a vault whose first key was never
  ///   stored. (A vault that ever had an active key and now has none lost its keys; that keyfile
  ///   is evidence to keep, not debris.)
  ///
  /// Reads only; never throws (a file that cannot be read is not known to be debris).
  static func isKeyfileLeftByKilledInit(_ path: String) -> Bool {
    guard let file = try? SecureFile.read(path, requirePrivate: true) else { return false }
    // The vault id sits at bytes 4..<12 of both formats; the parse below checks all the rest.
    guard let keyring = file.withUnsafeBytes({ $0.count >= 12 ? KeyringID(bytes: Array($0[4..<12])) : nil }),
      let contents = try? file.withUnsafeBytes({ try KeyfileContents(parsing: $0, path: path, expecting: keyring) })
    else { return false }
    guard contents.keys.isEmpty else { return false }
    let known: Set<String> = [KeyStoreRecord.integrityKey.rawValue, KeyStoreRecord.manifestMirror.rawValue]
    guard Set(contents.records.keys).isSubset(of: known) else { return false }
    guard let mirrorBytes = contents.records[KeyStoreRecord.manifestMirror.rawValue] else { return true }
    guard let integrityBytes = contents.records[KeyStoreRecord.integrityKey.rawValue],
      let integrityKey = try? SymmetricKey(storage: integrityBytes),
      let mirror = try? ManifestFile.parse(mirrorBytes.withUnsafeBytes { Array($0) }, path: path),
      (try? mirror.isAuthentic(under: integrityKey)) == true,
      mirror.manifest.vaultID == keyring.hex
    else { return false }
    guard !mirror.manifest.versions.isEmpty, mirror.manifest.versions.allSatisfy({ $0.state == .pending }) else {
      return false
    }
    // The killed init may have got as far as its manifest: then that home is a vault whose next
    // open finishes the pending version with this keyfile, and it is not debris (review). Its
    // home is the one the copy names.
    if let home = mirror.manifest.home, ManifestFile.exists(home: home) { return false }
    return true
  }

  /// Removes a keyfile `isKeyfileLeftByKilledInit` accepted, after asking again (it was first
  /// asked before the home's lock was taken), so that the new vault's keyfile can be made there.
  ///
  /// - Throws: `VaultError.keyfileExists` when the file is no longer such debris;
  ///   `KeyStoreError.io` when it cannot be removed or its directory cannot be synced.
  static func removeKeyfileLeftByKilledInit(_ path: String) throws {
    guard isKeyfileLeftByKilledInit(path) else { throw VaultError.keyfileExists(path: path) }
    guard unlink(path) == 0 || errno == ENOENT else {
      throw KeyStoreError.io(path: path, operation: "unlink", errno: errno)
    }
    try SecureFile.syncDirectory((path as NSString).deletingLastPathComponent)
  }
}
