import Foundation
import VaultTestSupport
import XCTest

/// Sources/CLibSecret declares what it uses of libsecret, GIO and GLib itself, without their
/// headers (it loads the library with dlopen). Compiled with VAULT_CLIBSECRET_REAL_TYPES and the
/// real headers, as Debian installs them, loader.c asserts that each function pointer it calls
/// through has the real function's type, each constant its real value, and GError and GList their
/// real layout. This compiles it so, and checks that a wrong type, value or layout is caught.
final class LibSecretABITests: XCTestCase {
  private static let loader = packageRoot() + "/Sources/CLibSecret"

  /// Compiles `directory`'s loader.c against the real headers, with `directory`'s abi.h and
  /// include/CLibSecret.h (loader.c includes them by quotes); the compiler's result.
  private func compile(_ directory: String) throws -> Spawned {
    let flags = try Spawn.run("/usr/bin/env", ["pkg-config", "--cflags", "libsecret-1"])
    XCTAssertEqual(flags.status, 0, "pkg-config and libsecret-1-dev (tools/setup.sh installs both): \(flags.error)")
    let headerPaths = flags.outputText.split(whereSeparator: \.isWhitespace).map(String.init)
    return try Spawn.run(
      "/usr/bin/env",
      ["clang", "-fsyntax-only", "-std=c11", "-DVAULT_CLIBSECRET_REAL_TYPES", "-I", directory + "/include"]
        + ["-I", directory, "-I", packageRoot() + "/Sources/CDynamicLibrary/include"] + headerPaths
        + [directory + "/loader.c"])
  }

  func testTheLoadersTypesConstantsAndLayoutsAreTheRealHeaders() throws {
    let compiled = try compile(Self.loader)
    XCTAssertEqual(compiled.status, 0, compiled.error)

    // Each kind of mistake fails the compile, naming what is wrong.
    let temporary = TemporaryDirectory()
    let files = try ["loader.c", "abi.h", "include/CLibSecret.h"].map {
      ($0, try String(contentsOfFile: Self.loader + "/" + $0, encoding: .utf8))
    }
    let mistakes = [
      // secret_value_new's length is a gssize, not an int.
      (
        "loader.c", "ptrdiff_t length, const char *content_type);", "int length, const char *content_type);",
        "secret_value_new"
      ),
      // g_variant_get's first argument and secret_item_delete_sync's result type.
      (
        "loader.c", "void (*g_variant_get)(VaultGVariant *variant,", "void (*g_variant_get)(const char *variant,",
        "g_variant_get"
      ),
      ("loader.c", "int (*secret_item_delete_sync)(", "long (*secret_item_delete_sync)(", "secret_item_delete_sync"),
      (
        "abi.h", "#define VAULT_G_IO_ERROR_TIMED_OUT 24", "#define VAULT_G_IO_ERROR_TIMED_OUT 23",
        "G_IO_ERROR_TIMED_OUT"
      ),
      ("include/CLibSecret.h", "  int code;   ", "  long code;  ", "GError.code"),
    ]
    for (file, from, to, named) in mistakes {
      let copy = temporary.sub(named)
      try FileManager.default.createDirectory(atPath: copy + "/include", withIntermediateDirectories: true)
      for (name, text) in files {
        var text = text
        if name == file {
          XCTAssertEqual(text.components(separatedBy: from).count, 2, "exactly one \(from) in \(file)")
          text = text.replacingOccurrences(of: from, with: to)
        }
        try text.write(toFile: copy + "/" + name, atomically: true, encoding: .utf8)
      }
      let wrong = try compile(copy)
      XCTAssertNotEqual(wrong.status, 0, named)
      XCTAssertTrue(wrong.error.contains("static assertion failed") && wrong.error.contains(named), wrong.error)
    }
  }
}
