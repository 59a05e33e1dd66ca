/// Help texts (OVERVIEW / USAGE / OPTIONS / SUBCOMMANDS), pinned by golden tests.
enum Help {
  /// This release, as `vault version --json` gives it.
  static let versionNumber = "0.1.0"
  /// What `vault --version` and `vault version` print.
  static let version = "vault \(versionNumber)"

  static let root = """
    OVERVIEW: Keep an application's data sealed at rest under keys held in the desktop
    Secret Service or a 0600 keyfile.

    USAGE: vault [--home DIR] <subcommand> [options]

    OPTIONS:
      --home DIR              The vault's home directory (default: $VAULT_HOME, else
                              $XDG_DATA_HOME/vault, else ~/.local/share/vault).
      --version               Show the version.
      -h, --help              Show help information.

    SUBCOMMANDS:
      init                    Create a vault and its first key.
      status                  Show key versions, their states and where the keys live.
      seal                    Seal a file or standard input into an envelope.
      open                    Open an envelope from a file or standard input.
      rotate                  Make a new key version active and re-seal every queued record.
      queue                   Put records into a queue container and inspect it.
      container               List the registered containers, or forget one that is gone.
      telemetry               Log telemetry events and deliver them in gzip JSON batches.
      scan                    Look through files for plaintext that should not be on disk.
      doctor                  Explain which key store works here and why the other does not.
      keyfile                 Move a vault's keyfile out of the data it protects.
      backup                  Write a passphrase-protected backup bundle, or verify one.
      restore                 Restore a backup bundle into a new home.
      version                 Show the version, formats and library versions.
      help                    Show help for a subcommand.

    ENVIRONMENT:
      VAULT_HOME                    Same as --home.
      VAULT_SECRET_SERVICE_TIMEOUT  Seconds to wait for the Secret Service, 0.1 to 3600
                                    (default 5).

    EXIT CODES:
      0 success, 1 failure, 2 could not run (no vault, unreadable input), 64 usage error.

      See 'vault help <subcommand>' for detailed help.
    """

