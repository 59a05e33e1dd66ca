import Foundation
import Vault
import VaultCLI

// Before anything can hold a secret: no core dumps, no register dumps on a crash, descriptors
// 0–2 held open (see ProcessHardening).
ProcessHardening.apply()
// A reader that goes away is an error the command reports (EPIPE, exit 1), not a silent death.
signal(SIGPIPE, SIG_IGN)
exit(VaultCommandLine(terminal: .standard()).run(Array(CommandLine.arguments.dropFirst())))
