// libsecret, GIO and GLib through dlopen (see CLibSecret.h): one table of function pointers, filled
// once. The functions are declared here with vault's opaque types; their real signatures take the
// same pointers and ints (enums are ints in the C ABI), and abi.h's constants are checked against
// the real headers by a test.
#include "CLibSecret.h"
#include "abi.h"

#include "CDynamicLibrary.h"

typedef unsigned (*hash_function)(const void *key);
typedef int (*equal_function)(const void *a, const void *b);
typedef void (*destroy_function)(void *data);

static struct {
  // GLib and GObject
  void (*g_object_unref)(void *object);
  void (*g_free)(void *memory);
  char *(*g_strdup)(const char *text);
  int (*g_strcmp0)(const char *a, const char *b);
  unsigned (*g_str_hash)(const void *key);
  int (*g_str_equal)(const void *a, const void *b);
  void (*g_error_free)(VaultGError *error);
  int (*g_error_matches)(const VaultGError *error, uint32_t domain, int code);
  uint32_t (*g_io_error_quark)(void);
  uint32_t (*g_dbus_error_quark)(void);
  VaultGHashTable *(*g_hash_table_new_full)(hash_function hash, equal_function equal, destroy_function key_destroy,
                                            destroy_function value_destroy);
  int (*g_hash_table_insert)(VaultGHashTable *table, void *key, void *value);
  void *(*g_hash_table_lookup)(VaultGHashTable *table, const void *key);
  void (*g_hash_table_unref)(VaultGHashTable *table);
  void (*g_list_free_full)(VaultGList *list, destroy_function free_function);
  VaultGMainContext *(*g_main_context_new)(void);
  void (*g_main_context_push_thread_default)(VaultGMainContext *context);
  void (*g_main_context_pop_thread_default)(VaultGMainContext *context);
  int (*g_main_context_iteration)(VaultGMainContext *context, int may_block);
  int (*g_main_context_pending)(VaultGMainContext *context);
  void (*g_main_context_unref)(VaultGMainContext *context);
  VaultGVariant *(*g_variant_new)(const char *format, ...);
  void (*g_variant_get)(VaultGVariant *variant, const char *format, ...);
  void (*g_variant_unref)(VaultGVariant *variant);
  int (*g_variant_iter_loop)(VaultGVariantIter *iter, const char *format, ...);
  void (*g_variant_iter_free)(VaultGVariantIter *iter);
  // GIO
  VaultGCancellable *(*g_cancellable_new)(void);
  void (*g_cancellable_cancel)(VaultGCancellable *cancellable);
  int (*g_cancellable_is_cancelled)(VaultGCancellable *cancellable);
  VaultGDBusConnection *(*g_bus_get_sync)(VAULT_ENUM(GBusType) bus_type, VaultGCancellable *cancellable,
                                          VaultGError **error);
  VaultGVariant *(*g_dbus_connection_call_sync)(VaultGDBusConnection *connection, const char *bus_name,
                                                const char *object_path, const char *interface_name,
                                                const char *method_name, VaultGVariant *parameters,
                                                const VaultGVariantType *reply_type, VAULT_ENUM(GDBusCallFlags) flags,
                                                int timeout_ms, VaultGCancellable *cancellable, VaultGError **error);
  const char *(*g_dbus_proxy_get_object_path)(VaultGDBusProxy *proxy);
  // libsecret
  VaultSecretSchema *(*secret_schema_new)(const char *name, VAULT_ENUM(SecretSchemaFlags) flags, ...);
  void (*secret_schema_unref)(VaultSecretSchema *schema);
  VaultSecretService *(*secret_service_get_sync)(VAULT_ENUM(SecretServiceFlags) flags, VaultGCancellable *cancellable,
                                                 VaultGError **error);
  const char *(*secret_service_get_session_algorithms)(VaultSecretService *service);
  void (*secret_service_disconnect)(void);
  VaultGList *(*secret_service_search_sync)(VaultSecretService *service, const VaultSecretSchema *schema,
                                            VaultGHashTable *attributes, VAULT_ENUM(SecretSearchFlags) flags,
                                            VaultGCancellable *cancellable, VaultGError **error);
  int (*secret_service_store_sync)(VaultSecretService *service, const VaultSecretSchema *schema,
                                   VaultGHashTable *attributes, const char *collection, const char *label,
                                   VaultSecretValue *value, VaultGCancellable *cancellable, VaultGError **error);
  VaultSecretCollection *(*secret_collection_for_alias_sync)(VaultSecretService *service, const char *alias,
                                                             VAULT_ENUM(SecretCollectionFlags) flags,
                                                             VaultGCancellable *cancellable, VaultGError **error);
  int (*secret_collection_get_locked)(VaultSecretCollection *collection);
  int (*secret_item_get_locked)(VaultSecretItem *item);
  VaultSecretValue *(*secret_item_get_secret)(VaultSecretItem *item);
  int (*secret_item_load_secrets_sync)(VaultGList *items, VaultGCancellable *cancellable, VaultGError **error);
  VaultGHashTable *(*secret_item_get_attributes)(VaultSecretItem *item);
  int (*secret_item_delete_sync)(VaultSecretItem *item, VaultGCancellable *cancellable, VaultGError **error);
  VaultSecretValue *(*secret_value_new)(const char *secret, ptrdiff_t length, const char *content_type);
  const char *(*secret_value_get)(VaultSecretValue *value, size_t *length);
  void (*secret_value_unref)(void *value);
} api;

