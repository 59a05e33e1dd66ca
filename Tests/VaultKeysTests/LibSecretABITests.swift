import Foundation
import VaultTestSupport
import XCTest

/// Sources/CLibSecret declares what it uses of libsecret, GIO and GLib itself, without their
/// headers (it loads the library with dlopen). This compiles those declarations beside the real
/// headers, as Debian installs them, and checks every constant and both structure layouts.
final class LibSecretABITests: XCTestCase {
  func testTheLoadersConstantsAndLayoutsAreTheRealHeaders() throws {
    let temporary = TemporaryDirectory()
    let flags = try Spawn.run("/usr/bin/env", ["pkg-config", "--cflags", "libsecret-1"])
    XCTAssertEqual(flags.status, 0, "pkg-config and libsecret-1-dev (tools/setup.sh installs both): \(flags.error)")
    let constants = [
      ("SECRET_SCHEMA_NONE", "VAULT_SECRET_SCHEMA_NONE"),
      ("SECRET_SCHEMA_ATTRIBUTE_STRING", "VAULT_SECRET_SCHEMA_ATTRIBUTE_STRING"),
      ("SECRET_SEARCH_ALL", "VAULT_SECRET_SEARCH_ALL"),
      ("SECRET_SEARCH_LOAD_SECRETS", "VAULT_SECRET_SEARCH_LOAD_SECRETS"),
      ("SECRET_SERVICE_OPEN_SESSION", "VAULT_SECRET_SERVICE_OPEN_SESSION"),
      ("SECRET_COLLECTION_NONE", "VAULT_SECRET_COLLECTION_NONE"),
      ("G_BUS_TYPE_SESSION", "VAULT_G_BUS_TYPE_SESSION"),
      ("G_DBUS_CALL_FLAGS_NONE", "VAULT_G_DBUS_CALL_FLAGS_NONE"),
      ("G_IO_ERROR_CANCELLED", "VAULT_G_IO_ERROR_CANCELLED"),
      ("G_IO_ERROR_TIMED_OUT", "VAULT_G_IO_ERROR_TIMED_OUT"),
      ("G_DBUS_ERROR_SERVICE_UNKNOWN", "VAULT_G_DBUS_ERROR_SERVICE_UNKNOWN"),
      ("G_DBUS_ERROR_NAME_HAS_NO_OWNER", "VAULT_G_DBUS_ERROR_NAME_HAS_NO_OWNER"),
      ("G_DBUS_ERROR_NO_REPLY", "VAULT_G_DBUS_ERROR_NO_REPLY"),
      ("G_DBUS_ERROR_TIMEOUT", "VAULT_G_DBUS_ERROR_TIMEOUT"),
      ("G_DBUS_ERROR_TIMED_OUT", "VAULT_G_DBUS_ERROR_TIMED_OUT"),
      ("G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND", "VAULT_G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND"),
    ]
    let layouts = [
      "sizeof(VaultGError) == sizeof(GError)", "offsetof(VaultGError, domain) == offsetof(GError, domain)",
      "offsetof(VaultGError, code) == offsetof(GError, code)",
      "offsetof(VaultGError, message) == offsetof(GError, message)",
      "sizeof(((VaultGError *)0)->domain) == sizeof(GQuark)", "sizeof(VaultGList) == sizeof(GList)",
      "offsetof(VaultGList, data) == offsetof(GList, data)", "offsetof(VaultGList, next) == offsetof(GList, next)",
      "offsetof(VaultGList, prev) == offsetof(GList, prev)", "sizeof(int) == sizeof(gboolean)",
      "sizeof(ptrdiff_t) == sizeof(gssize)", "sizeof(size_t) == sizeof(gsize)",
    ]
    let program =
      """
      #include <libsecret/secret.h>
      #include <gio/gio.h>
      #include <stddef.h>
      #include "abi.h"
      #include "CLibSecret.h"

      """
      + constants.map { "_Static_assert(\($0.1) == \($0.0), \"\($0.1)\");" }.joined(separator: "\n") + "\n"
      + layouts.map { "_Static_assert(\($0), \"\($0)\");" }.joined(separator: "\n") + "\n"
    let source = temporary.sub("abi.c")
    try program.write(toFile: source, atomically: true, encoding: .utf8)
    let loader = packageRoot() + "/Sources/CLibSecret"
    let arguments =
      ["clang", "-fsyntax-only", "-std=c11", "-I", loader, "-I", loader + "/include"]
      + flags.outputText.split(separator: " ").map { String($0).trimmingCharacters(in: .whitespacesAndNewlines) }
      .filter { !$0.isEmpty } + [source]
    let compiled = try Spawn.run("/usr/bin/env", arguments)
    XCTAssertEqual(compiled.status, 0, compiled.error)

    // The check can fail: a wrong value is caught.
    try program.replacingOccurrences(
      of: "#include \"CLibSecret.h\"",
      with: "#include \"CLibSecret.h\"\n#undef VAULT_G_IO_ERROR_TIMED_OUT\n#define VAULT_G_IO_ERROR_TIMED_OUT 23"
    )
    .write(toFile: source, atomically: true, encoding: .utf8)
    let wrong = try Spawn.run("/usr/bin/env", arguments)
    XCTAssertNotEqual(wrong.status, 0)
    XCTAssertTrue(wrong.error.contains("VAULT_G_IO_ERROR_TIMED_OUT"), wrong.error)
  }
}
