#ifndef CUPOWER_SHIM_H
#define CUPOWER_SHIM_H
/* Include paths for libupower-glib, gio, gobject and glib come from `pkg-config upower-glib`. */
#include <glib.h>
#include <glib-object.h>
#include <gio/gio.h>
#include <libupower-glib/upower.h>

/* g_object_get() is C-variadic, which Swift cannot call, and UpDevice 0.99 has no
 * per-property getters: typed wrappers per property type. */
static inline double cup_get_double(gpointer obj, const char *prop) {
    double v = 0; g_object_get(obj, prop, &v, NULL); return v;
}
static inline guint cup_get_uint(gpointer obj, const char *prop) {
    guint v = 0; g_object_get(obj, prop, &v, NULL); return v;
}
static inline gint64 cup_get_int64(gpointer obj, const char *prop) {
    gint64 v = 0; g_object_get(obj, prop, &v, NULL); return v;
}
static inline gboolean cup_get_bool(gpointer obj, const char *prop) {
    gboolean v = FALSE; g_object_get(obj, prop, &v, NULL); return v;
}
/* Newly allocated (g_free) or NULL. */
static inline gchar *cup_get_string(gpointer obj, const char *prop) {
    gchar *v = NULL; g_object_get(obj, prop, &v, NULL); return v;
}
static inline gboolean cup_has_property(gpointer obj, const char *prop) {
    return g_object_class_find_property(G_OBJECT_GET_CLASS(obj), prop) != NULL;
}

/* A plain C callback with one context pointer; signal handlers of every shape
 * funnel into it so Swift only ever provides one kind of @convention(c) function. */
typedef void (*cup_callback)(void *context);
typedef struct { cup_callback fn; void *context; } cup_closure;

static void cup_closure_free(gpointer data, GClosure *closure) { (void)closure; g_free(data); }
static void cup_notify_trampoline(GObject *obj, GParamSpec *pspec, gpointer data) {
    (void)obj; (void)pspec; cup_closure *c = data; c->fn(c->context);
}
static void cup_device_trampoline(gpointer client, gpointer device, gpointer data) {
    (void)client; (void)device; cup_closure *c = data; c->fn(c->context);
}
/* g_signal_connect is a macro. `detailed` is e.g. "notify" or "notify::on-battery". */
static inline gulong cup_connect_notify(gpointer instance, const char *detailed, cup_callback fn, void *context) {
    cup_closure *c = g_new0(cup_closure, 1); c->fn = fn; c->context = context;
    return g_signal_connect_data(instance, detailed, G_CALLBACK(cup_notify_trampoline), c, cup_closure_free, 0);
}
/* UpClient's "device-added" / "device-removed" (one pointer argument). */
static inline gulong cup_connect_device_signal(gpointer instance, const char *name, cup_callback fn, void *context) {
    cup_closure *c = g_new0(cup_closure, 1); c->fn = fn; c->context = context;
    return g_signal_connect_data(instance, name, G_CALLBACK(cup_device_trampoline), c, cup_closure_free, 0);
}


static void cup_dbus_signal_trampoline(GDBusConnection *conn, const gchar *sender, const gchar *path,
                                       const gchar *iface, const gchar *signal, GVariant *params, gpointer data) {
    (void)conn; (void)sender; (void)path; (void)iface; (void)signal; (void)params;
    cup_closure *c = data; c->fn(c->context);
}
static void cup_closure_free_plain(gpointer data) { g_free(data); }
/* Subscribe to PropertiesChanged of one object (and NameOwnerChanged for the service, so a daemon
 * that starts or stops later is noticed). Returns the two subscription ids packed in out params. */
static inline void cup_dbus_watch_properties(GDBusConnection *bus, const char *name, const char *path,
                                             cup_callback fn, void *context, guint *props_id, guint *owner_id) {
    cup_closure *c1 = g_new0(cup_closure, 1); c1->fn = fn; c1->context = context;
    *props_id = g_dbus_connection_signal_subscribe(bus, name, "org.freedesktop.DBus.Properties", "PropertiesChanged",
                                                   path, NULL, G_DBUS_SIGNAL_FLAGS_NONE,
                                                   cup_dbus_signal_trampoline, c1, cup_closure_free_plain);
    cup_closure *c2 = g_new0(cup_closure, 1); c2->fn = fn; c2->context = context;
    *owner_id = g_dbus_connection_signal_subscribe(bus, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged",
                                                   "/org/freedesktop/DBus", name, G_DBUS_SIGNAL_FLAGS_NONE,
                                                   cup_dbus_signal_trampoline, c2, cup_closure_free_plain);
}

