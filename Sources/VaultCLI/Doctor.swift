import Foundation
import Outbox
import Vault
import VaultBackup
import VaultKeys
import VaultQueue

/// What `vault doctor` found: one line per part a vault depends on. Its JSON form is part of the
/// command-line contract (`doctor --json`).
struct DoctorReport: Encodable {
  /// How a part stands. `notNeeded`: unavailable, but this vault does not use it.
  enum Status: String, Encodable {
    case ok, warning, problem
    case notNeeded = "not-needed"
    case notChecked = "not-checked"
  }

  struct Check: Encodable {
    let name: String
    let status: Status
    let detail: String
  }

  var checks: [Check] = []
  var healthy = true
  var result = ""

  mutating func add(_ name: String, _ status: Status, _ detail: String) {
    checks.append(Check(name: name, status: status, detail: detail))
    if status == .problem { healthy = false }
  }
}

extension VaultCommandLine {
  /// Checks each part a vault depends on and says, for each, whether it works and why not.
  func doctor(_ arguments: Arguments) -> Int32 {
    let report = examine(home: homePath(arguments), arguments)
    if arguments.flags.contains("--json") {
      terminal.printBlock((try? JSON.encode(report)) ?? "{}")
    } else {
      terminal.print("vault doctor")
      for check in report.checks {
        terminal.print(
          "  " + (check.name + ":").padding(toLength: 16, withPad: " ", startingAt: 0) + " " + check.detail)
      }
      terminal.print("Result: \(report.result)")
      let text = report.checks.map(\.detail).joined(separator: "\n") + "\n" + report.result
      if let note = homeNote(after: text, home: arguments.home) { terminal.print(note) }
    }
    return (report.healthy ? ExitCode.success : ExitCode.failure).rawValue
  }

  /// Looks at everything first (the manifest decides which store matters), then reports in the
  /// order an operator reads it: the session bus and Secret Service, the keyfile store, the vault.
  private func examine(home: String, _ arguments: Arguments) -> DoctorReport {
    var report = DoctorReport()
    let inspected = Result { try Vault.inspection(home: home, resolver: keyStores) }
    let manifest = try? inspected.get().manifest
    let usesKeyfile = manifest?.store.kind == .keyfile

    let probed = SecretServiceStore(timeout: secretServiceTimeout)
    let secretService = probed.probe()
    let notNeeded = " (not needed: this vault keeps its keys in a keyfile)"
    switch secretService {
    case .available:
      report.add("session bus", .ok, "ok")
      report.add("secret service", .ok, "ok (provider answering, default collection unlocked)")
      if let warning = probed.transfer?.warning { report.add("transfer", .warning, "warning: \(warning)") }
    case .unavailable(let reason):
      // A problem only for a vault that keeps its keys there; before a vault exists, a note.
      let unusable: DoctorReport.Status = usesKeyfile ? .notNeeded : manifest == nil ? .warning : .problem
      // For a keyfile vault the reason is told, not asked of the operator: nothing needs fixing
      // (`help doctor` promises why the other store does not work).
      if case .noSessionBus = reason {
        report.add("session bus", unusable, "not available: \(reason)" + (usesKeyfile ? notNeeded : ""))
        report.add("secret service", .notChecked, "not checked (no session bus)")
      } else {
        report.add("session bus", .ok, "ok")
        report.add("secret service", unusable, "not usable: \(reason)" + (usesKeyfile ? notNeeded : ""))
      }
    }
    report.add("keyfile store", .ok, keyfileDirectoryReport())
    // Only sending needs libcurl: without it a vault works, and delivery waits.
    if let reason = HTTPClient.unavailableReason {
      report.add(
        "http client", .warning,
        "warning: libcurl (libcurl.so.4) could not be loaded (\(reason)): telemetry and outbox delivery cannot send "
          + "until it is installed (Debian: libcurl4); the records wait")
    } else {
      report.add("http client", .ok, "ok (libcurl loaded)")
    }

    switch inspected {
    case .failure(let error):
      let (message, _) = Self.describe(error)
      if case ManifestFile.Failure.missing = error, Self.holdsOnlyALock(home) {
        report.add("manifest", .notChecked, message)
        report.result =
          "no vault here yet; `vault init` would use "
          + (secretService == .available ? "the Secret Service." : "a keyfile.")
        report.healthy = true
        do {
          try Vault.checkNewHome(home)
        } catch {
          // A directory others use: init refuses it (and says why).
          report.result = "no vault here, and `vault init` would refuse this directory: \(Self.describe(error).0)"
        }
      } else if case ManifestFile.Failure.missing = error {
        // `init` would refuse this home: the files left in it are likely a vault's that lost its manifest.
        report.add("manifest", .problem, message)
        report.result =
          "the home holds files but no manifest: if a vault lived here, `vault recover` writes its manifest back "
          + "from its key store's copy."
      } else {
        report.add("manifest", .problem, message)
        report.result = "the manifest cannot be read; see above."
      }
      return report
    case .success(let inspection):
      let (manifest, integrity) = (inspection.manifest, inspection.integrity)
      let keyfile = manifest.store.keyfile ?? ""
      let keyfileMissing = manifest.store.kind == .keyfile && !KeyfileStore(path: keyfile).exists
      let (status, detail) = Self.manifestCheck(
        integrity: keyfileMissing ? "unverified: its keyfile, which holds the integrity key, is not found" : integrity)
      report.add("manifest", status, detail + " (\(ManifestFile.path(home: home)), vault \(manifest.vaultID))")
      let warnings = Vault.statusWarnings(manifest, home: home)
      if !warnings.contains(.sealsFormatOne(version: manifest.activeVersion)) {
        report.add("envelopes", .ok, "format 2 (key version \(manifest.activeVersion), suite 2)")
      }
      for warning in warnings {
        let name =
          switch warning {
          case .sealsFormatOne: "envelopes"
          case .unfinishedKeyfileMove: "keyfile"
          default: "rotation"
          }
        report.add(name, .warning, "warning: \(warning)" + Advice.suffix(for: warning))
      }
      let running = MergeLock.holder(home: home)
      for container in manifest.containers {
        if let keyring = manifest.keyringID,
          let found = try? Self.replacement(at: container.path, registered: container.id, keyring: keyring)
        {
          report.add("containers", .warning, "warning: " + Self.replacedWarning(container.path, found: found))
        }
        let bundles = (try? QueueContainer.unfinishedMerges(path: container.path)) ?? []
        if !bundles.isEmpty {
          report.add(
            "containers", .warning,
            "warning: " + Self.mergeUnfinishedWarning(container.path, bundles, running: running))
        }
      }
      examineBackup(manifest, home: home, homeID: inspection.homeIdentity, into: &report)
      examineStore(
        manifest, home: home, keyfileMissing: keyfileMissing, secretService: secretService, arguments,
        into: &report)
      return report
    }
  }

