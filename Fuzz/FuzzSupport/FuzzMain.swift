import Foundation

/// The signature libFuzzer calls for each input (`LLVMFuzzerTestOneInput`).
public typealias FuzzTestOneInput = @convention(c) (UnsafePointer<UInt8>, Int) -> Int32

/// The `main` of every fuzz target.
///
/// Built by `tools/fuzz.sh` (`-sanitize=fuzzer,address -DFUZZING`), it hands the command line to
/// libFuzzer's driver. SwiftPM links an executable's own `main` under another name and points
/// `main` at it, so libFuzzer's `main` is never linked in; the driver is called from here instead.
/// Built normally, it runs each file named on the command line through the target once (to replay a
/// crash without the sanitizers, or under a debugger), and `--seeds DIR` writes the target's seeds.
public enum FuzzMain {
  /// Runs the target: the fuzzer, or the replay of the files named in the arguments.
  ///
  /// - Parameters:
  ///   - testOneInput: the target's `LLVMFuzzerTestOneInput`.
  ///   - seeds: writes the target's seed corpus into a directory, for targets whose seeds are made
  ///     by the library itself.
  /// - Returns: the process's exit code.
  public static func run(_ testOneInput: FuzzTestOneInput, seeds: ((String) throws -> Void)? = nil) throws -> Int32 {
    #if FUZZING
      var argc = CommandLine.argc
      var argv = CommandLine.unsafeArgv
      return llvmFuzzerRunDriver(&argc, &argv, testOneInput)
    #else
      let arguments = Array(CommandLine.arguments.dropFirst())
      if arguments.first == "--seeds" {
        guard let seeds, arguments.count == 2 else {
          FileHandle.standardError.write(Data("usage: --seeds DIR (for targets whose seeds are made by code)\n".utf8))
          return 64
        }
        try seeds(arguments[1])
        return 0
      }
      for path in arguments {
        // One byte more than the file, so an empty input still has a valid address.
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path))) + [0]
        _ = bytes.withUnsafeBufferPointer { testOneInput($0.baseAddress!, $0.count - 1) }
        print("ran \(path)")
      }
      return 0
    #endif
  }
}

#if FUZZING
  /// libFuzzer's entry point for a program that has its own `main` (compiler-rt, FuzzerDriver.cpp).
  @_silgen_name("LLVMFuzzerRunDriver")
  func llvmFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ testOneInput: FuzzTestOneInput
  ) -> Int32
#endif

/// Traps (the crash libFuzzer reports) when an input led to an error of a kind the API does not
/// promise.
///
/// - Parameters:
///   - condition: whether the error is one the API documents.
///   - error: the error, whose type (never its text, which may hold input) goes in the message.
public func expect(_ condition: Bool, _ error: any Error) {
  if !condition { fatalError("unexpected error type \(type(of: error))") }
}
