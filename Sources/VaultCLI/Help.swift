/// Help texts (OVERVIEW / USAGE / OPTIONS / SUBCOMMANDS), pinned by golden tests.
enum Help {
  static let version = "vault 0.1.0"

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
      seal                    Seal standard input into an envelope on standard output.
      open                    Open an envelope from standard input onto standard output.
      rotate                  Make a new key version active; older versions stay decrypt-only.
      doctor                  Explain which key store works here and why the other does not.
      help                    Show help for a subcommand.

    ENVIRONMENT:
      VAULT_HOME                    Same as --home.
      VAULT_SECRET_SERVICE_TIMEOUT  Seconds to wait for the Secret Service (default 5).

    EXIT CODES:
      0 success, 1 failure, 2 could not run (no vault, unreadable input), 64 usage error.

      See 'vault help <subcommand>' for detailed help.
    """

  static let commands: [String: (usage: String, text: String)] = [
    "init": (
      "vault [--home DIR] init [--store auto|secret-service|keyfile] [--keyfile PATH]",
      """
      OVERVIEW: Create a vault and its first key.

      Refuses, changing nothing, when a vault already exists in the home, when the home holds
      other files, when the keyfile already exists, or when the Secret Service already holds
      keys for this home.

      USAGE: vault [--home DIR] init [--store auto|secret-service|keyfile] [--keyfile PATH]

      OPTIONS:
        --store STORE           Where keys live: 'secret-service', 'keyfile', or 'auto'
                                (the default): the Secret Service when it is reachable and
                                unlocked, else a keyfile. It says which it chose.
        --keyfile PATH          The keyfile to create (default:
                                $XDG_CONFIG_HOME/vault-keys/<vault id>.keys, outside the home).
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
                                (version, state, created_at, retired_at, records), keyfile
                                (path, mode) and containers.
        -h, --help              Show help information.
      """
    ),
    "seal": (
      "vault [--home DIR] seal --context CTX < plaintext > envelope",
      """
      OVERVIEW: Seal standard input into an envelope on standard output.

      The context is authenticated with the record: the same context must be given to open it.

      USAGE: vault [--home DIR] seal --context CTX < plaintext > envelope

      OPTIONS:
        --context CTX           What the record belongs to (non-empty, not secret).
        -h, --help              Show help information.
      """
    ),
    "open": (
      "vault [--home DIR] open --context CTX < envelope > plaintext",
      """
      OVERVIEW: Open an envelope from standard input onto standard output.

      Fails with a distinct error when the input is not an envelope, is truncated, belongs to
      another vault, names an unknown or retired key version, or does not authenticate (wrong
      context or modified bytes). Nothing is written on failure.

      USAGE: vault [--home DIR] open --context CTX < envelope > plaintext

      OPTIONS:
        --context CTX           The context the envelope was sealed with.
        -h, --help              Show help information.
      """
    ),
    "rotate": (
      "vault [--home DIR] rotate [--json]",
      """
      OVERVIEW: Make a new key version active; older versions stay decrypt-only.

      Crash-safe: if it is interrupted, running it again finishes the same rotation. No
      version is retired yet, since envelopes kept outside registered containers cannot be
      counted.

      USAGE: vault [--home DIR] rotate [--json]

      OPTIONS:
        --json                  Print JSON: previous_version, new_version, resealed, retired,
                                kept_versions, seconds.
        -h, --help              Show help information.
      """
    ),
    "doctor": (
      "vault [--home DIR] doctor",
      """
      OVERVIEW: Explain which key store works here and why the other does not.

      Checks the D-Bus session, the Secret Service provider and its default collection (locked
      or not, answering in time), the keyfile's permissions and owner, the manifest, and whether
      the active key can be read. Exits 1 when the vault exists but its key cannot be read.

      USAGE: vault [--home DIR] doctor

      OPTIONS:
        -h, --help              Show help information.
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
