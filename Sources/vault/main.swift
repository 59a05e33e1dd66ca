import Foundation
import VaultCLI

// The arguments as the kernel passed them: `CommandLine.arguments` repairs bytes that are not
// UTF-8 to U+FFFD, which would make different `--context` values equal.
let arguments = (1..<Int(CommandLine.argc)).map { index -> [UInt8] in
  guard let argument = CommandLine.unsafeArgv[index] else { return [] }
  return Array(UnsafeRawBufferPointer(start: argument, count: strlen(argument)))
}
exit(VaultCommandLine(terminal: .standard()).run(rawArguments: arguments))
