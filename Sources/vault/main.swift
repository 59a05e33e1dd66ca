import Foundation
import Vault
import VaultCLI

// Before anything can hold a secret: no core dumps, no register dumps on a crash, descriptors
// 0–2 held open (see ProcessHardening).
ProcessHardening.apply()
// A reader that goes away is an error the command reports (EPIPE, exit 1), not a silent death.
signal(SIGPIPE, SIG_IGN)
// On Linux the Swift runtime finds the arguments through /proc/self/maps; without /proc (a chroot
// or sandbox that does not mount it) or a descriptor to read it with, it finds none, not even the
// program's name, and the range below would trap.
guard CommandLine.argc >= 1 else {
  let message = Array(
    ("Error: could not read the command line: the Swift runtime reads it through /proc/self, which "
      + "could not be opened; mount /proc (or free a file descriptor) and run the command again\n").utf8)
  _ = message.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
  exit(2)
}
// The arguments as the kernel passed them: `CommandLine.arguments` repairs bytes that are not
// UTF-8 to U+FFFD, which would make different `--context` values equal.
let arguments = (1..<Int(CommandLine.argc)).map { index -> [UInt8] in
  guard let argument = CommandLine.unsafeArgv[index] else { return [] }
  return Array(UnsafeRawBufferPointer(start: argument, count: strlen(argument)))
}
let terminal = Terminal.standard()
VaultCommandLine.reportLockWaits(on: terminal)
exit(VaultCommandLine(terminal: terminal).run(rawArguments: arguments))
