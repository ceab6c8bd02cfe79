#ifndef CGIO_SHIM_H
#define CGIO_SHIM_H
/* GDBus and the GLib main loop, for bgtaskd and its clients. Include paths from `pkg-config gio-unix-2.0`. */
#include <string.h>
#include <glib.h>
#include <glib-unix.h>
#include <gio/gio.h>
#include <gio/gunixfdlist.h>

/* One C callback shape for every method call; Swift supplies it with a context pointer. */
typedef void (*cgio_method_fn)(void *context, const char *sender, const char *method, GVariant *parameters,
                               GDBusMethodInvocation *invocation);
typedef struct { cgio_method_fn fn; void *context; } cgio_handler;

static void cgio_method_trampoline(GDBusConnection *connection, const gchar *sender, const gchar *path,
                                   const gchar *interface, const gchar *method, GVariant *parameters,
                                   GDBusMethodInvocation *invocation, gpointer data) {
    (void)connection; (void)path; (void)interface;
    cgio_handler *h = data;
    h->fn(h->context, sender, method, parameters, invocation);
}

/* Exports the first interface of `xml` at `path`; the registration id (> 0) or 0 with *error set. */
static inline guint cgio_register(GDBusConnection *connection, const char *path, const char *xml, cgio_method_fn fn,
                                  void *context, GError **error) {
    static const GDBusInterfaceVTable vtable = { cgio_method_trampoline, NULL, NULL, { 0 } };
    GDBusNodeInfo *node = g_dbus_node_info_new_for_xml(xml, error);
    if (node == NULL) return 0;
    if (node->interfaces == NULL || node->interfaces[0] == NULL) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT, "no interface in the XML");
        g_dbus_node_info_unref(node);
        return 0;
    }
    cgio_handler *h = g_new0(cgio_handler, 1);
    h->fn = fn; h->context = context;
    guint id = g_dbus_connection_register_object(connection, path, node->interfaces[0], &vtable, h, g_free, error);
    g_dbus_node_info_unref(node);
    return id;
}

/* RequestName with DO_NOT_QUEUE, synchronously: 1 primary owner, 3 exists, 0 failed (error set). */
static inline guint cgio_request_name(GDBusConnection *connection, const char *name, GError **error) {
    GVariant *r = g_dbus_connection_call_sync(connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                              "org.freedesktop.DBus", "RequestName",
                                              g_variant_new("(su)", name, 4 /* DBUS_NAME_FLAG_DO_NOT_QUEUE */),
                                              G_VARIANT_TYPE("(u)"), G_DBUS_CALL_FLAGS_NONE, -1, NULL, error);
    if (r == NULL) return 0;
    guint32 v = 0;
    g_variant_get(r, "(u)", &v);
    g_variant_unref(r);
    return v;
}

/* What the bus knows of a sender (GetConnectionCredentials): its uid, pid, a pidfd when the bus hands one
 * (dbus-daemon 1.15.2+, dbus-broker: `ProcessFD`), and its LSM label (AppArmor, SELinux). Unknown members
 * stay as set by the caller (uid (guint32)-1, pid 0, pidfd -1, label empty). FALSE with *error set when the
 * bus did not answer. */
typedef struct { guint32 uid; guint32 pid; int pidfd; char label[256]; } cgio_credentials;
static inline gboolean cgio_sender_credentials(GDBusConnection *connection, const char *sender, cgio_credentials *out,
                                               GError **error) {
    out->uid = (guint32)-1; out->pid = 0; out->pidfd = -1; out->label[0] = 0;
    GUnixFDList *fds = NULL;
    GVariant *r = g_dbus_connection_call_with_unix_fd_list_sync(connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                                 "org.freedesktop.DBus", "GetConnectionCredentials",
                                                                 g_variant_new("(s)", sender), G_VARIANT_TYPE("(a{sv})"),
                                                                 G_DBUS_CALL_FLAGS_NONE, 2000, NULL, &fds, NULL, error);
    if (r == NULL) return FALSE;
    GVariant *dict = g_variant_get_child_value(r, 0);
    GVariantIter it;
    const char *key;
    GVariant *value;
    g_variant_iter_init(&it, dict);
    while (g_variant_iter_next(&it, "{&sv}", &key, &value)) {
        if (g_str_equal(key, "UnixUserID") && g_variant_is_of_type(value, G_VARIANT_TYPE_UINT32)) {
            out->uid = g_variant_get_uint32(value);
        } else if (g_str_equal(key, "ProcessID") && g_variant_is_of_type(value, G_VARIANT_TYPE_UINT32)) {
            out->pid = g_variant_get_uint32(value);
        } else if (g_str_equal(key, "ProcessFD") && g_variant_is_of_type(value, G_VARIANT_TYPE_HANDLE) && fds != NULL) {
            out->pidfd = g_unix_fd_list_get(fds, g_variant_get_handle(value), NULL);
        } else if (g_str_equal(key, "LinuxSecurityLabel") && g_variant_is_of_type(value, G_VARIANT_TYPE_BYTESTRING)) {
            gsize n = 0;
            const char *b = g_variant_get_fixed_array(value, &n, 1);
            if (n >= sizeof out->label) n = sizeof out->label - 1;
            memcpy(out->label, b, n);
            out->label[n] = 0;
        }
        g_variant_unref(value);
    }
    g_variant_unref(dict);
    g_variant_unref(r);
    if (fds != NULL) g_object_unref(fds);
    return TRUE;
}

