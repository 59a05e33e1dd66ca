import Foundation
import VaultKeys

/// Envelopes an application keeps itself (`seal`, `vault seal`): moving them to the active key
/// version, and releasing the pin that keeps an older version from retirement once none is left.
extension Vault {
  // MARK: - Re-sealing

  /// Re-seals an envelope made by `seal(_:context:)` under the active key version, so the version
  /// it was sealed under stops being needed for it.
  ///
  /// The envelope is opened under its own version and sealed again under the active one (a fresh
  /// nonce, the same context), pinning the active version as `seal` does. The new envelope is
  /// opened and compared with the plaintext before it is returned, so a caller that replaces the
  /// old envelope with it never loses the record. An envelope already under the active version
  /// is opened (to prove it and its context) and returned unchanged, byte for byte: compare the
  /// result with the input to tell the two apart. Nothing of the old version is released: once
  /// no envelope needs it any more, call `releaseSealPin(version:)`.
  ///
  /// - Parameters:
  ///   - envelope: the bytes `seal` returned (or a previous `reseal`), unchanged.
  ///   - context: the context it was sealed with; the new envelope is bound to the same one.
  /// - Returns: the envelope under the active version, or `envelope` itself when it already is.
  /// - Throws: what `open(_:context:)` throws when the envelope does not open (nothing is sealed
  ///   then); what `seal(_:context:)` throws when the active key cannot seal;
  ///   `VaultError.roundTripFailed` when the new envelope does not open to the same plaintext.
  public func reseal(_ envelope: [UInt8], context: String) throws -> [UInt8] {
    try reseal(envelope, context: Array(context.utf8))
  }

  /// Re-seals an envelope sealed with a context given as bytes (compared byte for byte).
  /// Otherwise the same as `reseal(_:context:)` with a `String` context.
  ///
  /// - Parameters:
  ///   - envelope: the bytes `seal` returned, unchanged.
  ///   - context: the context it was sealed with, byte for byte.
  /// - Returns: the envelope under the active version, or `envelope` itself when it already is.
  /// - Throws: as `reseal(_:context:)` with a `String` context.
  public func reseal(_ envelope: [UInt8], context: [UInt8]) throws -> [UInt8] {
    try envelope.withUnsafeBytes { try reseal($0, context: .app(context)) } ?? envelope
  }

  /// Re-seals an envelope held as `Data` (or any other `DataProtocol`). Otherwise the same as
  /// `reseal(_:context:)` with byte arrays.
  ///
  /// - Parameters:
  ///   - envelope: the bytes `seal` returned, unchanged.
  ///   - context: the context it was sealed with.
  /// - Returns: the envelope under the active version, or a copy of `envelope` when it already is.
  /// - Throws: as `reseal(_:context:)` with byte arrays.
  public func reseal(_ envelope: some DataProtocol, context: String) throws -> Data {
    let bytes = Array(envelope)
    return Data(try reseal(bytes, context: Array(context.utf8)))
  }

  /// Opens `envelope`, then seals its plaintext under the active version (pinned) and checks the
  /// result; nil when the envelope already is under the active version.
  private func reseal(_ envelope: UnsafeRawBufferPointer, context: EnvelopeContext) throws -> [UInt8]? {
    guard !context.isEmpty else { throw EnvelopeError.emptyContext }
    // Opened first, outside the lock: an envelope that does not open changes nothing, not even a pin.
    var plaintext = try open(envelope, context: context)
    defer { Self.overwrite(&plaintext) }
    let version = try Envelope.header(of: envelope).version
    let sealed = try plaintext.withUnsafeBytes { plaintext in
      try withActiveVersionPinned { active -> (UInt32, [UInt8])? in
        guard version != active else { return nil }
        return (active, try seal(plaintext, context: context, under: active))
      }
    }
    guard let (active, resealed) = sealed else { return nil }
    var check: [UInt8]
    do {
      check = try open(resealed, context: context)
    } catch {
      throw VaultError.roundTripFailed(version: active)
    }
    defer { Self.overwrite(&check) }
    guard check == plaintext else { throw VaultError.roundTripFailed(version: active) }
    return resealed
  }

  /// Overwrites a plaintext copy this type made before it is released (the caller's copies are
  /// the caller's to clear).
  private static func overwrite(_ bytes: inout [UInt8]) {
    bytes.withUnsafeMutableBytes { buffer in
      guard let base = buffer.baseAddress else { return }
      // Best effort, as for every plaintext in ordinary memory (SECURITY.md, "Crashes, core dumps and swap").
      _ = memset(base, 0, buffer.count)
    }
  }

  // MARK: - Releasing a pin

  /// Releases the pin that keeps `version` from retirement because `seal` used it: the next
  /// rotation retires it once no registered container holds records under it.
  ///
  /// Call it only when no envelope sealed outside containers still needs `version` (each was
  /// re-sealed with `reseal(_:context:)` or is no longer wanted): rotation cannot count such
  /// envelopes, and once it retires the version, those left under it can never be opened. This
  /// changes only the manifest (under the home's exclusive lock, so it waits for a rotation in
  /// progress); it never deletes a key itself.
  ///
  /// - Parameter version: the decrypt-only version to release.
  /// - Throws: `VaultError.sealPinOnActiveVersion` for the active version (every seal pins it
  ///   again), `.unknownVersion` for a version never made, `.versionRetired` for a retired one,
  ///   `.versionNotPinned` when nothing pins it; nothing is changed then. The manifest's and key
  ///   store's errors when the manifest cannot be read or written.
  public func releaseSealPin(version: UInt32) throws {
    try withManifestLock {
      let current = manifest
      if current.isRetired(version) { throw VaultError.versionRetired(version: version) }
      guard let record = current.record(version) else { throw VaultError.unknownVersion(version: version) }
      if version == current.activeVersion || record.state == .active {
        throw VaultError.sealPinOnActiveVersion(version: version)
      }
      guard current.externalSealVersions.contains(version) else {
        throw VaultError.versionNotPinned(version: version, pinned: current.externalSealVersions.sorted())
      }
      var next = current
      next.externalSealVersions.removeAll { $0 == version }
      try save(next)
    }
  }
}
