// libsecret (and the GIO/GLib it brings) for VaultKeys/SecretService. Only files under
// Sources/VaultKeys/SecretService import this module.
#ifndef VAULT_CLIBSECRET_SHIM_H
#define VAULT_CLIBSECRET_SHIM_H

#include <libsecret/secret.h>
#include <gio/gio.h>

// The schema of vault's items. secret_schema_new is variadic, so it is built here.
// SECRET_SCHEMA_NONE keeps the xdg:schema attribute, so lookups match only our items.
static inline SecretSchema *vault_key_schema_new(void) {
  return secret_schema_new("org.vault.Key", SECRET_SCHEMA_NONE,
                           "vault-id", SECRET_SCHEMA_ATTRIBUTE_STRING,
                           "version", SECRET_SCHEMA_ATTRIBUTE_STRING,
                           "home", SECRET_SCHEMA_ATTRIBUTE_STRING,
                           NULL);
}

// The schema of vault's named records (integrity key, manifest mirror): a schema of its own, so
// a search for keys never matches a record and a search for records never matches a key.
// `generation` orders the items of one record: a replace stores a new item, then removes older ones.
static inline SecretSchema *vault_record_schema_new(void) {
  return secret_schema_new("org.vault.Record", SECRET_SCHEMA_NONE,
                           "vault-id", SECRET_SCHEMA_ATTRIBUTE_STRING,
                           "record", SECRET_SCHEMA_ATTRIBUTE_STRING,
                           "home", SECRET_SCHEMA_ATTRIBUTE_STRING,
                           "generation", SECRET_SCHEMA_ATTRIBUTE_STRING,
                           NULL);
}

// An attribute table owning copies of its strings. A NULL value leaves that attribute out.
static inline GHashTable *vault_attributes_new(const char *vault_id, const char *version, const char *home) {
  GHashTable *table = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  if (vault_id) g_hash_table_insert(table, g_strdup("vault-id"), g_strdup(vault_id));
  if (version) g_hash_table_insert(table, g_strdup("version"), g_strdup(version));
  if (home) g_hash_table_insert(table, g_strdup("home"), g_strdup(home));
  return table;
}

// The attribute table of a record item (or search). A NULL value leaves that attribute out.
static inline GHashTable *vault_record_attributes_new(const char *vault_id, const char *record, const char *home,
                                                      const char *generation) {
  GHashTable *table = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  if (vault_id) g_hash_table_insert(table, g_strdup("vault-id"), g_strdup(vault_id));
  if (record) g_hash_table_insert(table, g_strdup("record"), g_strdup(record));
  if (home) g_hash_table_insert(table, g_strdup("home"), g_strdup(home));
  if (generation) g_hash_table_insert(table, g_strdup("generation"), g_strdup(generation));
  return table;
}

// Looks up one attribute of an item; the caller frees the result with g_free.
static inline char *vault_item_attribute(SecretItem *item, const char *name) {
  GHashTable *attributes = secret_item_get_attributes(item);
  if (!attributes) return NULL;
  char *value = g_strdup((const char *)g_hash_table_lookup(attributes, name));
  g_hash_table_unref(attributes);
  return value;
}

static inline void vault_item_list_free(GList *items) { g_list_free_full(items, g_object_unref); }

// Asks the bus daemon whether org.freedesktop.secrets has an owner or can be activated.
// Returns 1 when it does, 0 when it has neither, -1 on error (error set).
static inline int vault_secret_provider_present(GDBusConnection *bus, int timeout_ms,
                                                GCancellable *cancellable, GError **error) {
  const char *name = "org.freedesktop.secrets";
  GVariant *reply = g_dbus_connection_call_sync(
      bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameHasOwner",
      g_variant_new("(s)", name), G_VARIANT_TYPE("(b)"), G_DBUS_CALL_FLAGS_NONE, timeout_ms, cancellable, error);
  if (!reply) return -1;
  gboolean owned = FALSE;
  g_variant_get(reply, "(b)", &owned);
  g_variant_unref(reply);
  if (owned) return 1;
  reply = g_dbus_connection_call_sync(
      bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "ListActivatableNames",
      NULL, G_VARIANT_TYPE("(as)"), G_DBUS_CALL_FLAGS_NONE, timeout_ms, cancellable, error);
  if (!reply) return -1;
  GVariantIter *iter = NULL;
  const char *each = NULL;
  int found = 0;
  g_variant_get(reply, "(as)", &iter);
  while (g_variant_iter_loop(iter, "&s", &each)) {
    if (g_strcmp0(each, name) == 0) found = 1;
  }
  g_variant_iter_free(iter);
  g_variant_unref(reply);
  return found;
}

// Error classification: GLib error domains are functions returning quarks, and the codes are enums.
static inline int vault_error_is_cancelled(const GError *error) {
  return g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
}

static inline int vault_error_is_timeout(const GError *error) {
  return g_error_matches(error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT) ||
         g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_NO_REPLY) ||
         g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_TIMEOUT) ||
         g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_TIMED_OUT);
}

static inline int vault_error_is_service_unknown(const GError *error) {
  return g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_SERVICE_UNKNOWN) ||
         g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_NAME_HAS_NO_OWNER) ||
         g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND);
}

#endif