/* A connection's "closed" signal (the peer went away, or the stream failed), to one C callback with a context;
 * emitted in the main context of the thread that made the connection. The handler id, for disconnecting. */
typedef void (*cgio_closed_fn)(void *context);
typedef struct { cgio_closed_fn fn; void *context; } cgio_closed_handler;
static void cgio_closed_trampoline(GDBusConnection *connection, gboolean remote_peer_vanished, GError *error, gpointer data) {
    (void)connection; (void)remote_peer_vanished; (void)error;
    cgio_closed_handler *h = data;
    h->fn(h->context);
}
static inline gulong cgio_on_closed(GDBusConnection *connection, cgio_closed_fn fn, void *context) {
    cgio_closed_handler *h = g_new0(cgio_closed_handler, 1);
    h->fn = fn; h->context = context;
    return g_signal_connect_data(connection, "closed", G_CALLBACK(cgio_closed_trampoline), h, (GClosureNotify)(void (*)(void))g_free, 0);
}

/* An array of `element_type`. The type string is used within this call: a pointer Swift passes for a String
   lives only as long as the call it is passed to (a small string is copied to a temporary), so no GVariantType
   made from one may be returned to Swift and used later. */
static inline GVariant *cgio_new_array(const char *element_type, GVariant *const *children, gsize n) {
    return g_variant_new_array(G_VARIANT_TYPE(element_type), children, n);
}

/* `ay` of `n` bytes, copied (NULL with n == 0: empty). */
static inline GVariant *cgio_new_bytes(const guint8 *bytes, gsize n) {
    return g_variant_new_fixed_array(G_VARIANT_TYPE_BYTE, n ? bytes : NULL, n, 1);
}

/* A connection to the bus at `address` (or the session bus when NULL), ready for messages. */
static inline GDBusConnection *cgio_connect(const char *address, GError **error) {
    if (address == NULL) return g_bus_get_sync(G_BUS_TYPE_SESSION, NULL, error);
    return g_dbus_connection_new_for_address_sync(address,
        G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION, NULL, NULL, error);
}

/* A peer-to-peer connection to a server's socket (no message bus, no Hello). The path is escaped for the address. */
static inline GDBusConnection *cgio_connect_peer(const char *socket_path, GError **error) {
    gchar *escaped = g_dbus_address_escape_value(socket_path);
    gchar *address = g_strconcat("unix:path=", escaped, NULL);
    GDBusConnection *c = g_dbus_connection_new_for_address_sync(address,
        G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT, NULL, NULL, error);
    g_free(address);
    g_free(escaped);
    return c;
}

/* A private connection to the session bus (not the shared singleton g_bus_get returns). */
static inline GDBusConnection *cgio_connect_private_session(GError **error) {
    gchar *address = g_dbus_address_get_for_bus_sync(G_BUS_TYPE_SESSION, NULL, error);
    if (address == NULL) return NULL;
    GDBusConnection *c = g_dbus_connection_new_for_address_sync(address,
        G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION, NULL, NULL, error);
    g_free(address);
    return c;
}

/* Runs fn(context) once on the thread that iterates `ctx` (at once if that is the caller). */
typedef void (*cgio_invoke_fn)(void *context);
typedef struct { cgio_invoke_fn fn; void *context; } cgio_invocation;
static gboolean cgio_invoke_trampoline(gpointer data) {
    cgio_invocation *i = data;
    i->fn(i->context);
    return G_SOURCE_REMOVE;
}
static inline void cgio_invoke(GMainContext *ctx, cgio_invoke_fn fn, void *context) {
    cgio_invocation *i = g_new0(cgio_invocation, 1);
    i->fn = fn; i->context = context;
    g_main_context_invoke_full(ctx, G_PRIORITY_DEFAULT, cgio_invoke_trampoline, i, g_free);
}
/* A one-shot timeout on `ctx` (not the global default context); returns the source id. */
static inline guint cgio_timeout(GMainContext *ctx, guint ms, cgio_invoke_fn fn, void *context) {
    cgio_invocation *i = g_new0(cgio_invocation, 1);
    i->fn = fn; i->context = context;
    GSource *s = g_timeout_source_new(ms);
    g_source_set_callback(s, cgio_invoke_trampoline, i, g_free);
    guint id = g_source_attach(s, ctx);
    g_source_unref(s);
    return id;
}
static inline void cgio_source_remove(GMainContext *ctx, guint id) {
    GSource *s = g_main_context_find_source_by_id(ctx, id);
    if (s != NULL) g_source_destroy(s);
}

