import Foundation
import VaultKeys
import XCTest

@testable import Vault

/// Library errors read as sentences through `localizedDescription`, carry stable codes, and give
/// no command-line advice (the CLI adds its own; see VaultCLI's Advice).
final class ErrorCodeTests: XCTestCase {
  let samples: [any CodedError] = [
    EnvelopeError.authenticationFailed, EnvelopeError.keyCommitmentMismatch, EnvelopeError.truncated(format: 2),
    EnvelopeError.emptyContext, VaultError.alreadyExists(home: "/h"),
    VaultError.keyMissing(version: 1, store: .keyfile),
    KeyStoreError.locked, KeyStoreError.sessionCollection, KeyStoreError.noProvider,
    KeyStoreError.noSessionBus(detail: "d"),
    KeyStoreError.keyfileInsideData(path: "/h/k", dataDirectory: "/h"),
    KeyStoreError.keyfileTooLarge(path: "/k", byteCount: 2, limit: 1),
    KeyStoreError.wrongOwner(path: "/k", owner: 1000, expected: 0), CryptoError.randomUnavailable,
    ManifestFile.Failure.wrongOwner(path: "/h/manifest.json", owner: 1000, expected: 0),
    ManifestFile.Failure.openToOthers(path: "/h/manifest.json", mode: 0o100664),
    ManifestFile.Failure.unsafeHome(home: "/h", mode: 0o40770, owner: 0, expected: 0),
    ManifestFile.Failure.symbolicLink(path: "/h/manifest.json", target: "/m"),
    ManifestFile.Failure.notAFile(path: "/h/manifest.json", kind: "a FIFO"),
    RotationError.compromiseIncomplete(retired: [1], kept: ["x"]), ManifestFile.Failure.missing(home: "/h"),
    RotationError.containerNotRegistered(path: "/c"), RotationError.containerStillPresent(path: "/c"),
    ProcessResources.Shortage.openFiles(limit: 1, needed: 2, alreadyOpen: 1),
    VaultError.restoreUnfinished(home: "/h", vaultID: "0011223344556677"),
    VaultError.restoreStoreDiffers(home: "/h", store: .keyfile, keyfile: "/k"), VaultError.homeMissing(home: "/h"),
    VaultError.keyfileMissing(path: "/k"), VaultError.sharedDirectory(home: "/h", mode: 0o41777, owner: 0),
    VaultError.compromisedVersionActive(version: 1), KeyStoreError.keyfileMissing(path: "/k"),
    VaultError.stoppedMoveUnclear(path: "/k", reason: "Permission denied"),
  ]

  func testLocalizedDescriptionIsTheDescription() {
    for error in samples {
      XCTAssertEqual(error.localizedDescription, error.description, error.code)
      XCTAssertFalse(error.localizedDescription.contains("The operation could not be completed"))
    }
    XCTAssertEqual(
      (EnvelopeError.authenticationFailed as any Error).localizedDescription,
      EnvelopeError.authenticationFailed.description)
  }

  func testCodesAreStableDomainAndKind() {
    XCTAssertEqual(EnvelopeError.authenticationFailed.code, "envelope.authentication-failed")
    XCTAssertEqual(EnvelopeError.truncated(format: 1).code, "envelope.truncated")
    XCTAssertEqual(KeyStoreError.locked.code, "key-store.locked")
    XCTAssertEqual(ManifestFile.Failure.wrongOwner(path: "/m", owner: 1, expected: 0).code, "manifest.wrong-owner")
    XCTAssertEqual(ManifestFile.Failure.openToOthers(path: "/m", mode: 0o100666).code, "manifest.open-to-others")
    XCTAssertEqual(
      ManifestFile.Failure.unsafeHome(home: "/h", mode: 0o40777, owner: 0, expected: 0).code, "manifest.unsafe-home")
    XCTAssertEqual(VaultError.keyMissing(version: 3, store: .secretService).code, "vault.key-missing")
    XCTAssertEqual(ManifestFile.Failure.missing(home: "/x").code, "manifest.missing")
    XCTAssertEqual(ManifestFile.Failure.symbolicLink(path: "/m", target: nil).code, "manifest.symbolic-link")
    XCTAssertEqual(ManifestFile.Failure.notAFile(path: "/m", kind: "a socket").code, "manifest.not-a-file")
    let codes = samples.map(\.code)
    XCTAssertEqual(Set(codes).count, codes.count, "one code per case")
    for code in codes { XCTAssertNotNil(code.range(of: #"^[a-z-]+\.[a-z0-9-]+$"#, options: .regularExpression), code) }
  }

  /// A key missing from the Secret Service may be held by another daemon than the one answering:
  /// one D-Bus started by itself after the session's died reads other keyring files when the
  /// bus's environment differs (fault injection saw "missing" after a SIGKILL). The text says so;
  /// a keyfile's does not.
  func testAKeyMissingFromTheSecretServiceNamesADaemonStartedByDBus() {
    let missing = VaultError.keyMissing(version: 3, store: .secretService).description
    XCTAssertTrue(missing.contains("such as one D-Bus started by itself after yours stopped"), missing)
    XCTAssertTrue(missing.hasSuffix("otherwise restore the key store from a backup (no new key was made)"), missing)
    XCTAssertFalse(VaultError.keyMissing(version: 3, store: .keyfile).description.contains("D-Bus"))
  }

  /// The way to retire a vault gone for good names its id, ready to paste (it said `vault-id ID`).
  func testOrphanedKeysNameTheItemsToClearByTheirVaultID() {
    let text = VaultError.orphanedKeys(home: "/h", vaultIDs: ["0011223344556677", "8899aabbccddeeff"]).description
    XCTAssertTrue(
      text.hasSuffix("(secret-tool clear vault-id 0011223344556677; secret-tool clear vault-id 8899aabbccddeeff)"), text
    )
  }

  func testLibraryTextsNameNoCommand() {
    for error in samples {
      for advice in ["`vault ", "--keyfile", "--store", "vault init", "vault rotate", "vault keyfile"] {
        XCTAssertFalse(error.description.contains(advice), "\(error.code): \(error.description)")
      }
    }
  }
}
