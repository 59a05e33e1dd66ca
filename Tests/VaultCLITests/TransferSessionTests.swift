import Foundation
import VaultTestSupport
import XCTest

/// Issue 8, item 18: when libsecret falls back to a plain (unencrypted) transfer session, `doctor`
/// warns. gnome-keyring always offers an encrypted session, so a minimal provider that offers
/// only "plain" is built from C here and run on a private bus.
final class TransferSessionTests: XCTestCase {
  var temporary: TemporaryDirectory!
  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  func testDoctorWarnsWhenSecretsWouldCrossTheBusUnencrypted() throws {
    let provider = try buildPlainOnlyProvider()
    let bus = try PrivateBus(directory: temporary.path)
    defer { bus.stop() }
    let env = environment(["DBUS_SESSION_BUS_ADDRESS": bus.address, "DISPLAY": nil])
    let child = try Spawn.start(provider, [], environment: env)
    defer { _ = child.finish() }  // closing its stdin ends it
    try waitForOwner(of: "org.freedesktop.secrets", environment: env)

    let doctor = try vault(["--home", temporary.sub("home"), "doctor"], environment: env)
    XCTAssertTrue(doctor.outputText.contains("secret service:  ok"), doctor.outputText)
    XCTAssertTrue(doctor.outputText.contains("transfer:        warning:"), doctor.outputText)
    XCTAssertTrue(doctor.outputText.contains("unencrypted"), doctor.outputText)
  }

