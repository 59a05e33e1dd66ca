/// The declarations of `init`, `status` and `rotate` (their work is in VaultCommandLine.swift).

/// `vault init`.
enum InitCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "init", abstract: "Create a vault and its first key.",
    discussion: """
      Refuses, changing nothing, when a vault already exists in the home, when the home holds other files, when \
      the keyfile already exists, or when the Secret Service already holds keys for this home.
      """,
    parameters: [
      .option(
        "--store", "auto|secret-service|keyfile", .choice(["auto", "secret-service", "keyfile"]),
        help: """
          Where keys live: 'secret-service', 'keyfile', or 'auto' (the default): the Secret Service when it is \
          reachable and unlocked, else a keyfile. It says which it chose.
          """),
      .option(
        "--keyfile", "PATH", .file,
        help: "The keyfile to create (default: $XDG_CONFIG_HOME/vault-keys/<vault id>.keys, outside the home)."),
      .flag("--json", help: "Print JSON: vault_id, home, store, keyfile (null unless a keyfile), active_version."),
    ])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.initVault(arguments)
    return ExitCode.success.rawValue
  }
}

/// `vault status`.
enum StatusCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "status", abstract: "Show key versions, their states and where the keys live.",
    discussion: """
      Reads only the manifest and the containers' envelope headers: it works while the keyring is locked. \
      A container whose directory or files someone else may write is named on standard error and not \
      opened (its records show as not counted).
      """,
    parameters: [
      .flag(
        "--json",
        help: """
          Print JSON: vault_id, home, store, active_version, versions (version, state, created_at, age_days, \
          retired_at, records, suite, kept_because), keyfile (path, mode), containers (path, id, records per key \
          version), external_seal_versions, integrity, warnings, and last_backup (null when no backup is \
          known; else bundle, bundles, created_at, age_days, intact, problem, versions).
          """)
    ])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.status(arguments)
    return ExitCode.success.rawValue
  }
}

/// `vault rotate`.
enum RotateCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "rotate", abstract: "Make a new key version active and re-seal every queued record.",
    discussion: """
      First checks that every registered container is the one that was registered (refusing, with nothing \
      changed, when one is missing, empty, replaced or another vault's). Then stores a new key, makes it active \
      (older versions become decrypt-only), and visits the registered containers one at a time: raises the \
      minimum seal version, re-seals every record (pending, in flight, parked, in review) under the new key, \
      empties the container's log and counts records per version from the envelopes' own headers. An older \
      version is retired (its key deleted) only when this run proved it unused everywhere and it never sealed \
      with 'vault seal'; otherwise it is kept and the report says why. Crash-safe: if it is interrupted, running \
      it again finishes the same rotation (after --compromised, only 'rotate --compromised' finishes it, with \
      another fresh key: the one made before the stop may have leaked too).

      On a terminal, a rotation that runs longer than a second shows its progress on standard error (never in \
      a pipe or with --json).
      """,
    parameters: [
      .flag(
        "--compromised",
        help: """
          The old key leaked: retire every older version even when 'vault seal' envelopes need it (they become \
          unreadable), purge or keep records that do not open (asks first), and rebuild every container so no \
          old ciphertext stays in its files.
          """),
      .flag(
        "--yes",
        help: "With --compromised: purge records that do not open without asking (required when standard input "
          + "is not a terminal)."),
      .flag(
        "--if-due",
        help: "Rotate only when the active version is older than the policy, or a rotation did not finish (it "
          + "resumes it); otherwise say so and change nothing (for a daily timer)."),
      .option(
        "--max-age", "DAYS", .number(0...36500, unit: "days"),
        help: "The policy for --if-due: 0 to 36500 days (default 90; 0 rotates every time)."),
      .flag(
        "--json",
        help: """
          Print JSON: previous_version, new_version, resealed (container -> records), retired, kept_versions, \
          kept_because (version -> reasons), compromised, purged, kept_unreadable, seconds. With --if-due: \
          rotated, schedule (active_version, active_since, age_days, max_age_days, unfinished, due) and rotation (the report \
          above, or null when not due).
          """),
    ],
    constraints: [
      .requires("--yes", "--compromised"), .requires("--max-age", "--if-due"),
      .excludes("--compromised", "--if-due", because: "a leaked key is rotated now"),
    ])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.rotate(arguments)
    return ExitCode.success.rawValue
  }
}
