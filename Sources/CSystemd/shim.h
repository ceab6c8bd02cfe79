/* libsystemd's journal API: sd_journal_sendv (the variadic sd_journal_send cannot be called from Swift). */
#include <systemd/sd-journal.h>
