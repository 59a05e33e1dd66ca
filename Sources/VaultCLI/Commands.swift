/// Every `vault` subcommand, in the order help lists them, and the overview around them.
package enum Commands {
  static let all: [any Subcommand.Type] = [
    InitCommand.self, StatusCommand.self, SealCommand.self, OpenCommand.self, ResealCommand.self,
    UnpinCommand.self, RotateCommand.self, QueueCommand.self, ContainerCommand.self, TelemetryCommand.self,
    ScanCommand.self, BackupCommand.self, RestoreCommand.self, RecoverCommand.self, DoctorCommand.self,
    KeyfileCommand.self,
    VersionCommand.self, CompletionCommand.self, HelpCommand.self,
  ]

  static let root = RootDeclaration(
    abstract:
      "Keep an application's data sealed at rest under keys held in the desktop Secret Service or a 0600 keyfile.",
    commands: all.map { $0.declaration },
    environment: [
      ("VAULT_HOME", "Same as --home."),
      ("VAULT_SECRET_SERVICE_TIMEOUT", "Seconds to wait for the Secret Service, 0.1 to 3600 (default 5)."),
    ],
    exitCodes: "0 success, 1 failure, 2 could not run (no vault, unreadable input), 64 usage error.")

  package static let parser = CommandParser(commands: root.commands)
  static let help = HelpRenderer(root: root)

  /// The type that runs subcommand `name`.
  static func type(named name: String) -> (any Subcommand.Type)? {
    all.first { $0.declaration.name == name }
  }
}

/// `vault help [SUBCOMMAND [ACTION]]` and `vault help --man`.
enum HelpCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "help", abstract: "Show help for a subcommand, or the whole manual page.",
    parameters: [
      .flag("--man", help: "Print the manual page for every subcommand, in roff (man -l -)."),
      .argument("SUBCOMMAND", .optional, .subcommand, help: "The subcommand to explain (default: the overview)."),
      .argument("ACTION", .optional, .action, help: "One of its actions, for a command that has them (queue put)."),
    ],
    constraints: [
      .requires("ACTION", "SUBCOMMAND"),
      .excludes("--man", "SUBCOMMAND", because: "the manual page covers every subcommand"),
    ],
    usesHome: false)

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    if arguments.flags.contains("--man") {
      cli.terminal.printBlock(ManPage(root: Commands.root).render())
      return ExitCode.success.rawValue
    }
    return cli.help(arguments.positionals)
  }
}

/// `vault completion bash|zsh|fish`.
enum CompletionCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "completion", abstract: "Print a shell completion script.",
    discussion: """
      bash: save it as ~/.local/share/bash-completion/completions/vault (or source it from ~/.bashrc). \
      zsh: save it as _vault in a directory of $fpath. \
      fish: save it as ~/.config/fish/completions/vault.fish. tools/install.sh installs all three.
      """,
    parameters: [.argument("SHELL", .required, .choice(Completions.shells), help: "bash, zsh or fish.")],
    usesHome: false)

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    let script = Completions(root: Commands.root).script(for: arguments.positionals[0])
    cli.terminal.printBlock(script)
    return ExitCode.success.rawValue
  }
}
