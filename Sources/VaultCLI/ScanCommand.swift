import Foundation
import Outbox
import Vault
import VaultKeys
import VaultScan

extension VaultCommandLine {
  /// `vault scan PATH… [--canary TEXT]… [--canary-file FILE] [--verify] [--json]`: exit 0 clean and
  /// complete, 1 findings, 2 could not scan or could not read everything (the library does the
  /// walk and the container audit; this is arguments, progress and printing).
  /// The most a canary file may hold: a million canaries of 16 bytes.
  static let canaryFileLimit = 16 << 20

  func scan(_ arguments: Arguments) throws -> Int32 {
    var canaries = arguments.lists["--canary"] ?? []
    if let file = arguments.options["--canary-file"] {
      // Read, then decoded: a file that reads but is not UTF-8 was reported with whatever errno an
      // earlier call had left ("No such file or directory"), as if it could not be read.
      let read: [UInt8]?
      do {
        read = try FileIO.readAll(file, limit: Self.canaryFileLimit)
      } catch FileError.inputUnreadable(_, let code) {
        throw ScanError.unreadable(path: file, errno: code)
      }
      guard let bytes = read else { throw FileError.canaryFileTooLarge(path: file, limit: Self.canaryFileLimit) }
      guard let text = String(validating: bytes, as: UTF8.self) else { throw FileError.canaryFileNotText(path: file) }
      // A byte-order mark (Notepad, PowerShell 5 write one) is no part of the first canary: kept,
      // that canary was searched with it and never found (an outside review).
      let unmarked = text.unicodeScalars.first == "\u{FEFF}" ? String(text.unicodeScalars.dropFirst()) : text
      // Split on line feeds by scalar ("\r\n" is one Character in Swift) and drop a trailing CR.
      let listed = unmarked.unicodeScalars.split(separator: "\n").map { line in
        var line = String(String.UnicodeScalarView(line))
        if line.hasSuffix("\r") { line.removeLast() }
        return line
      }.filter { !$0.isEmpty }
      // A file with no canary (empty, or blank lines: a script whose list came out empty) would
      // scan for nothing and say clean (an outside review): refused, as a short canary is.
      guard !listed.isEmpty else {
        throw UsageError(message: "the canary file \(file) holds no canary (one a line)", command: "scan")
      }
      canaries += listed
    }
    // Shorter canaries would match everywhere and mean nothing: refuse rather than ignore them.
    if let short = canaries.first(where: { $0.utf8.count < 4 }) {
      throw UsageError(message: "canaries must be at least 4 bytes (got one of \(short.utf8.count))", command: "scan")
    }
    // The per-file decompression budget: MiB on top of 64 times the file's size, and seconds.
    var budget = InflateBudget()
    if let mebibytes = arguments.wholeNumber("--inflate-limit") { budget.baseBytes = mebibytes << 20 }
    if let seconds = arguments.number("--inflate-seconds") { budget.seconds = seconds }
    // With --verify, the vault is opened first: a home that cannot be opened scans nothing.
    let vault: Vault?
    do {
      vault = arguments.flags.contains("--verify") ? try openVault(arguments) : nil
    } catch let error as KeyStoreError {
      // Its keys cannot be read now (a locked keyring, a missing keyfile): nothing was scanned.
      terminal.error(error.description)
      return ExitCode.couldNotRun.rawValue
    }
    var report: ScanReport
    // Each directory level of the walk holds a descriptor: the soft open-file limit (often 1,024)
    // is raised to the hard one, so deep trees are read rather than cut at half the soft limit.
    ProcessResources.raiseOpenFileLimit(to: 1 << 16)
    do {
      var scanner = Scanner(canaries: canaries, verifyingWith: vault)
      // This process opens no container but the audit's own (through SQLite, closed before the
      // file it read): where a seccomp filter denies the scan a table of its own, it may share this one.
      scanner.sharesProcessDescriptorTable = true
      scanner.inflateBudget = budget
      let progress = ProgressLine(terminal, json: arguments.flags.contains("--json"))
      scanner.progress = { files, bytes in
        progress.update("scanning: " + counted(files, "file") + String(format: ", %.1f MB", Double(bytes) / 1e6))
      }
      defer { progress.finish() }
      if progress.isEnabled { Self.clearingOnStop(progress) }
      report = try scanner.scan(arguments.positionals)
    } catch let error as ScanError {
      terminal.error(error.description)
      return ExitCode.couldNotRun.rawValue
    } catch let error as KeyStoreError where vault != nil {
      // --verify could not read the vault's keys (a locked keyring, a missing keyfile): the scan
      // did not run to the end, which is not a finding.
      terminal.error(error.description)
      return ExitCode.couldNotRun.rawValue
    }
    if arguments.flags.contains("--json") {
      terminal.printBlock(try JSON.encode(report))
    } else {
      terminal.print(
        "Scanned \(counted(report.filesScanned, "file")) (\(report.bytesScanned) bytes) for \(counted(canaries.count, "canary", plural: "canaries")): "
          + (report.clean ? "no findings" : counted(report.findings.count, "finding")))
      for finding in report.findings {
        terminal.print(
          "  \(finding.file) @\(finding.offset)  \(finding.region)  \(finding.detector)"
            + (finding.encoding.map { " (\($0))" } ?? "") + "  \(finding.excerpt)")
      }
      for skipped in report.skipped { terminal.print("  skipped \(skipped.path): \(skipped.reason)") }
      for incomplete in report.incomplete {
        terminal.print("  not fully inspected \(incomplete.path): \(incomplete.reason)")
      }
      if let verify = report.verify {
        terminal.print(
          "Verified \(verify.opened + verify.failed) envelopes: \(verify.opened) open, \(verify.failed) do not")
        for (container, counts) in verify.containers.sorted(by: { $0.key < $1.key }) {
          let versions = counts.sorted { $0.key < $1.key }.map { "v\($0.key) \($0.value)" }.joined(separator: ", ")
          terminal.print("  \(container): \(versions.isEmpty ? "no records" : versions)")
        }
      }
    }
    // A report that could not be written (a full disk, a closed pipe) told its reader nothing:
    // exit 2, as for an audit that could not finish, not 1, which says findings were listed
    // (the error about standard output follows).
    if terminal.outputFailure() != nil { return ExitCode.couldNotRun.rawValue }
    // Findings come first (exit 1); otherwise an audit that could not read everything has not
    // proven anything about what it missed (exit 2), and only a complete one is clean (exit 0).
    if !report.clean { return ExitCode.failure.rawValue }
    if !report.complete {
      terminal.note(
        "Error: the audit is incomplete: \(report.incomplete.count) path(s) not fully inspected"
          + (arguments.flags.contains("--json") ? " (see \"incomplete\")" : " (listed above)"))
      return ExitCode.couldNotRun.rawValue
    }
    return ExitCode.success.rawValue
  }
}

