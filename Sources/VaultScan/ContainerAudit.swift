import Foundation
import Vault
import VaultKeys
import VaultQueue

/// The container half of a scan: every SQLite database the walker reads is also read as a vault
/// queue container, on the descriptor the walker opened, over one read-only connection.
///
/// Without keys, each value in the envelope column must be an envelope (format 1 or 2) of the container's
/// own keyring whose ciphertext looks random; one that is not (plaintext written there, a truncated
/// or foreign record) is an `envelope-column` finding, and so is each row of the envelope tails
/// table that no record joins (`unjoined-tail`). With a vault (`--verify`), every envelope is
/// also opened with the context the queue sealed it with, and each one that does not open is an
/// `envelope-verify` finding. A database that cannot be read this way leaves the audit incomplete.
extension Scanner {
  /// Audits the database whose open descriptor's link under /proc is `link` (shown as `path`);
  /// `live` says whether a -wal or -shm file sits next to it. Read without them (`immutable`, no
  /// files created), a database a writer started on meanwhile can read as torn: when the audit
  /// fails that way and `sidecarsAppeared` now finds a -wal or -shm file, it is read again through
  /// the WAL rather than reported unreadable.
  /// - Throws: what the vault throws opening an envelope other than `EnvelopeError` (a key store
  ///   that cannot be read): the audit cannot go on without it.
  func audit(
    link: String, path: String, live: Bool, sidecarsAppeared: () -> Bool = { false }, report: inout ScanReport
  ) throws {
    guard !live else { return try auditOnce(link: link, path: path, live: true, report: &report) }
    let before = report
    try auditOnce(link: link, path: path, live: false, report: &report)
    if report.incomplete.count > before.incomplete.count, sidecarsAppeared() {
      report = before
      try auditOnce(link: link, path: path, live: true, report: &report)
    }
  }

  private func auditOnce(link: String, path: String, live: Bool, report: inout ScanReport) throws {
    var counts: [String: Int] = [:]
    var fatal: (any Error)?
    do {
      let reader = try ContainerReader(link: link, path: path, live: live)
      guard let keyring = reader.keyringID else {
        // Not a vault container, unless the vault registered this file: then its metadata was
        // removed, and its records cannot be checked (an outside review: `--verify` said clean,
        // with 0 envelopes verified, while a record held plaintext).
        if let vault, let registered = Self.registration(of: link, in: vault.manifest) {
          report.add(
            Finding(
              file: path, offset: 0, region: "live-cell", detector: "envelope-verify",
              encoding: "replaced-container",
              excerpt: "registered as container \(registered.id ?? "of this vault"), holds no vault metadata"))
          report.verify?.failed += 1
        }
        return
      }
      // A file at a registered container's path must hold that container: the records of another
      // (a file swapped in, its meta edited to claim the id) are not what the vault registered,
      // however well they open, and rotation and the queue refuse such a file too.
      if let vault, let registered = Self.registration(of: link, in: vault.manifest), let expected = registered.id,
        reader.containerID != expected
      {
        report.add(
          Finding(
            file: path, offset: 0, region: "live-cell", detector: "envelope-verify", encoding: "replaced-container",
            excerpt: "registered as container \(expected), holds \(reader.containerID ?? "none")"))
        report.verify?.failed += 1
        return
      }
      try reader.forEachEnvelope { id, queue, version, envelope in
        if let problem = Self.columnProblem(envelope, keyring: keyring) {
          report.add(
            Finding(
              file: path, offset: 0, region: "live-cell", detector: "envelope-column", encoding: problem,
              excerpt: "record \(maskingCanaries(id)) in queue \(maskingCanaries(queue))"))
        }
        guard let vault else { return }
        counts[String(version), default: 0] += 1
        do {
          _ = try vault.open(
            envelope, context: QueueContainer.context(containerID: reader.containerID ?? "", queue: queue, id: id))
          report.verify?.opened += 1
        } catch let error as EnvelopeError {
          report.verify?.failed += 1
          report.add(
            Finding(
              file: path, offset: 0, region: "live-cell", detector: "envelope-verify",
              encoding: String(describing: error).components(separatedBy: ":").first,
              excerpt: "record \(maskingCanaries(id)) in queue \(maskingCanaries(queue)), key version \(version)"))
        } catch {
          fatal = error
          throw error
        }
      }
      // Bytes in the table of envelope tails that are no record's tail: not checked as envelopes
      // above, so each is a finding (no excerpt of it; vault itself never leaves one).
      try reader.forEachUnjoinedTail { seq in
        report.add(
          Finding(
            file: path, offset: 0, region: "live-cell", detector: "envelope-column", encoding: "unjoined-tail",
            excerpt: "envelope tail row \(seq), joined to no record"))
      }
      if vault != nil { report.verify?.containers[path] = counts }
    } catch {
      if let fatal { throw fatal }
      // A corrupt or unreadable database must not hide what the rest of the scan found.
      report.incomplete.append(Skipped(path: path, reason: "envelope columns not checked: \(Self.kind(of: error))"))
      if vault != nil { report.verify?.unreadable += 1 }
    }
  }

  /// The registered container whose path is the open file whose link under /proc is `link` (same
  /// device and inode), if any.
  static func registration(of link: String, in manifest: Manifest) -> ContainerRecord? {
    var file = stat()
    guard stat(link, &file) == 0 else { return nil }
    return manifest.containers.first { container in
      var registered = stat()
      return stat(container.path, &registered) == 0 && registered.st_dev == file.st_dev
        && registered.st_ino == file.st_ino
    }
  }

  /// Why a value in the envelope column is not what a sealed record of `keyring` looks like, or nil.
  static func columnProblem(_ envelope: [UInt8], keyring: String) -> String? {
    do {
      let header = try Envelope.header(of: envelope)
      if header.keyring.hex != keyring { return "foreign-keyring" }
      return looksLowEntropy(envelope.dropFirst(Envelope.headerCount(format: header.format))) ? "low-entropy" : nil
    } catch EnvelopeError.truncated {
      return "truncated"
    } catch {
      return "not-an-envelope"
    }
  }

  /// Ciphertext has about as many distinct byte values as random data; text and padding do not.
  static func looksLowEntropy(_ bytes: ArraySlice<UInt8>) -> Bool {
    guard bytes.count >= 32 else { return false }
    let expected = 256 * (1 - pow(255.0 / 256.0, Double(bytes.count)))
    return Double(Set(bytes).count) < expected * 0.6
  }

  /// A container that could not be read, by kind (the path is listed beside it).
  static func kind(of error: any Error) -> String {
    switch error {
    case QueueError.corrupt: "corrupt (not a readable SQLite database)"
    case QueueError.busy: "locked by another process past the busy timeout"
    case QueueError.permissionDenied: "permission denied"
    case QueueError.tooManyOpenFiles: "too many open files"
    case QueueError.outOfMemory: "out of memory"
    case QueueError.cannotOpen(_, let reason): "cannot open (\(reason))"
    case QueueError.storage(_, let detail): "storage failure (\(detail))"
    case QueueError.unsafeDirectory, QueueError.ownedByOther, QueueError.openToOthers:
      "not read through its log: another user may write its directory, -wal or -shm"
    default: "unreadable (\(type(of: error)))"
    }
  }
}
