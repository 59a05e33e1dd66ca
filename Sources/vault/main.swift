import Foundation
import VaultCLI

exit(VaultCommandLine(terminal: .standard()).run(Array(CommandLine.arguments.dropFirst())))