  /// Whether `home` is missing, empty or holds only the lock file and the manifest temporaries a
  /// killed `init` leaves: a home `init` would take.
  static func holdsOnlyALock(_ home: String) -> Bool {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: home)) ?? []
    return entries.allSatisfy { $0 == "vault.lock" || $0.hasPrefix("manifest.json.tmp-") }
  }

  /// The manifest line from `Vault.inspect`'s integrity: what was checked (read, and its MAC under
  /// the key store's integrity key) and, when the MAC was not checked, that it was not and why.
  /// Only a checked MAC is "ok": "ok (unverified)" read as both.
  static func manifestCheck(integrity: String) -> (DoctorReport.Status, String) {
    if integrity == "verified" {
      return (.ok, "read and authenticated (its MAC matches the key store's integrity key)")
    }
    if integrity.hasPrefix("verified ") {
      return (.ok, "read and authenticated " + integrity.dropFirst("verified ".count))
    }
    if integrity == "legacy" {
      return (.warning, "read, not authenticated: written before manifests had a MAC (opening the vault adds one)")
    }
    let why = integrity.hasPrefix("unverified: ") ? String(integrity.dropFirst("unverified: ".count)) : integrity
    return (.warning, "read, not authenticated: \(why)")
  }

  private func examineStore(
    _ manifest: Manifest, home: String, keyfileMissing: Bool, secretService: SecretServiceProbe,
    _ arguments: Arguments, into report: inout DoctorReport
  ) {
    switch manifest.store.kind {
    case .keyfile:
      let path = manifest.store.keyfile ?? ""
      if keyfileMissing {
        report.add(
          "keyfile", .problem,
          "not found: \(path) (this vault's keys were there; restore the file from a backup — no new key is made)")
      } else {
        let store = KeyfileStore(path: path)
        do {
          let versions = try store.storedVersions(keyring: manifest.keyringID!)
          let mode = store.mode.map { "0" + String($0, radix: 8) } ?? "unreadable"
          // What loading it checked: owner, mode, and that it parses as this vault's keyfile; the
          // active key itself is loaded by "active key".
          report.add(
            "keyfile", .ok,
            "read: private to you (\(path), mode \(mode)), a keyfile of this vault, holds key version"
              + (versions.count == 1 ? " " : "s ") + versions.map(String.init).joined(separator: ", "))
          if let warning = KeyfileStore.volatileWarning(for: path) {
            report.add("keyfile", .warning, "warning: " + warning)
          }
        } catch {
          report.add("keyfile", .problem, sentence(for: error, arguments))
        }
      }
      report.add("vault store", .ok, "keyfile")
    case .secretService:
      report.add("vault store", secretService == .available ? .ok : .problem, "secret-service")
    case .memory:
      report.add("vault store", .ok, "memory")
    }
    if report.healthy {
      do {
        let vault = try Vault.open(home: home, resolver: keyStores)
        let active = vault.manifest.activeVersion
        // Opening finishes a stopped rotation's pending version: the lines above show the manifest
        // as it was before (an operator would otherwise read "key version 1" and "version 2").
        let madeActive =
          active == manifest.activeVersion
          ? ""
          : "; opening the vault just made the stopped rotation's new version active: the lines above show "
            + "version \(manifest.activeVersion), as it was"
        report.add("active key", .ok, "readable (version \(active)\(madeActive))")
        if manifest.store.kind == .secretService {
          let strays = (try? vault.versionsWithStrayKeys()) ?? []
          for stray in strays {
            report.add(
              "key items", .warning,
              "warning: the Secret Service holds \(stray.items) items for key version \(stray.version) of this "
                + "vault, not all of them its key; vault reads the one its manifest records (by its key-check value) "
                + "and ignores the others, which it did not store. Something else wrote items with this vault's "
                + "attributes: find out what. "
                + "Removing items by hand may remove vault's own; retiring the version removes them all")
          }
          if let memory = try? vault.keysKeptOnlyInMemory(), !memory.versions.isEmpty || memory.integrityKey {
            let keys =
              memory.versions.map { "key version \($0)" } + (memory.integrityKey ? ["the integrity key"] : [])
            report.add(
              "key persistence", .warning,
              "warning: " + keys.joined(separator: ", ") + " of this vault "
                + (keys.count == 1 ? "is" : "are") + " kept only in the Secret Service's session collection, which "
                + "is held in memory and emptied when the session ends or the keyring daemon restarts: every record "
                + "sealed under it would be lost. Back the vault up now (`vault backup --to DIR`) and restore the "
                + "bundle into a keyfile (`vault restore BUNDLE --into NEW_HOME --store keyfile`)")
          }
        }
      } catch {
        report.add("active key", .problem, sentence(for: error, arguments))
      }
    } else {
      report.add("active key", .notChecked, "not readable while its store is unusable")
    }
    report.result =
      report.healthy ? "the vault's key store works." : "the vault's keys cannot be read; fix the item above."
  }
}