  static let commands: [String: (usage: String, text: String)] = [
    "backup": backupEntry, "restore": restoreEntry,
    "init": (
      "vault [--home DIR] init [--store auto|secret-service|keyfile] [--keyfile PATH] [--json]",
      """
      OVERVIEW: Create a vault and its first key.

      Refuses, changing nothing, when a vault already exists in the home, when the home holds
      other files, when the keyfile already exists, or when the Secret Service already holds
      keys for this home.

      USAGE: vault [--home DIR] init [--store auto|secret-service|keyfile] [--keyfile PATH] [--json]

      OPTIONS:
        --store STORE           Where keys live: 'secret-service', 'keyfile', or 'auto'
                                (the default): the Secret Service when it is reachable and
                                unlocked, else a keyfile. It says which it chose.
        --keyfile PATH          The keyfile to create (default:
                                $XDG_CONFIG_HOME/vault-keys/<vault id>.keys, outside the home).
        --json                  Print JSON: vault_id, home, store, keyfile (null unless a
                                keyfile), active_version.
        -h, --help              Show help information.
      """
    ),
    "status": (
      "vault [--home DIR] status [--json]",
      """
      OVERVIEW: Show key versions, their states and where the keys live.

      USAGE: vault [--home DIR] status [--json]

      OPTIONS:
        --json                  Print JSON: vault_id, home, store, active_version, versions
                                (version, state, created_at, age_days, retired_at, records, suite,
                                kept_because),
                                keyfile (path, mode), containers (path, records per key version),
                                external_seal_versions and warnings.
        -h, --help              Show help information.
      """
    ),
    "seal": (
      "vault [--home DIR] seal --context CTX [-o OUT] [--armor] [IN]",
      """
      OVERVIEW: Seal a file or standard input into an envelope.

      The context is authenticated with the record: the same context must be given to open it.
      A record holds at most 1 GiB; larger input is refused (exit 2) before it is read.
      IN must be a regular file (a FIFO, device or directory is refused, exit 2). OUT is written
      whole or not at all (a temporary file beside it, flushed, then linked), mode 0600, and is
      never replaced: an existing OUT is refused (exit 2), and so is OUT naming IN (exit 64).
      A binary envelope is not written to a terminal: give -o OUT or --armor.

      USAGE: vault [--home DIR] seal --context CTX [-o OUT] [--armor] [IN]

      ARGUMENTS:
        IN                      The plaintext to seal (default, or -: standard input).

      OPTIONS:
        --context CTX           What the record belongs to (non-empty, not secret).
        -o OUT                  Write the envelope to the new file OUT (default: standard output).
        --armor                 Write the envelope as text: base64 between BEGIN and END lines
                                (a record of at most 756 MiB).
        -h, --help              Show help information.
      """
    ),
    "open": (
      "vault [--home DIR] open --context CTX [-o OUT] [IN]",
      """
      OVERVIEW: Open an envelope from a file or standard input.

      Fails with a distinct error when the input is not an envelope, is truncated, belongs to
      another vault, names an unknown or retired key version, or does not authenticate (wrong
      context or modified bytes). Nothing is written on failure.
      An envelope holds at most 1 GiB of plaintext; larger input is refused (exit 2).
      Armoured input (from seal --armor) is detected and decoded strictly: damaged armour is
      an error (exit 1). IN and OUT are treated as by seal.

      USAGE: vault [--home DIR] open --context CTX [-o OUT] [IN]

      ARGUMENTS:
        IN                      The envelope, binary or armoured (default, or -: standard input).

      OPTIONS:
        --context CTX           The context the envelope was sealed with.
        -o OUT                  Write the plaintext to the new file OUT (default: standard output).
        -h, --help              Show help information.
      """
    ),
    "rotate": (
      "vault [--home DIR] rotate [--compromised [--yes] | --if-due [--max-age DAYS]] [--json]",
      """
      OVERVIEW: Make a new key version active and re-seal every queued record.

      First checks that every registered container is the one that was registered (refusing,
      with nothing changed, when one is missing, empty, replaced or another vault's). Then stores
      a new key, makes it active (older versions become decrypt-only), and visits the registered
      containers one at a time: raises the minimum seal version, re-seals every record (pending,
      in flight, parked, in review) under the new key, empties the container's log and counts
      records per version from the envelopes' own headers. An older version is retired (its key
      deleted) only when this run proved it unused everywhere and it never sealed with
      'vault seal'; otherwise it is kept and the report says why. Crash-safe: if it is
      interrupted, running it again finishes the same rotation.

      USAGE: vault [--home DIR] rotate [--compromised [--yes] | --if-due [--max-age DAYS]] [--json]

      OPTIONS:
        --if-due                Rotate only when the active version is older than the policy
                                (for a daily timer); otherwise say so and change nothing.
        --max-age DAYS          The policy for --if-due: 0 to 36500 days (default 90; 0 rotates
                                every time).
        --compromised           The old key leaked: retire every older version even when
                                'vault seal' envelopes need it (they become unreadable), purge
                                or keep records that do not open (asks first), and rebuild every
                                container so no old ciphertext stays in its files.
        --yes                   With --compromised: purge records that do not open without
                                asking (required when standard input is not a terminal).
        --json                  Print JSON: previous_version, new_version, resealed
                                (container -> records), retired, kept_versions, kept_because
                                (version -> reasons), compromised, purged, kept_unreadable,
                                seconds. With --if-due: rotated, schedule (active_version,
                                active_since, age_days, max_age_days, due) and rotation (the
                                report above, or null when not due).
        -h, --help              Show help information.
      """
    ),
    "doctor": (
      "vault [--home DIR] doctor [--json]",
      """
      OVERVIEW: Explain which key store works here and why the other does not.

      Checks the D-Bus session, the Secret Service provider and its default collection (locked
      or not, answering in time), the keyfile's permissions and owner, the manifest, and whether
      the active key can be read. A store this vault does not use is reported, not held against
      it (a keyfile vault needs no session bus); a keyfile that is gone is "not found" with its
      path. Exits 1 when the vault exists but its key cannot be read.

      USAGE: vault [--home DIR] doctor [--json]

      OPTIONS:
        --json                  Print JSON: checks (name, status: ok, warning, problem,
                                not-needed or not-checked, detail), healthy and result.
        -h, --help              Show help information.
      """
    ),
    "keyfile": (
      "vault [--home DIR] keyfile move PATH",
      """
      OVERVIEW: Move a vault's keyfile out of the data it protects.

      A keyfile inside the vault home or beside a registered container travels with every copy
      of the data, so vault refuses to use it there. This copies it to PATH (0600, in a private
      directory created 0700 when missing), checks the copy, records PATH in the manifest and
      then removes the old file. Run it again after an interruption.

      USAGE: vault [--home DIR] keyfile move PATH

      OPTIONS:
        -h, --help              Show help information.
      """
    ),
    "queue": (
      "vault [--home DIR] queue put|stats|list|resend [options]",
      """
      OVERVIEW: Put records into a queue container and inspect it.

      Without --container the vault's default container (queue.sqlite in the home) is used.
      Only 'put' creates a container (at a path that is not registered and holds nothing) and
      registers it so rotation covers it; 'stats' and 'list' only read, and a path with no
      container is an error. Nothing here prints record contents.

      USAGE: vault [--home DIR] queue put --queue NAME [--id UUID] [--container PATH] [--json] < payload
             vault [--home DIR] queue stats [--container PATH] [--json]
             vault [--home DIR] queue list [--queue NAME] [--state STATE] [--limit N] [--after ID]
                                         [--container PATH] [--json]
             vault [--home DIR] queue resend [--container PATH]
                   (--all | --state STATE | --queue NAME | ID...)

      ACTIONS:
        put                     Seal standard input and store it durably; prints 'stored ID' or
                                'duplicate ID' (a record with that id already exists).
        stats                   Records by state and key version, sealed bytes, the drop
                                ledger (cap, age, rejected, parked, undecryptable: every record
                                that ever left) and how many parked and review records were
                                resent since.
        list                    Ids, queues, states, attempts, key versions, sizes, error kinds,
                                oldest first, written as they are read (any size of queue).
        resend                  Return parked or review records to pending, with a fresh attempt
                                count: those named by id, or in bulk with exactly one of --all
                                (every parked and review record), --state parked|review, or
                                --queue NAME (that queue's parked and review records). Prints how
                                many were resent.

      OPTIONS:
        --queue NAME            The queue within the container.
        --id UUID               The record's id (default: a random UUID).
        --state STATE           pending, in_flight, parked or review (resend: parked or review).
        --all                   With resend: every parked and review record.
        --limit N               list: at most N records.
        --after ID              list: only records stored after record ID (the last id of a
                                page starts the next).
        --container PATH        Another container file.
        --json                  Print JSON (put: id, outcome, container, bytes; stats:
                                container, total, bytes, by_state, by_version, by_queue,
                                dropped, resent, minimum_seal_version).
        -h, --help              Show help information.
      """
    ),
    "container": (
      "vault [--home DIR] container list [--json] | forget PATH",
      """
      OVERVIEW: List the registered containers, or forget one that is gone.

      Rotation re-seals every registered container and refuses to run while one is missing or
      replaced. 'list' reads only the manifest and each file's envelope headers (no key, so it
      works while the keyring is locked). 'forget' removes the registration of a container the
      operator knows is gone for good; it is refused, changing nothing, while any file is at PATH.

      USAGE: vault [--home DIR] container list [--json]
             vault [--home DIR] container forget PATH

      ACTIONS:
        list                    Each container's path, container id, records per key version and
                                state: ok, missing (no file) or replaced (the file holds another
                                container id, another vault's container, or no container).
        forget                  Remove a missing container's registration. Its records are gone
                                for good; a version only it held is retired by the next rotation
                                (while another container is registered and no 'vault seal'
                                envelope needs it).

      OPTIONS:
        --json                  Print JSON (list): an array of path, id, state and records (key
                                version -> count, or null unless ok).
        -h, --help              Show help information.
      """
    ),
    "version": (
      "vault version [--json]",
      """
      OVERVIEW: Show the version, formats and library versions.

      Prints the same line as 'vault --version'. It needs no vault and reads nothing.

      USAGE: vault version [--json]

      OPTIONS:
        --json                  Print JSON: version, envelopes (seals: the format written,
                                opens: the formats read), manifests (writes, reads), libraries
                                (openssl, sqlite: as the libraries loaded at run time name
                                themselves; null when one does not).
        -h, --help              Show help information.
      """
    ),
    "telemetry": (
      "vault [--home DIR] telemetry log TYPE [--payload JSON] [--session ID] | flush|watch --endpoint URL [options]",
      """
      OVERVIEW: Log telemetry events and deliver them in gzip JSON batches.

      Events are sealed into the 'telemetry' queue of the vault's default container.

      USAGE: vault [--home DIR] telemetry log TYPE [--payload JSON] [--session ID] [--json]
             vault [--home DIR] telemetry flush --endpoint URL [--token-file FILE] [--ca-file FILE]
                   [--allow-insecure-http] [--json]
             vault [--home DIR] telemetry watch --endpoint URL [--token-file FILE] [--ca-file FILE]
                   [--allow-insecure-http] [--interval SECONDS]

      ACTIONS:
        log                     Seal one event durably; prints 'logged ID'.
        flush                   One delivery pass: every due event is sent at most once, in
                                batches of at most 256 KB gzip-compressed, to POST URL. 2xx
                                delivers; 429/503 wait for Retry-After; 408, 5xx and network
                                errors retry with backoff; 401 re-reads the token once, then
                                parks the batch and ends the pass, as 403 does; 413 splits the batch in halves (at most 16 extra
                                requests a pass), and a single event of 64 KB or less refused
                                with 413 retries with backoff (a larger one goes to review);
                                404 (a wrong endpoint) keeps the events pending, due at once,
                                and ends the pass; other 4xx go to review. Exit 1 when the
                                pass delivered nothing because of 401, 403 or 404 (a 401
                                without --token-file also warns to give one); else exit 0,
                                even if the server refused some batches.
        watch                   Run until stopped: a pass at start, every --interval seconds
                                (default 60; four times longer in power-saver or on a battery
                                at 20% or less), and at once when the default route, another
                                usable route, or an address on their interfaces changes
                                (rtnetlink), which also restarts the backoff of events that
                                waited for the network. Prints one line of counts per pass. SIGTERM, SIGINT or SIGHUP stops it: the
                                request in progress is abandoned, the events it claimed are
                                given back, and it exits 0.

      OPTIONS:
        --payload JSON          The event's payload, a JSON object (default {}), strict
                                RFC 8259; numbers are sent exactly as written (no rounding
                                through a double); duplicate keys are refused.
        --session ID            The session id stamped on the event (default 'cli').
        --endpoint URL          Where batches are POSTed (https://host/v1/telemetry/batch;
                                http:// only to a loopback address). Redirects are never
                                followed: a 3xx answer puts the batch's events in review.
        --token-file FILE       A file holding the bearer token (re-read after a 401).
        --ca-file FILE          Trust only the certificate authorities in this PEM file
                                (default: the system's).
        --allow-insecure-http   Allow a plain http:// endpoint on another machine (test
                                networks only: the token and events travel unencrypted).
        --interval SECONDS      The period of watch's timer, 0.1 to 86400 (default 60).
        --json                  Print JSON (log: id, type, session; flush: delivered,
                                retried, parked, rejected, pending, batches, token_refreshes,
                                auth_failures, not_found, error_kind).
        -h, --help              Show help information.
      """
    ),
    "scan": (
      "vault [--home DIR] scan PATH... [--canary TEXT]... [--canary-file FILE] [--verify] [--inflate-limit MIB] [--inflate-seconds S] [--json]",
      """
      OVERVIEW: Look through files for plaintext that should not be on disk.

      Walks the given files and directories once (symlinks are reported, never followed; FIFOs,
      sockets and devices are reported, never opened; names are bytes, shown with \\xHH escapes)
      and reports:
      canaries (known strings) as UTF-8, UTF-16LE/BE, base64, hex or JSON-escaped; key material
      (vault keyfiles, PEM private keys, and files or NAME= lines that hold 32 random-looking
      bytes raw, in hex or in base64); and, judged by what a file is, an app's plaintext records
      where only ciphertext belongs: JSON text, key=value records and sentences in SQLite pages,
      WAL frames, journals, core dumps and unknown binary files, and as rare lines in logs.
      Compressed data is decoded to its end and searched the same way: gzip, zlib (any window),
      deflated ZIP entries, xz, bzip2 and zstd, nested up to four layers, and base64 text of
      them; line-wrapped base64 is decoded too. Each finding names the file, the offset and the
      region: for SQLite files live-cell, free-block, unallocated, freelist-page, overflow-page
      or other-page; wal-frame or stale-wal-frame; journal; compressed-stream. Excerpts are
      redacted.

      With --verify, every envelope in vault's queue containers among the scanned files is
      opened with the vault of the home: each one that does not open is a finding (tampered,
      another keyring, unknown or retired key), and records are counted per key version per
      container - the audit before retiring a key. Without --verify, envelope columns are
      still checked without keys: each value must be an envelope of the container's keyring
      whose ciphertext looks random.

      USAGE: vault [--home DIR] scan PATH... [--canary TEXT]... [--canary-file FILE] [--verify]
                   [--inflate-limit MIB] [--inflate-seconds S] [--json]

      OPTIONS:
        --canary TEXT           A string that must not appear (repeatable; at least 4 bytes).
        --canary-file FILE      One canary per line (LF or CRLF).
        --verify                Open every envelope in vault containers (needs the vault's keys).
        --inflate-limit MIB     Decompressed bytes allowed per file, in MiB, on top of 64 times
                                the file's size (1 to 1048576, default 512).
        --inflate-seconds S     Time allowed per file for decompressing (1 to 86400, default 60).
        --json                  Print JSON: files_scanned, bytes_scanned, findings (file,
                                offset, region, detector, encoding, excerpt), skipped (path,
                                reason), incomplete (path, reason), complete, and with
                                --verify: verify (containers: key version -> records, opened,
                                failed).
        -h, --help              Show help information.

      EXIT CODES:
        0 nothing found and everything read, 1 findings, 2 could not scan or the audit is
        incomplete: a path, a directory or the canary file is unreadable, a container cannot be
        read, a compressed stream is cut off by the budget, corrupt, encrypted, too deep or in a
        format not decoded (LZ4, 7z, lzip), a file changed size while read, or --verify could not
        open the vault. What was not read is listed.
      """
    ),
    "help": (
      "vault help [<subcommand>]",
      """
      OVERVIEW: Show help for a subcommand.

      USAGE: vault help [<subcommand>]
      """
    ),
  ]
}