static gboolean cup_idle_trampoline(gpointer data) { cup_closure *c = data; c->fn(c->context); return G_SOURCE_REMOVE; }
/* Runs fn once on ctx's thread after the events already queued there: coalesces bursts of notifies. */
static inline void cup_invoke_idle(GMainContext *ctx, cup_callback fn, void *context) {
    cup_closure *c = g_new0(cup_closure, 1); c->fn = fn; c->context = context;
    GSource *s = g_idle_source_new();
    g_source_set_callback(s, cup_idle_trampoline, c, g_free);
    g_source_attach(s, ctx);
    g_source_unref(s);
}
/* One asynchronous call whose reply (or error) lands in `slot`; `*outstanding` counts the calls in flight.
 * Several are sent together and answered in one wait (a one-shot `bgtask status`). */
typedef struct { GVariant *reply; GError *error; int *outstanding; } cup_slot;
static void cup_slot_done(GObject *source, GAsyncResult *result, gpointer data) {
    cup_slot *s = data;
    s->reply = g_dbus_connection_call_finish(G_DBUS_CONNECTION(source), result, &s->error);
    (*s->outstanding)--;
}
static inline void cup_call_into(GDBusConnection *bus, const char *name, const char *path, const char *iface,
                                 const char *method, GVariant *params, const char *reply_type, gboolean auto_start,
                                 int timeout_ms, cup_slot *slot) {
    (*slot->outstanding)++;
    g_dbus_connection_call(bus, name, path, iface, method, params, reply_type != NULL ? G_VARIANT_TYPE(reply_type) : NULL,
                           auto_start ? G_DBUS_CALL_FLAGS_NONE : G_DBUS_CALL_FLAGS_NO_AUTO_START, timeout_ms, NULL,
                           cup_slot_done, slot);
}
static inline GVariant *cup_params_s(const char *a) { return g_variant_new("(s)", a); }
static inline GVariant *cup_params_ss(const char *a, const char *b) { return g_variant_new("(ss)", a, b); }
/* The first child of a reply tuple (g_variant_unref), unboxing a `v`. */
static inline GVariant *cup_reply_first(GVariant *reply) {
    GVariant *c = g_variant_get_child_value(reply, 0);
    if (g_variant_is_of_type(c, G_VARIANT_TYPE_VARIANT)) { GVariant *in = g_variant_get_variant(c); g_variant_unref(c); return in; }
    return c;
}
/* A key of an a{sv} (g_variant_unref), or NULL. */
static inline GVariant *cup_lookup(GVariant *dict, const char *key) { return g_variant_lookup_value(dict, key, NULL); }
static inline gboolean cup_variant_is(GVariant *v, const char *type) { return g_variant_is_of_type(v, G_VARIANT_TYPE(type)); }
/* Every signal a service sends, on any object (logind's sessions come and go), and its NameOwnerChanged. */
static inline void cup_dbus_watch_sender(GDBusConnection *bus, const char *name, const char *iface, cup_callback fn,
                                         void *context, guint *signals_id, guint *owner_id) {
    cup_closure *c1 = g_new0(cup_closure, 1); c1->fn = fn; c1->context = context;
    *signals_id = g_dbus_connection_signal_subscribe(bus, name, iface, NULL, NULL, NULL, G_DBUS_SIGNAL_FLAGS_NONE,
                                                     cup_dbus_signal_trampoline, c1, cup_closure_free_plain);
    cup_closure *c2 = g_new0(cup_closure, 1); c2->fn = fn; c2->context = context;
    *owner_id = g_dbus_connection_signal_subscribe(bus, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged",
                                                   "/org/freedesktop/DBus", name, G_DBUS_SIGNAL_FLAGS_NONE,
                                                   cup_dbus_signal_trampoline, c2, cup_closure_free_plain);
}
/* A signal whose first argument is a uint32 (Mutter's IdleMonitor WatchFired(u id)). */
typedef void (*cup_uint_callback)(void *context, guint32 value);
typedef struct { cup_uint_callback fn; void *context; } cup_uint_closure;
static void cup_dbus_uint_trampoline(GDBusConnection *conn, const gchar *sender, const gchar *path,
                                     const gchar *iface, const gchar *signal, GVariant *params, gpointer data) {
    (void)conn; (void)sender; (void)path; (void)iface; (void)signal;
    cup_uint_closure *c = data;
    if (g_variant_is_of_type(params, G_VARIANT_TYPE("(u)"))) { guint32 v; g_variant_get(params, "(u)", &v); c->fn(c->context, v); }
}
static inline guint cup_dbus_watch_uint_signal(GDBusConnection *bus, const char *name, const char *path, const char *iface,
                                               const char *member, cup_uint_callback fn, void *context) {
    cup_uint_closure *c = g_new0(cup_uint_closure, 1); c->fn = fn; c->context = context;
    return g_dbus_connection_signal_subscribe(bus, name, iface, member, path, NULL, G_DBUS_SIGNAL_FLAGS_NONE,
                                              cup_dbus_uint_trampoline, c, cup_closure_free_plain);
}
/* Runs fn once on ctx after `ms`; g_source_destroy + g_source_unref the result to call it off. */
static gboolean cup_timeout_trampoline(gpointer data) { cup_closure *c = data; c->fn(c->context); return G_SOURCE_REMOVE; }
static inline GSource *cup_timeout(GMainContext *ctx, guint ms, cup_callback fn, void *context) {
    cup_closure *c = g_new0(cup_closure, 1); c->fn = fn; c->context = context;
    GSource *s = g_timeout_source_new(ms);
    g_source_set_callback(s, cup_timeout_trampoline, c, g_free);
    g_source_attach(s, ctx);
    return s;
}
/* A synchronous call that is not allowed to start the service; NULL and `err` set on failure. */
static inline GVariant *cup_call_sync(GDBusConnection *bus, const char *name, const char *path, const char *iface,
                                      const char *method, GVariant *params, const char *reply_type, int timeout_ms, GError **err) {
    return g_dbus_connection_call_sync(bus, name, path, iface, method, params,
                                       reply_type != NULL ? G_VARIANT_TYPE(reply_type) : NULL,
                                       G_DBUS_CALL_FLAGS_NO_AUTO_START, timeout_ms, NULL, err);
}
static inline GVariant *cup_params_t(guint64 a) { return g_variant_new("(t)", a); }
static inline GVariant *cup_params_u(guint32 a) { return g_variant_new("(u)", a); }
/* Child `i` of a tuple or array (g_variant_unref). */
static inline GVariant *cup_child(GVariant *v, gsize i) { return g_variant_get_child_value(v, i); }
/* A signal with its object path and arguments (logind's PropertiesChanged carries the new values: no call needed). */
typedef void (*cup_args_callback)(void *context, const char *path, const char *member, GVariant *params);
typedef struct { cup_args_callback fn; void *context; } cup_args_closure;
static void cup_dbus_args_trampoline(GDBusConnection *conn, const gchar *sender, const gchar *path,
                                     const gchar *iface, const gchar *signal, GVariant *params, gpointer data) {
    (void)conn; (void)sender; (void)iface;
    cup_args_closure *c = data; c->fn(c->context, path, signal, params);
}
static inline guint cup_dbus_watch_args(GDBusConnection *bus, const char *name, const char *iface,
                                        cup_args_callback fn, void *context) {
    cup_args_closure *c = g_new0(cup_args_closure, 1); c->fn = fn; c->context = context;
    return g_dbus_connection_signal_subscribe(bus, name, iface, NULL, NULL, NULL, G_DBUS_SIGNAL_FLAGS_NONE,
                                              cup_dbus_args_trampoline, c, cup_closure_free_plain);
}
/* NameOwnerChanged for one name: the service started, stopped or restarted. */
static inline guint cup_dbus_watch_owner(GDBusConnection *bus, const char *name, cup_callback fn, void *context) {
    cup_closure *c = g_new0(cup_closure, 1); c->fn = fn; c->context = context;
    return g_dbus_connection_signal_subscribe(bus, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged",
                                              "/org/freedesktop/DBus", name, G_DBUS_SIGNAL_FLAGS_NONE,
                                              cup_dbus_signal_trampoline, c, cup_closure_free_plain);
}
#endif