  func testDoctorDoesNotWarnWithAnEncryptedSession() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    let doctor = try vault(["--home", temporary.sub("home"), "doctor"])
    XCTAssertTrue(doctor.outputText.contains("secret service:  ok"), doctor.outputText)
    XCTAssertFalse(doctor.outputText.contains("transfer:"), doctor.outputText)
  }

  private func buildPlainOnlyProvider() throws -> String {
    let source = temporary.sub("plain-secret-service.c")
    let binary = temporary.sub("plain-secret-service")
    try Self.providerSource.write(toFile: source, atomically: true, encoding: .utf8)
    let tools = try Spawn.run("/bin/sh", ["-c", "command -v cc && pkg-config --exists gio-2.0"])
    try XCTSkipUnless(tools.status == 0, "a C compiler and GIO's headers (libglib2.0-dev) are needed")
    let built = try Spawn.run(
      "/bin/sh", ["-c", "cc -o \"$1\" \"$0\" $(pkg-config --cflags --libs gio-2.0)", source, binary])
    XCTAssertEqual(built.status, 0, built.error)
    return binary
  }

  private func waitForOwner(of name: String, environment: [String: String]) throws {
    for _ in 0..<100 {
      let owned = try Spawn.run(
        "/usr/bin/gdbus",
        [
          "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
          "--method", "org.freedesktop.DBus.NameHasOwner", name,
        ], environment: environment)
      if owned.outputText.contains("true") { return }
      Thread.sleep(forTimeInterval: 0.05)
    }
    XCTFail("\(name) never appeared on the private bus")
  }

  /// A Secret Service with one empty, unlocked collection that refuses every transfer algorithm
  /// but "plain": enough for libsecret to connect, fall back, and find the default collection.
  static let providerSource = """
    // A Secret Service that offers only the "plain" transfer algorithm, with one empty, unlocked
    // collection: enough for libsecret to connect, fall back to a plain session, and find "default".
    #include <gio/gio.h>
    #include <unistd.h>

    static const char *xml =
      "<node>"
      "<interface name='org.freedesktop.Secret.Service'>"
      "<method name='OpenSession'><arg type='s' direction='in'/><arg type='v' direction='in'/>"
      "<arg type='v' direction='out'/><arg type='o' direction='out'/></method>"
      "<method name='ReadAlias'><arg type='s' direction='in'/><arg type='o' direction='out'/></method>"
      "<method name='SearchItems'><arg type='a{ss}' direction='in'/><arg type='ao' direction='out'/>"
      "<arg type='ao' direction='out'/></method>"
      "<property name='Collections' type='ao' access='read'/>"
      "</interface>"
      "<interface name='org.freedesktop.Secret.Collection'>"
      "<property name='Items' type='ao' access='read'/>"
      "<property name='Label' type='s' access='read'/>"
      "<property name='Locked' type='b' access='read'/>"
      "<property name='Created' type='t' access='read'/>"
      "<property name='Modified' type='t' access='read'/>"
      "</interface>"
      "</node>";

    #define COLLECTION "/org/freedesktop/secrets/collection/login"

    static void call(GDBusConnection *c, const char *sender, const char *path, const char *iface,
                     const char *method, GVariant *args, GDBusMethodInvocation *inv, gpointer data) {
      if (g_strcmp0(method, "OpenSession") == 0) {
        const char *algorithm = NULL;
        GVariant *input = NULL;
        g_variant_get(args, "(&sv)", &algorithm, &input);
        g_variant_unref(input);
        if (g_strcmp0(algorithm, "plain") != 0) {
          g_dbus_method_invocation_return_dbus_error(inv, "org.freedesktop.DBus.Error.NotSupported", "plain only");
          return;
        }
        g_dbus_method_invocation_return_value(
            inv, g_variant_new("(vo)", g_variant_new_string(""), "/org/freedesktop/secrets/session/1"));
      } else if (g_strcmp0(method, "ReadAlias") == 0) {
        g_dbus_method_invocation_return_value(inv, g_variant_new("(o)", COLLECTION));
      } else if (g_strcmp0(method, "SearchItems") == 0) {
        g_dbus_method_invocation_return_value(inv, g_variant_new("(aoao)", NULL, NULL));
      } else {
        g_dbus_method_invocation_return_dbus_error(inv, "org.freedesktop.DBus.Error.UnknownMethod", method);
      }
    }

    static GVariant *property(GDBusConnection *c, const char *sender, const char *path, const char *iface,
                              const char *name, GError **error, gpointer data) {
      if (g_strcmp0(name, "Collections") == 0) {
        const char *paths[] = {COLLECTION, NULL};
        return g_variant_new_objv(paths, -1);
      }
      if (g_strcmp0(name, "Items") == 0) return g_variant_new_objv(NULL, 0);
      if (g_strcmp0(name, "Label") == 0) return g_variant_new_string("Login");
      if (g_strcmp0(name, "Locked") == 0) return g_variant_new_boolean(FALSE);
      return g_variant_new_uint64(0);
    }

    static const GDBusInterfaceVTable vtable = {call, property, NULL};

    static gboolean stdin_closed(GIOChannel *channel, GIOCondition condition, gpointer loop) {
      g_main_loop_quit(loop);
      return FALSE;
    }

    int main(void) {
      GError *error = NULL;
      GDBusConnection *bus = g_bus_get_sync(G_BUS_TYPE_SESSION, NULL, &error);
      if (!bus) return 2;
      GDBusNodeInfo *info = g_dbus_node_info_new_for_xml(xml, &error);
      if (!info) return 2;
      g_dbus_connection_register_object(bus, "/org/freedesktop/secrets", info->interfaces[0], &vtable, NULL, NULL, &error);
      g_dbus_connection_register_object(bus, COLLECTION, info->interfaces[1], &vtable, NULL, NULL, &error);
      GVariant *reply = g_dbus_connection_call_sync(
          bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "RequestName",
          g_variant_new("(su)", "org.freedesktop.secrets", 4), G_VARIANT_TYPE("(u)"), 0, -1, NULL, &error);
      if (!reply) return 2;
      g_variant_unref(reply);
      GMainLoop *loop = g_main_loop_new(NULL, FALSE);
      GIOChannel *in = g_io_channel_unix_new(0);
      g_io_add_watch(in, G_IO_IN | G_IO_HUP | G_IO_ERR, stdin_closed, loop);
      write(1, "ready\\n", 6);
      g_main_loop_run(loop);
      return 0;
    }
    """
}
