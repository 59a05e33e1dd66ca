// libsecret (and the GIO and GLib it brings) for VaultKeys/SecretService, loaded with dlopen on
// first use rather than linked. Only Sources/VaultKeys/SecretService imports this module.
//
// Why loaded: a process that never touches the Secret Service (`vault scan`, a keyfile vault on a
// server) neither needs libsecret installed nor pays for loading it, GLib, GIO and libgcrypt at
// start-up. Why declared here rather than by including <libsecret/secret.h>: those headers live
// outside the compiler's search path (pkg-config adds it), and a system-library target that asks
// pkg-config for it is also linked against the libraries. So this header stands alone: opaque
// types, the two GLib structures vault reads (GError, GList), and the functions vault needs, each
// prefixed vault_.
//
// A test (LibSecretABITests) compiles loader.c with VAULT_CLIBSECRET_REAL_TYPES defined and the real
// headers' paths: every type here is then the real one, and loader.c asserts that each function
// pointer it calls through has the type of the real function, each constant its real value, and
// both structures their real layout.
#ifndef VAULT_CLIBSECRET_H
#define VAULT_CLIBSECRET_H

#include <stddef.h>
#include <stdint.h>

// GLib's GError and GList, field for field (GQuark is a guint32, gint an int).
#define VAULT_GERROR_FIELDS \
  uint32_t domain;          \
  int code;                 \
  char *message;
#define VAULT_GLIST_FIELDS(node) \
  void *data;                    \
  struct node *next;             \
  struct node *prev;

#ifdef VAULT_CLIBSECRET_REAL_TYPES
#include <gio/gio.h>
#include <libsecret/secret.h>
typedef SecretService VaultSecretService;
typedef SecretCollection VaultSecretCollection;
typedef SecretItem VaultSecretItem;
typedef SecretValue VaultSecretValue;
typedef SecretSchema VaultSecretSchema;
typedef GHashTable VaultGHashTable;
typedef GCancellable VaultGCancellable;
typedef GDBusConnection VaultGDBusConnection;
typedef GDBusProxy VaultGDBusProxy;
typedef GError VaultGError;
typedef GList VaultGList;
typedef GMainContext VaultGMainContext;
#else
typedef struct VaultSecretService VaultSecretService;
typedef struct VaultSecretCollection VaultSecretCollection;
typedef struct VaultSecretItem VaultSecretItem;
typedef struct VaultSecretValue VaultSecretValue;
typedef struct VaultSecretSchema VaultSecretSchema;
typedef struct VaultGHashTable VaultGHashTable;
typedef struct VaultGCancellable VaultGCancellable;
typedef struct VaultGDBusConnection VaultGDBusConnection;
typedef struct VaultGDBusProxy VaultGDBusProxy;
typedef struct VaultGMainContext VaultGMainContext;

/// GLib's GError.
typedef struct VaultGError {
  VAULT_GERROR_FIELDS
} VaultGError;

/// GLib's GList node.
typedef struct VaultGList {
  VAULT_GLIST_FIELDS(VaultGList)
} VaultGList;
#endif

/// Loads libsecret-1.so.0 and resolves every function vault calls in it and in GLib/GIO
/// (thread-safe). 1 when ready; 0 when the library is not installed or lacks a function, and then
/// no other function here may be called. Once ready it stays ready; after a failure the next call
/// tries again (the library may have been installed since).
int vault_secret_load(void);

/// Why the last vault_secret_load failed (the dynamic linker's message, or the function missing),
/// copied into `buffer` as a C string of at most `size` bytes; empty when none failed.
void vault_secret_load_error(char *buffer, size_t size);

// GObject and GLib memory.
void vault_g_object_unref(void *object);
void vault_g_free(void *memory);
void vault_g_error_free(VaultGError *error);
void vault_g_hash_table_unref(VaultGHashTable *table);

/// A new GMainContext made the calling thread's default, for one call into libsecret: the D-Bus
/// proxies it makes subscribe to signals in this context, and when they are freed GIO queues the
/// subscriptions' clean-up as idle sources there. End it with vault_g_context_end on the same thread.
VaultGMainContext *vault_g_context_begin(void);
/// Runs what is ready in `context` (the clean-up above; at most 1000 dispatches, never blocking),
/// stops it being the thread's default and frees it. Without this the clean-up would wait for
/// ever in a context nobody runs, and every call would leak its proxies (about 3 KB a vault open).
void vault_g_context_end(VaultGMainContext *context);
/// 1 when GLib's global default main context has sources ready to run (tests: vault's calls must
/// leave nothing there, since a process without a GLib main loop never runs them).
int vault_g_default_context_pending(void);

VaultGCancellable *vault_g_cancellable_new(void);
void vault_g_cancellable_cancel(VaultGCancellable *cancellable);
int vault_g_cancellable_is_cancelled(VaultGCancellable *cancellable);

/// The session bus (g_bus_get_sync with G_BUS_TYPE_SESSION); the caller unrefs it.
VaultGDBusConnection *vault_g_bus_get_session(VaultGCancellable *cancellable, VaultGError **error);