extension VaultCommandLine {
  /// Takes over Ctrl-C, SIGTERM and SIGHUP for a command that shows `progress`: the line is
  /// cleared, then the process ends by the signal as it would have (a shell sees an interrupt,
  /// not an exit status). The work is left as it is: only what a command draws is undone.
  ///
  /// The signal is handled on `StopSignals`' dispatch queue, not in a signal handler, and its
  /// default action is put back first: a second Ctrl-C ends the process at once even if the
  /// first one's clearing waits (a terminal stopped with Ctrl-S blocks the write of a draw, which
  /// holds the line's lock).
  ///
  /// - Parameter progress: the command's progress line (shown: `isEnabled`).
  static func clearingOnStop(_ progress: ProgressLine) {
    StopSignals.handle { signal in
      Glibc.signal(signal, SIG_DFL)
      progress.clearForSignal()
      endBy(signal)
    }
  }

  /// Ends the process by `signal` (whose default action the caller has put back), so a shell
  /// running a script sees an interrupt, not an exit status. Called on `StopSignals`' queue.
  ///
  /// libdispatch's threads, this one too, block signals: this thread unblocks `signal` and raises
  /// it, so its default action ends the process here and now. Sent to the process instead, it
  /// waited for the main thread to take it, which a main thread held by a tracer, or gone, did not
  /// do within 10 s (a CI run ended a stopped scan with exit 130). 128 + the signal only if the
  /// process still runs after 10 s.
  ///
  /// - Parameter signal: the stop signal that was received.
  static func endBy(_ signal: Int32) -> Never {
    var only = sigset_t()
    sigemptyset(&only)
    sigaddset(&only, signal)
    pthread_sigmask(SIG_UNBLOCK, &only, nil)
    raise(signal)
    kill(getpid(), signal)
    for _ in 0..<100 { usleep(100_000) }
    _exit(128 + signal)
  }

