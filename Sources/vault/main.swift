import Foundation
import Vault
import VaultCLI

// Before anything can hold a secret: no core dumps, no register dumps on a crash, descriptors
// 0–2 held open (see ProcessHardening).
ProcessHardening.apply()
// A reader that goes away is an error the command reports (EPIPE, exit 1), not a silent death.
signal(SIGPIPE, SIG_IGN)
// The arguments as the kernel passed them: `CommandLine.arguments` repairs bytes that are not
// UTF-8 to U+FFFD, which would make different `--context` values equal.
let arguments = (1..<Int(CommandLine.argc)).map { index -> [UInt8] in
  guard let argument = CommandLine.unsafeArgv[index] else { return [] }
  return Array(UnsafeRawBufferPointer(start: argument, count: strlen(argument)))
}
exit(VaultCommandLine(terminal: .standard()).run(rawArguments: arguments))
