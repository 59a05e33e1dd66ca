// The constants of libsecret, GIO and GLib that loader.c passes or compares, with the values
// Debian 12's headers give them (libsecret 0.20, GLib 2.74), and the types loader.c declares their
// functions with. Tests/VaultKeysTests/LibSecretABITests compiles loader.c with the real headers
// (VAULT_CLIBSECRET_REAL_TYPES), where loader.c asserts each value, type and layout against them.
#ifndef VAULT_CLIBSECRET_ABI_H
#define VAULT_CLIBSECRET_ABI_H

#ifdef VAULT_CLIBSECRET_REAL_TYPES
typedef GVariant VaultGVariant;
typedef GVariantIter VaultGVariantIter;
typedef GVariantType VaultGVariantType;
// An enum parameter: the enum itself here, an int (its size and passing in the C ABI) otherwise.
#define VAULT_ENUM(type) type
#else
typedef void VaultGVariant;
typedef void VaultGVariantIter;
typedef void VaultGVariantType;
#define VAULT_ENUM(type) int
#endif

#define VAULT_SECRET_SCHEMA_NONE 0            // SecretSchemaFlags
#define VAULT_SECRET_SCHEMA_ATTRIBUTE_STRING 0  // SecretSchemaAttributeType
#define VAULT_SECRET_SEARCH_ALL 2             // SecretSearchFlags (1 << 1)
#define VAULT_SECRET_SERVICE_OPEN_SESSION 2   // SecretServiceFlags (1 << 1)
#define VAULT_SECRET_COLLECTION_NONE 0        // SecretCollectionFlags
#define VAULT_G_BUS_TYPE_SESSION 2            // GBusType
#define VAULT_G_DBUS_CALL_FLAGS_NONE 0        // GDBusCallFlags
#define VAULT_G_IO_ERROR_CANCELLED 19         // GIOErrorEnum
#define VAULT_G_IO_ERROR_TIMED_OUT 24
#define VAULT_G_DBUS_ERROR_SERVICE_UNKNOWN 2  // GDBusError
#define VAULT_G_DBUS_ERROR_NAME_HAS_NO_OWNER 3
#define VAULT_G_DBUS_ERROR_NO_REPLY 4
#define VAULT_G_DBUS_ERROR_TIMEOUT 12
#define VAULT_G_DBUS_ERROR_TIMED_OUT 20
#define VAULT_G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND 31

#endif