#ifdef VAULT_CLIBSECRET_REAL_TYPES
// Only in LibSecretABITests' compile, with the real headers: each pointer has the type of the
// function it holds, each constant its value, each structure its layout.
#define SAME_TYPE(function) \
  _Static_assert(__builtin_types_compatible_p(__typeof__(api.function), __typeof__(&function)), #function)
SAME_TYPE(g_object_unref);
SAME_TYPE(g_free);
SAME_TYPE(g_strdup);
SAME_TYPE(g_strcmp0);
SAME_TYPE(g_str_hash);
SAME_TYPE(g_str_equal);
SAME_TYPE(g_error_free);
SAME_TYPE(g_error_matches);
SAME_TYPE(g_io_error_quark);
SAME_TYPE(g_dbus_error_quark);
SAME_TYPE(g_hash_table_new_full);
SAME_TYPE(g_hash_table_insert);
SAME_TYPE(g_hash_table_lookup);
SAME_TYPE(g_hash_table_unref);
SAME_TYPE(g_list_free_full);
SAME_TYPE(g_main_context_new);
SAME_TYPE(g_main_context_push_thread_default);
SAME_TYPE(g_main_context_pop_thread_default);
SAME_TYPE(g_main_context_iteration);
SAME_TYPE(g_main_context_pending);
SAME_TYPE(g_main_context_unref);
SAME_TYPE(g_variant_new);
SAME_TYPE(g_variant_get);
SAME_TYPE(g_variant_unref);
SAME_TYPE(g_variant_iter_loop);
SAME_TYPE(g_variant_iter_free);
SAME_TYPE(g_cancellable_new);
SAME_TYPE(g_cancellable_cancel);
SAME_TYPE(g_cancellable_is_cancelled);
SAME_TYPE(g_bus_get_sync);
SAME_TYPE(g_dbus_connection_call_sync);
SAME_TYPE(g_dbus_proxy_get_object_path);
SAME_TYPE(secret_schema_new);
SAME_TYPE(secret_schema_unref);
SAME_TYPE(secret_service_get_sync);
SAME_TYPE(secret_service_get_session_algorithms);
SAME_TYPE(secret_service_disconnect);
SAME_TYPE(secret_service_search_sync);
SAME_TYPE(secret_service_store_sync);
SAME_TYPE(secret_collection_for_alias_sync);
SAME_TYPE(secret_collection_get_locked);
SAME_TYPE(secret_item_get_locked);
SAME_TYPE(secret_item_get_secret);
SAME_TYPE(secret_item_load_secrets_sync);
SAME_TYPE(secret_item_get_attributes);
SAME_TYPE(secret_item_delete_sync);
SAME_TYPE(secret_value_new);
SAME_TYPE(secret_value_get);
SAME_TYPE(secret_value_unref);
#define SAME_VALUE(name) _Static_assert(VAULT_##name == name, #name)
SAME_VALUE(SECRET_SCHEMA_NONE);
SAME_VALUE(SECRET_SCHEMA_ATTRIBUTE_STRING);
SAME_VALUE(SECRET_SEARCH_ALL);
SAME_VALUE(SECRET_SERVICE_OPEN_SESSION);
SAME_VALUE(SECRET_COLLECTION_NONE);
SAME_VALUE(G_BUS_TYPE_SESSION);
SAME_VALUE(G_DBUS_CALL_FLAGS_NONE);
SAME_VALUE(G_IO_ERROR_CANCELLED);
SAME_VALUE(G_IO_ERROR_TIMED_OUT);
SAME_VALUE(G_DBUS_ERROR_SERVICE_UNKNOWN);
SAME_VALUE(G_DBUS_ERROR_NAME_HAS_NO_OWNER);
SAME_VALUE(G_DBUS_ERROR_NO_REPLY);
SAME_VALUE(G_DBUS_ERROR_TIMEOUT);
SAME_VALUE(G_DBUS_ERROR_TIMED_OUT);
SAME_VALUE(G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND);
struct declared_error {
  VAULT_GERROR_FIELDS
};
struct declared_list {
  VAULT_GLIST_FIELDS(declared_list)
};
#define SAME_FIELD(declared, real, field)                                                  \
  _Static_assert(offsetof(struct declared, field) == offsetof(real, field) &&              \
                     sizeof(((struct declared *)0)->field) == sizeof(((real *)0)->field), \
                 #real "." #field)
_Static_assert(sizeof(struct declared_error) == sizeof(GError), "GError");
SAME_FIELD(declared_error, GError, domain);
SAME_FIELD(declared_error, GError, code);
SAME_FIELD(declared_error, GError, message);
_Static_assert(sizeof(struct declared_list) == sizeof(GList), "GList");
SAME_FIELD(declared_list, GList, data);
SAME_FIELD(declared_list, GList, next);
SAME_FIELD(declared_list, GList, prev);
#endif

#define RESOLVE(name) vault_library_resolve(library, handle, #name, &api.name)

static int resolve_all(vault_library *library, void *handle) {
  // GLib, GObject and GIO come with libsecret as its dependencies, and dlsym on its handle finds
  // their functions too.
  return RESOLVE(g_object_unref) && RESOLVE(g_free) && RESOLVE(g_strdup) && RESOLVE(g_strcmp0) &&
         RESOLVE(g_str_hash) && RESOLVE(g_str_equal) && RESOLVE(g_error_free) && RESOLVE(g_error_matches) &&
         RESOLVE(g_io_error_quark) && RESOLVE(g_dbus_error_quark) && RESOLVE(g_hash_table_new_full) &&
         RESOLVE(g_hash_table_insert) && RESOLVE(g_hash_table_lookup) && RESOLVE(g_hash_table_unref) &&
         RESOLVE(g_list_free_full) && RESOLVE(g_main_context_new) &&
         RESOLVE(g_main_context_push_thread_default) && RESOLVE(g_main_context_pop_thread_default) &&
         RESOLVE(g_main_context_iteration) && RESOLVE(g_main_context_pending) && RESOLVE(g_main_context_unref) &&
         RESOLVE(g_variant_new) && RESOLVE(g_variant_get) &&
         RESOLVE(g_variant_unref) && RESOLVE(g_variant_iter_loop) && RESOLVE(g_variant_iter_free) &&
         RESOLVE(g_cancellable_new) && RESOLVE(g_cancellable_cancel) && RESOLVE(g_cancellable_is_cancelled) &&
         RESOLVE(g_bus_get_sync) && RESOLVE(g_dbus_connection_call_sync) && RESOLVE(g_dbus_proxy_get_object_path) &&
         RESOLVE(secret_schema_new) &&
         RESOLVE(secret_schema_unref) && RESOLVE(secret_service_get_sync) &&
         RESOLVE(secret_service_get_session_algorithms) && RESOLVE(secret_service_disconnect) &&
         RESOLVE(secret_service_search_sync) && RESOLVE(secret_service_store_sync) &&
         RESOLVE(secret_collection_for_alias_sync) &&
         RESOLVE(secret_collection_get_locked) && RESOLVE(secret_item_get_locked) &&
         RESOLVE(secret_item_get_secret) && RESOLVE(secret_item_load_secrets_sync) &&
         RESOLVE(secret_item_get_attributes) &&
         RESOLVE(secret_item_delete_sync) && RESOLVE(secret_value_new) && RESOLVE(secret_value_get) &&
         RESOLVE(secret_value_unref);
}

// The soname of Debian 12's libsecret-1-0.
static vault_library secret = VAULT_LIBRARY("libsecret-1.so.0", resolve_all, NULL);

int vault_secret_load(void) { return vault_library_load(&secret); }

void vault_secret_load_error(char *buffer, size_t size) { vault_library_error(&secret, buffer, size); }

void vault_g_object_unref(void *object) { api.g_object_unref(object); }
void vault_g_free(void *memory) { api.g_free(memory); }
void vault_g_error_free(VaultGError *error) { api.g_error_free(error); }
void vault_g_hash_table_unref(VaultGHashTable *table) { api.g_hash_table_unref(table); }

VaultGMainContext *vault_g_context_begin(void) {
  VaultGMainContext *context = api.g_main_context_new();
  api.g_main_context_push_thread_default(context);
  return context;
}

void vault_g_context_end(VaultGMainContext *context) {
  // Bounded, in case a source stays ready: what is left is then freed with the context or kept
  // alive by its source, as before.
  for (int dispatched = 0; dispatched < 1000 && api.g_main_context_iteration(context, 0); dispatched++) {
  }
  api.g_main_context_pop_thread_default(context);
  api.g_main_context_unref(context);
}

int vault_g_default_context_pending(void) { return api.g_main_context_pending(NULL); }

VaultGCancellable *vault_g_cancellable_new(void) { return api.g_cancellable_new(); }
void vault_g_cancellable_cancel(VaultGCancellable *cancellable) { api.g_cancellable_cancel(cancellable); }
int vault_g_cancellable_is_cancelled(VaultGCancellable *cancellable) {
  return api.g_cancellable_is_cancelled(cancellable);
}

VaultGDBusConnection *vault_g_bus_get_session(VaultGCancellable *cancellable, VaultGError **error) {
  return api.g_bus_get_sync(VAULT_G_BUS_TYPE_SESSION, cancellable, error);
}

int vault_secret_provider_present(VaultGDBusConnection *bus, int timeout_ms, VaultGCancellable *cancellable,
                                  VaultGError **error) {
  const char *name = "org.freedesktop.secrets";
  // A GVariantType is its type string (G_VARIANT_TYPE is a cast).
  VaultGVariant *reply = api.g_dbus_connection_call_sync(
      bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameHasOwner",
      api.g_variant_new("(s)", name), (const VaultGVariantType *)"(b)", VAULT_G_DBUS_CALL_FLAGS_NONE, timeout_ms,
      cancellable, error);
  if (!reply) return -1;
  int owned = 0;  // gboolean
  api.g_variant_get(reply, "(b)", &owned);
  api.g_variant_unref(reply);
  if (owned) return 1;
  reply = api.g_dbus_connection_call_sync(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                          "ListActivatableNames", NULL, (const VaultGVariantType *)"(as)",
                                          VAULT_G_DBUS_CALL_FLAGS_NONE, timeout_ms, cancellable, error);
  if (!reply) return -1;
  VaultGVariantIter *iter = NULL;
  const char *each = NULL;
  int found = 0;
  api.g_variant_get(reply, "(as)", &iter);
  while (api.g_variant_iter_loop(iter, "&s", &each)) {
    if (api.g_strcmp0(each, name) == 0) found = 1;
  }
  api.g_variant_iter_free(iter);
  api.g_variant_unref(reply);
  return found;
}

VaultSecretService *vault_secret_service_open(VaultGCancellable *cancellable, VaultGError **error) {
  return api.secret_service_get_sync(VAULT_SECRET_SERVICE_OPEN_SESSION, cancellable, error);
}

const char *vault_secret_service_get_session_algorithms(VaultSecretService *service) {
  return api.secret_service_get_session_algorithms(service);
}

void vault_secret_service_disconnect(void) { api.secret_service_disconnect(); }

VaultSecretCollection *vault_secret_default_collection(VaultSecretService *service, VaultGCancellable *cancellable,
                                                       VaultGError **error) {
  return api.secret_collection_for_alias_sync(service, "default", VAULT_SECRET_COLLECTION_NONE, cancellable, error);
}

int vault_secret_collection_get_locked(VaultSecretCollection *collection) {
  return api.secret_collection_get_locked(collection);
}

// Reads `count` aliases into `paths` (each a copy, freed with g_free); 0 on error (error set,
// nothing left to free).
static int read_aliases(VaultGDBusConnection *bus, const char *const *aliases, char **paths, int count,
                        int timeout_ms, VaultGCancellable *cancellable, VaultGError **error) {
  for (int i = 0; i < count; i++) {
    VaultGVariant *reply = api.g_dbus_connection_call_sync(
        bus, "org.freedesktop.secrets", "/org/freedesktop/secrets", "org.freedesktop.Secret.Service", "ReadAlias",
        api.g_variant_new("(s)", aliases[i]), (const VaultGVariantType *)"(o)", VAULT_G_DBUS_CALL_FLAGS_NONE,
        timeout_ms, cancellable, error);
    if (!reply) {
      for (int j = 0; j < i; j++) api.g_free(paths[j]);
      return 0;
    }
    api.g_variant_get(reply, "(o)", &paths[i]);  // a copy, freed with g_free
    api.g_variant_unref(reply);
  }
  return 1;
}

int vault_secret_default_is_session(VaultGDBusConnection *bus, int timeout_ms, VaultGCancellable *cancellable,
                                    VaultGError **error) {
  // The third is an alias no provider defines: one that answers it with a collection does not
  // keep aliases apart, and its "session" answer says nothing about where the default is kept.
  const char *aliases[3] = {"default", "session", "org.vault.no-such-alias"};
  char *paths[3] = {NULL, NULL, NULL};
  if (!read_aliases(bus, aliases, paths, 3, timeout_ms, cancellable, error)) return -1;
  // "/" is the Secret Service's answer for an alias that names no collection.
  int same = api.g_strcmp0(paths[0], "/") != 0 && api.g_strcmp0(paths[0], paths[1]) == 0 &&
             api.g_strcmp0(paths[1], paths[2]) != 0;
  for (int j = 0; j < 3; j++) api.g_free(paths[j]);
  return same;
}

char *vault_secret_session_collection_path(VaultGDBusConnection *bus, int timeout_ms, VaultGCancellable *cancellable,
                                           VaultGError **error) {
  const char *aliases[2] = {"session", "org.vault.no-such-alias"};
  char *paths[2] = {NULL, NULL};
  if (!read_aliases(bus, aliases, paths, 2, timeout_ms, cancellable, error)) return NULL;
  char *found = NULL;
  if (api.g_strcmp0(paths[0], "/") != 0 && api.g_strcmp0(paths[0], paths[1]) != 0) {
    found = paths[0];
    paths[0] = NULL;
  }
  api.g_free(paths[0]);
  api.g_free(paths[1]);
  return found;
}

const char *vault_item_object_path(VaultSecretItem *item) {
  // A SecretItem is a GDBusProxy for the item's object.
  return api.g_dbus_proxy_get_object_path((VaultGDBusProxy *)item);
}

// secret_schema_new is variadic: name, type pairs ended by NULL. SECRET_SCHEMA_NONE keeps the
// xdg:schema attribute, so lookups match only vault's items.
VaultSecretSchema *vault_key_schema_new(void) {
  return api.secret_schema_new("org.vault.Key", VAULT_SECRET_SCHEMA_NONE, "vault-id",
                               VAULT_SECRET_SCHEMA_ATTRIBUTE_STRING, "version", VAULT_SECRET_SCHEMA_ATTRIBUTE_STRING,
                               "home", VAULT_SECRET_SCHEMA_ATTRIBUTE_STRING, NULL);
}

// A schema of its own, so a search for keys never matches a record and a search for records never
// matches a key. `generation` orders the items of one record: a replace stores a new item, then
// removes older ones.
VaultSecretSchema *vault_record_schema_new(void) {
  return api.secret_schema_new("org.vault.Record", VAULT_SECRET_SCHEMA_NONE, "vault-id",
                               VAULT_SECRET_SCHEMA_ATTRIBUTE_STRING, "record", VAULT_SECRET_SCHEMA_ATTRIBUTE_STRING,
                               "home", VAULT_SECRET_SCHEMA_ATTRIBUTE_STRING, "generation",
                               VAULT_SECRET_SCHEMA_ATTRIBUTE_STRING, NULL);
}

void vault_secret_schema_unref(VaultSecretSchema *schema) { api.secret_schema_unref(schema); }

static VaultGHashTable *string_table(void) {
  return api.g_hash_table_new_full(api.g_str_hash, api.g_str_equal, api.g_free, api.g_free);
}

static void put(VaultGHashTable *table, const char *name, const char *value) {
  if (value) api.g_hash_table_insert(table, api.g_strdup(name), api.g_strdup(value));
}

VaultGHashTable *vault_attributes_new(const char *vault_id, const char *version, const char *home) {
  VaultGHashTable *table = string_table();
  put(table, "vault-id", vault_id);
  put(table, "version", version);
  put(table, "home", home);
  return table;
}

VaultGHashTable *vault_record_attributes_new(const char *vault_id, const char *record, const char *home,
                                             const char *generation) {
  VaultGHashTable *table = string_table();
  put(table, "vault-id", vault_id);
  put(table, "record", record);
  put(table, "home", home);
  put(table, "generation", generation);
  return table;
}

VaultGList *vault_secret_search(VaultSecretService *service, VaultSecretSchema *schema, VaultGHashTable *attributes,
                                int load_secrets, VaultGCancellable *cancellable, VaultGError **error) {
  // Secrets are loaded here rather than with SECRET_SEARCH_LOAD_SECRETS: libsecret's sync search
  // loads them without the cancellable, with D-Bus's default 25 s timeout, and drops the error,
  // so a daemon stopped between the search and the load held a call 25 s past its deadline and
  // the item then came back with no secret.
  VaultGList *items =
      api.secret_service_search_sync(service, schema, attributes, VAULT_SECRET_SEARCH_ALL, cancellable, error);
  if (items && load_secrets && !api.secret_item_load_secrets_sync(items, cancellable, error)) {
    vault_item_list_free(items);
    return NULL;
  }
  return items;
}

int vault_secret_store(VaultSecretService *service, VaultSecretSchema *schema, VaultGHashTable *attributes,
                       const char *collection, const char *label, VaultSecretValue *value,
                       VaultGCancellable *cancellable, VaultGError **error) {
  return api.secret_service_store_sync(service, schema, attributes, collection, label, value, cancellable, error);
}

int vault_secret_item_get_locked(VaultSecretItem *item) { return api.secret_item_get_locked(item); }

VaultSecretValue *vault_secret_item_get_secret(VaultSecretItem *item) { return api.secret_item_get_secret(item); }

int vault_secret_item_delete(VaultSecretItem *item, VaultGCancellable *cancellable, VaultGError **error) {
  return api.secret_item_delete_sync(item, cancellable, error);
}

char *vault_item_attribute(VaultSecretItem *item, const char *name) {
  VaultGHashTable *attributes = api.secret_item_get_attributes(item);
  if (!attributes) return NULL;
  char *value = api.g_strdup((const char *)api.g_hash_table_lookup(attributes, name));
  api.g_hash_table_unref(attributes);
  return value;
}

void vault_item_list_free(VaultGList *items) { api.g_list_free_full(items, api.g_object_unref); }

VaultSecretValue *vault_secret_value_new(const char *secret, ptrdiff_t length, const char *content_type) {
  return api.secret_value_new(secret, length, content_type);
}

const char *vault_secret_value_get(VaultSecretValue *value, size_t *length) {
  return api.secret_value_get(value, length);
}

void vault_secret_value_unref(VaultSecretValue *value) { api.secret_value_unref(value); }

int vault_error_is_cancelled(const VaultGError *error) {
  return api.g_error_matches(error, api.g_io_error_quark(), VAULT_G_IO_ERROR_CANCELLED);
}

int vault_error_is_timeout(const VaultGError *error) {
  uint32_t dbus = api.g_dbus_error_quark();
  return api.g_error_matches(error, api.g_io_error_quark(), VAULT_G_IO_ERROR_TIMED_OUT) ||
         api.g_error_matches(error, dbus, VAULT_G_DBUS_ERROR_TIMEOUT) ||
         api.g_error_matches(error, dbus, VAULT_G_DBUS_ERROR_TIMED_OUT);
}

int vault_error_is_no_reply(const VaultGError *error) {
  return api.g_error_matches(error, api.g_dbus_error_quark(), VAULT_G_DBUS_ERROR_NO_REPLY);
}

int vault_error_is_service_unknown(const VaultGError *error) {
  uint32_t dbus = api.g_dbus_error_quark();
  return api.g_error_matches(error, dbus, VAULT_G_DBUS_ERROR_SERVICE_UNKNOWN) ||
         api.g_error_matches(error, dbus, VAULT_G_DBUS_ERROR_NAME_HAS_NO_OWNER) ||
         api.g_error_matches(error, dbus, VAULT_G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND);
}