/// Asks the bus daemon whether org.freedesktop.secrets has an owner or can be activated.
/// Returns 1 when it does, 0 when it has neither, -1 on error (error set).
int vault_secret_provider_present(VaultGDBusConnection *bus, int timeout_ms, VaultGCancellable *cancellable,
                                  VaultGError **error);

/// The Secret Service proxy with a transfer session open (secret_service_get_sync with
/// SECRET_SERVICE_OPEN_SESSION); the caller unrefs it.
VaultSecretService *vault_secret_service_open(VaultGCancellable *cancellable, VaultGError **error);
/// libsecret's name for the open session's algorithms ("plain" or an encrypted one), or NULL.
const char *vault_secret_service_get_session_algorithms(VaultSecretService *service);
/// Drops libsecret's cached proxy (and its session), so the next open connects afresh.
void vault_secret_service_disconnect(void);

/// The collection behind the "default" alias, without its items; NULL with error unset when there
/// is none. The caller unrefs it.
VaultSecretCollection *vault_secret_default_collection(VaultSecretService *service, VaultGCancellable *cancellable,
                                                       VaultGError **error);
int vault_secret_collection_get_locked(VaultSecretCollection *collection);

/// Whether the "default" alias names the collection behind the "session" alias (gnome-keyring's
/// collection kept in memory only and cleared when the session ends), asked with ReadAlias on the
/// bus. Returns 1 when it does, 0 when it does not (or a provider has no such alias: "/", or it
/// answers an alias nobody defines with a collection too: it does not keep aliases apart), -1 on
/// error (error set).
int vault_secret_default_is_session(VaultGDBusConnection *bus, int timeout_ms, VaultGCancellable *cancellable,
                                    VaultGError **error);

/// The object path of the collection the "session" alias names on `bus` (gnome-keyring keeps it
/// in memory only), as a copy the caller frees with vault_g_free. NULL when there is none ("/"),
/// when the provider does not keep aliases apart (it names a collection for an alias nobody
/// defines too), or on error (error set).
char *vault_secret_session_collection_path(VaultGDBusConnection *bus, int timeout_ms, VaultGCancellable *cancellable,
                                           VaultGError **error);

/// The D-Bus object path of an item (under its collection's path); owned by the item.
const char *vault_item_object_path(VaultSecretItem *item);

/// The schema of vault's key items (org.vault.Key: vault-id, version, home).
VaultSecretSchema *vault_key_schema_new(void);
/// The schema of vault's named records (org.vault.Record: vault-id, record, home, generation).
VaultSecretSchema *vault_record_schema_new(void);
void vault_secret_schema_unref(VaultSecretSchema *schema);

/// An attribute table owning copies of its strings. A NULL value leaves that attribute out.
VaultGHashTable *vault_attributes_new(const char *vault_id, const char *version, const char *home);
/// The attribute table of a record item (or search). A NULL value leaves that attribute out.
VaultGHashTable *vault_record_attributes_new(const char *vault_id, const char *record, const char *home,
                                             const char *generation);

/// Items matching `attributes`, locked ones included (SECRET_SEARCH_ALL), with the secrets of
/// the unlocked ones when `load_secrets` is 1, loaded under `cancellable` (NULL and `error` set
/// when that fails). Free the list with vault_item_list_free.
VaultGList *vault_secret_search(VaultSecretService *service, VaultSecretSchema *schema, VaultGHashTable *attributes,
                                int load_secrets, VaultGCancellable *cancellable, VaultGError **error);
/// Stores a new item in `collection` (an alias such as "default"). 1 when stored.
int vault_secret_store(VaultSecretService *service, VaultSecretSchema *schema, VaultGHashTable *attributes,
                       const char *collection, const char *label, VaultSecretValue *value,
                       VaultGCancellable *cancellable, VaultGError **error);

int vault_secret_item_get_locked(VaultSecretItem *item);
/// The item's secret, loaded by the search, or NULL; the caller unrefs it.
VaultSecretValue *vault_secret_item_get_secret(VaultSecretItem *item);
int vault_secret_item_delete(VaultSecretItem *item, VaultGCancellable *cancellable, VaultGError **error);
/// Looks up one attribute of an item; the caller frees the result with vault_g_free.
char *vault_item_attribute(VaultSecretItem *item, const char *name);
void vault_item_list_free(VaultGList *items);

VaultSecretValue *vault_secret_value_new(const char *secret, ptrdiff_t length, const char *content_type);
const char *vault_secret_value_get(VaultSecretValue *value, size_t *length);
void vault_secret_value_unref(VaultSecretValue *value);

// Error classification (GLib error domains are functions returning quarks, the codes enums).
int vault_error_is_cancelled(const VaultGError *error);
/// GLib's and D-Bus's own timeouts: the provider is there and did not answer in time.
int vault_error_is_timeout(const VaultGError *error);
/// org.freedesktop.DBus.Error.NoReply: the bus's answer for the provider when it left the bus
/// (exited, crashed, was replaced) while a call to it was waiting; not a timeout of vault's.
int vault_error_is_no_reply(const VaultGError *error);
int vault_error_is_service_unknown(const VaultGError *error);

#endif