  /// For the main thread of a command whose `StopSignals` handler undoes its work (backup's
  /// removes the work directory): when a stop signal has come, the error the work then met is
  /// the handler's doing, and the handler ends the process by the signal; this waits for it (at
  /// most 10 s, then returns so the error is reported). Does nothing when no signal came.
  static func awaitStopIfStopping() {
    guard StopSignals.received != nil else { return }
    for _ in 0..<100 { usleep(100_000) }
  }
}

/// `vault scan`.
enum ScanCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "scan", abstract: "Look through files for plaintext that should not be on disk.",
    discussion: """
      Walks the given files and directories once (symlinks are reported, never followed; FIFOs, sockets and \
      devices are reported, never opened; names are bytes, shown with \\xHH escapes) and reports: canaries \
      (known strings) as UTF-8, UTF-16LE/BE, base64, hex, JSON-escaped or URL-encoded; key material (vault \
      keyfiles, PEM private keys, and files or NAME= lines that hold 32 random-looking bytes raw, in hex or in base64); and, \
      judged by what a file is, an app's plaintext records where only ciphertext belongs: JSON text, key=value \
      records and sentences in SQLite pages, WAL frames, journals, core dumps and unknown binary files, and as \
      rare lines in logs. Compressed data is decoded to its end and searched the same way: gzip, zlib (any \
      window), deflated ZIP entries, xz, bzip2 and zstd, nested up to four layers, and base64 text of them; \
      line-wrapped base64 is decoded too. Each finding names the file, the offset and the region: for SQLite \
      files live-cell, free-block, unallocated, freelist-page, overflow-page or other-page; wal-frame or \
      stale-wal-frame; journal; compressed-stream. Canaries are also looked for in every path, symlink target \
      and extended attribute (region file-name, symlink-target or xattr), and shown in paths as \\{canary}. \
      Excerpts are redacted.

      With --verify, every envelope in vault's queue containers among the scanned files is opened with the \
      vault of the home: each one that does not open is a finding (tampered, another keyring, unknown or \
      retired key), and records are counted per key version per container - the audit before retiring a key. \
      Without --verify, envelope columns are still checked without keys: each value must be an envelope of the \
      container's keyring whose ciphertext looks random.

      On a terminal, a scan that runs longer than a second shows its progress on standard error (never in a \
      pipe or with --json).
      """,
    parameters: [
      .argument("PATH", .oneOrMore, .file, help: "Files and directories to scan."),
      .repeatable("--canary", "TEXT", help: "A string that must not appear (repeatable; at least 4 bytes)."),
      .option("--canary-file", "FILE", .file, help: "One canary per line (LF or CRLF)."),
      .flag("--verify", help: "Open every envelope in vault containers (needs the vault's keys)."),
      .option(
        "--inflate-limit", "MIB", .wholeNumber(1...1_048_576, unit: "MiB"),
        help: "Decompressed bytes allowed per file, in MiB, on top of 64 times the file's size (1 to 1048576, "
          + "default 512)."),
      .option(
        "--inflate-seconds", "S", .number(1...86400, unit: "seconds"),
        help: "Time allowed per file for decompressing (1 to 86400, default 60)."),
      .flag(
        "--json",
        help: """
          Print JSON: files_scanned, bytes_scanned, findings (file, offset, region, detector, encoding, \
          excerpt), skipped (path, reason), incomplete (path, reason), complete, and with --verify: verify \
          (containers: key version -> records, opened, failed, unreadable).
          """),
    ],
    exitCodes: """
      0 nothing found and everything read, 1 findings, 2 could not scan or the audit is incomplete: a path, a \
      directory or the canary file is unreadable, a container cannot be read, a compressed stream is cut off by \
      the budget, corrupt, encrypted, too deep or in a format not decoded (LZ4, 7z, lzip), a file changed size \
      while read, --verify could not open the vault, or the report could not be written to standard output. What \
      was not read is listed.
      """)

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 { try cli.scan(arguments) }
}