extension VaultCommandLine {
  /// Whether a new keyfile could be kept in the default keyfile directory.
  func keyfileDirectoryReport() -> String {
    let directory = KeyfileStore.defaultDirectory(environment: terminal.environment)
    var info = stat()
    guard stat(directory, &info) == 0 else { return "usable (\(directory) would be created 0700)" }
    do {
      try SecureFile.checkPrivate(directory, info: info, isDirectory: true)
      return "usable (\(directory) is private to you)"
    } catch {
      return "not usable: \(Self.describe(error).0)"
    }
  }
}

/// `vault doctor`.
enum DoctorCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "doctor", abstract: "Explain which key store works here and why the other does not.",
    discussion: """
      Checks the D-Bus session, the Secret Service provider and its default collection (locked or not, \
      kept in memory only or on disk, answering in time), the keyfile's permissions and owner, whether libcurl loads (delivery needs it; a \
      warning without it), the manifest (read, and authenticated by its MAC when the key store can be read; \
      otherwise a warning says why not), which envelope format the active key version seals (a warning for \
      format 1), an unfinished rotation (a warning), whether the newest backup bundle of this vault is intact and holds every key \
      version still in use (a warning when none does), whether the active key can be read, and, in the Secret \
      Service, items holding other keys for a version in use (a warning: vault reads its own by the key-check \
      value its manifest records) and keys held only in the session collection, which is kept in memory (a \
      warning: back up and restore into a keyfile before the session ends). A store this \
      vault does not \
      use is reported, not held against it (a keyfile vault needs no session bus); a keyfile that is gone is \
      "not found" with its path. Exits 1 when the vault exists but its key cannot be read.
      """,
    parameters: [
      .flag(
        "--json",
        help: """
          Print JSON: checks (name, status: ok, warning, problem, not-needed or not-checked, detail), healthy \
          and result.
          """)
    ])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 { cli.doctor(arguments) }
}