/* An asynchronous call: fn(context, reply, NULL, NULL) or fn(context, NULL, error name, message), on the
   caller's thread-default main context. The reply is the callee's to read, not to keep. */
typedef void (*cgio_reply_fn)(void *context, GVariant *reply, const char *error_name, const char *error_message);
typedef struct { cgio_reply_fn fn; void *context; } cgio_reply_ctx;
static void cgio_reply_trampoline(GObject *source, GAsyncResult *result, gpointer data) {
    cgio_reply_ctx *c = data;
    GError *err = NULL;
    GVariant *r = g_dbus_connection_call_finish(G_DBUS_CONNECTION(source), result, &err);
    if (r != NULL) {
        c->fn(c->context, r, NULL, NULL);
        g_variant_unref(r);
    } else {
        gchar *remote = g_dbus_error_get_remote_error(err);
        if (remote != NULL) g_dbus_error_strip_remote_error(err);
        /* A local error named as BusConnection.call names it (the connection lost, the wait over), so that an
           asynchronous call without a daemon ends the CLI as a synchronous one does: not reachable, 69. */
        const char *name = remote != NULL ? remote
            : err->domain != G_IO_ERROR ? "org.freedesktop.DBus.Error.Failed"
            : err->code == G_IO_ERROR_TIMED_OUT ? "org.freedesktop.DBus.Error.TimedOut" : "org.freedesktop.DBus.Error.Disconnected";
        c->fn(c->context, NULL, name, err->message);
        g_free(remote);
        g_error_free(err);
    }
    g_free(c);
}
static inline void cgio_call_async(GDBusConnection *connection, const char *destination, const char *path, const char *interface,
                                   const char *method, GVariant *parameters, int timeout_ms, cgio_reply_fn fn, void *context) {
    cgio_reply_ctx *c = g_new0(cgio_reply_ctx, 1);
    c->fn = fn; c->context = context;
    g_dbus_connection_call(connection, destination, path, interface, method, parameters, NULL, G_DBUS_CALL_FLAGS_NONE,
                           timeout_ms, NULL, cgio_reply_trampoline, c);
}

typedef void (*cgio_signal_fn)(void *context, const char *sender, const char *path, const char *member, GVariant *parameters);
typedef struct { cgio_signal_fn fn; void *context; } cgio_signal_handler;
static void cgio_signal_trampoline(GDBusConnection *c, const gchar *sender, const gchar *path, const gchar *iface,
                                   const gchar *member, GVariant *params, gpointer data) {
    (void)c; (void)iface;
    cgio_signal_handler *h = data;
    h->fn(h->context, sender, path, member, params);
}
static inline guint cgio_subscribe(GDBusConnection *connection, const char *sender, const char *interface,
                                   const char *member, const char *path, cgio_signal_fn fn, void *context) {
    cgio_signal_handler *h = g_new0(cgio_signal_handler, 1);
    h->fn = fn; h->context = context;
    return g_dbus_connection_signal_subscribe(connection, sender, interface, member, path, NULL,
                                              G_DBUS_SIGNAL_FLAGS_NONE, cgio_signal_trampoline, h, g_free);
}
/* The system bus (DBUS_SYSTEM_BUS_ADDRESS or the standard socket), or NULL with *error set. */
static inline GDBusConnection *cgio_system_bus(GError **error) {
    return g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, error);
}

/* logind's Inhibit(what, who, why, mode) → the lock's file descriptor, or -1 with *error set. */
static inline int cgio_logind_inhibit(GDBusConnection *connection, const char *what, const char *who, const char *why,
                                      const char *mode, GError **error) {
    GUnixFDList *fds = NULL;
    GVariant *r = g_dbus_connection_call_with_unix_fd_list_sync(connection, "org.freedesktop.login1",
        "/org/freedesktop/login1", "org.freedesktop.login1.Manager", "Inhibit",
        g_variant_new("(ssss)", what, who, why, mode), G_VARIANT_TYPE("(h)"), G_DBUS_CALL_FLAGS_NONE, 5000,
        NULL, &fds, NULL, error);
    if (r == NULL) return -1;
    gint32 index = -1;
    g_variant_get(r, "(h)", &index);
    g_variant_unref(r);
    int fd = (fds != NULL && index >= 0) ? g_unix_fd_list_get(fds, index, error) : -1;
    if (fds != NULL) g_object_unref(fds);
    return fd;
}
#endif
