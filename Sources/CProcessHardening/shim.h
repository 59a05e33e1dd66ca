// Process hardening for Vault's ProcessHardening (Sources/Vault/ProcessHardening.swift), the
// scan's private descriptor table (VaultScan's FilePipeline), and the terminal guard of VaultCLI's
// passphrase prompt. The fatal-signal handler must be
// async-signal-safe, so it is C, not Swift (no allocation, no locks, no runtime calls: write(2),
// sigaction(2), sigprocmask(2), alarm(2), raise(3) only). prctl and syscall are variadic, so they
// need wrappers to be called from Swift. No library to link: everything here is glibc.
#ifndef VAULT_CPROCESSHARDENING_SHIM_H
#define VAULT_CPROCESSHARDENING_SHIM_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

// glibc's short program name (errno.h declares it only under _GNU_SOURCE).
extern char *program_invocation_short_name;

// unshare(2) is declared by sched.h only under _GNU_SOURCE; CLONE_FILES is its flag (linux/sched.h).
extern int unshare(int flags);
#define VAULT_CLONE_FILES 0x00000400

/// Gives the calling thread a descriptor table of its own (a copy of the process's), so that what
/// it opens and closes cannot drop the POSIX record locks the rest of the process holds: Linux
/// keys those locks by descriptor table, and closing any descriptor of a file drops every lock its
/// table holds on that file (SQLite's, for a database this thread reads). The copies of the
/// process's descriptors above 2 are then closed in the new table, which leaves the process's own
/// descriptors and locks as they were: with close_range (Linux 5.9), else one by one as
/// /proc/thread-self/fd lists them. Threads this thread starts share its table. 0 on success, else
/// an errno value (the table is then the process's, or its copies could not all be closed).
/// `try_close_range` 0 skips close_range and takes the one-by-one path (for its test).
static inline int vault_private_descriptor_table_closing(int try_close_range) {
  if (unshare(VAULT_CLONE_FILES) != 0) return errno;
#ifdef SYS_close_range
  if (try_close_range && syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return 0;
#endif
  DIR *listing = opendir("/proc/thread-self/fd");
  if (listing == NULL) return errno;
  int own = dirfd(listing);
  struct dirent *entry;
  while ((entry = readdir(listing)) != NULL) {
    char *end;
    long fd = strtol(entry->d_name, &end, 10);
    if (*end == 0 && end != entry->d_name && fd > 2 && fd != own) close((int)fd);
  }
  closedir(listing);
  return 0;
}

/// `vault_private_descriptor_table_closing` with close_range tried first: what the scan calls.
static inline int vault_private_descriptor_table(void) { return vault_private_descriptor_table_closing(1); }

/// Writes "/proc/PID/task/TID/fd/" for the calling thread into `buffer` (NUL-terminated), as the
/// process's /proc names it (its PID namespace may not be the process's own): from the
/// /proc/thread-self link, else from getpid and gettid. 0 on success, else an errno value.
static inline int vault_thread_descriptor_directory(char *buffer, size_t size) {
  char target[64];
  ssize_t count = readlink("/proc/thread-self", target, sizeof target - 1);
  int written;
  if (count > 0) {
    target[count] = 0;
    written = snprintf(buffer, size, "/proc/%s/fd/", target);
  } else {
    written = snprintf(buffer, size, "/proc/%ld/task/%ld/fd/", (long)getpid(), (long)syscall(SYS_gettid));
  }
  return written > 0 && (size_t)written < size ? 0 : ENAMETOOLONG;
}
/// Marks the process non-dumpable: no core file and no systemd-coredump entry for it, and no
/// ptrace attach or /proc/PID/mem read by other processes of the same user. 0 on success.
static inline int vault_set_nondumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }

/// 1 when the process is dumpable, 0 when not, -1 on error.
static inline int vault_get_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }

static inline void vault_crash_write(const char *text) {
  size_t length = 0;
  while (text[length] != 0) length++;
  while (length > 0) {
    ssize_t written = write(STDERR_FILENO, text, length);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;  // stderr closed or broken: nothing more to say
    text += written;
    length -= (size_t)written;
  }
}

/// The fatal-signal handler: one fixed line naming the program and the signal, then death by that
/// same signal. Nothing of the process's state (registers, stack, memory) is read or printed.
static inline void vault_fatal_signal_handler(int signo) {
  // A stderr that blocks (a full pipe nobody reads) must not keep a crashed process alive:
  // SIGALRM at its default action ends it after 5 s. The signal mask survives exec, so a parent
  // may have left SIGALRM blocked in this thread: unblock it here (the install function's
  // sa_mask only keeps the handler itself from adding it). SIG_IGN first discards a SIGALRM
  // already pending, which would otherwise end the process before the message is written.
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = SIG_IGN;
  sigaction(SIGALRM, &action, NULL);
  action.sa_handler = SIG_DFL;
  sigaction(SIGALRM, &action, NULL);
  sigset_t alarm_only;
  sigemptyset(&alarm_only);
  sigaddset(&alarm_only, SIGALRM);
  sigprocmask(SIG_UNBLOCK, &alarm_only, NULL);
  alarm(5);
  const char *name = "a fatal signal";
  switch (signo) {
  case SIGILL: name = "SIGILL (a Swift runtime trap: overflow, nil unwrap, precondition)"; break;
  case SIGTRAP: name = "SIGTRAP (a runtime trap)"; break;
  case SIGABRT: name = "SIGABRT (abort)"; break;
  case SIGSEGV: name = "SIGSEGV (invalid memory access)"; break;
  case SIGBUS: name = "SIGBUS (invalid memory access)"; break;
  case SIGFPE: name = "SIGFPE (arithmetic fault)"; break;
  case SIGQUIT: name = "SIGQUIT (quit requested)"; break;
  }
  vault_crash_write(program_invocation_short_name != 0 ? program_invocation_short_name : "process");
  vault_crash_write(": crashed on ");
  vault_crash_write(name);
  vault_crash_write("; crash report suppressed (no registers, memory or core dump, ");
  vault_crash_write("which could hold keys or plaintext)\n");
  // SA_RESETHAND already restored the default action. The signal is blocked while this handler
  // runs, so raise() leaves it pending and it is delivered, fatally, on return; a fault (ud2, a
  // bad access) also simply happens again on return.
  raise(signo);
}

/// The signals Swift's runtime backtracer catches on Linux (stdlib/public/runtime/
/// CrashHandlerLinux.cpp): SIGQUIT, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTRAP.
static const int vault_fatal_signals[] = {SIGQUIT, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTRAP};

/// Replaces the handlers of `vault_fatal_signals` (the runtime's backtracer among them) with
/// `vault_fatal_signal_handler`, and gives the calling thread an alternate signal stack if it
/// has none, so a stack overflow still gets the message. 0 on success, else an errno value.
static inline int vault_install_fatal_signal_handlers(void) {
  stack_t current;
  if (sigaltstack(NULL, &current) == 0 && current.ss_sp == NULL) {
    size_t size = 65536;
    void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack != MAP_FAILED) {
      stack_t alternate;
      memset(&alternate, 0, sizeof alternate);
      alternate.ss_sp = stack;
      alternate.ss_size = size;
      if (sigaltstack(&alternate, NULL) != 0) munmap(stack, size);
    }
  }
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = vault_fatal_signal_handler;
  sigfillset(&action.sa_mask);
  sigdelset(&action.sa_mask, SIGALRM);
  action.sa_flags = SA_ONSTACK | SA_RESETHAND;
  for (size_t i = 0; i < sizeof vault_fatal_signals / sizeof vault_fatal_signals[0]; i++) {
    if (sigaction(vault_fatal_signals[i], &action, NULL) != 0) return errno;
  }
  return 0;
}

/// Ignores SIGXFSZ, so a write past RLIMIT_FSIZE (`ulimit -f`) fails with EFBIG instead of
/// killing the process without a message. 0 on success, else an errno value.
static inline int vault_ignore_file_size_signal(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = SIG_IGN;
  return sigaction(SIGXFSZ, &action, NULL) == 0 ? 0 : errno;
}

/// Whether `signo`'s handler is ours (for `ProcessHardening.isApplied`).
static inline int vault_fatal_signal_handler_installed(int signo) {
  struct sigaction current;
  if (sigaction(signo, NULL, &current) != 0) return 0;
  return current.sa_handler == vault_fatal_signal_handler;
}

// MARK: - The terminal guard of a prompt without echo

/// The signals that end a process at a prompt (by default, or by the fatal-signal handler above
/// for SIGQUIT): the terminal is restored, then the signal does what it did before the prompt.
static const int vault_tty_guard_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2, SIGPIPE};
#define VAULT_TTY_GUARD_COUNT (sizeof vault_tty_guard_signals / sizeof vault_tty_guard_signals[0])

/// The terminal a prompt turned echo off on (fd -1: none), its mode before, and the actions the
/// guard replaced.
struct vault_tty_guard_state {
  int fd;
  struct termios saved;
  struct sigaction previous[VAULT_TTY_GUARD_COUNT];
  int installed[VAULT_TTY_GUARD_COUNT];
  struct sigaction previous_stop;
  int stop_ignored;
};

/// The guard's one state, a function's static (a header's static variables are not emitted for
/// Swift); each Swift module calling these has its own copy: only VaultCLI's prompt does.
static inline struct vault_tty_guard_state *vault_tty_guard(void) {
  static struct vault_tty_guard_state state = {.fd = -1};
  return &state;
}

/// Puts the terminal back as it was before the prompt, puts back the signal's earlier action,
/// and raises the signal again: blocked while this runs, it is delivered with that action on
/// return. tcsetattr, sigaction and raise are async-signal-safe.
static inline void vault_tty_guard_handler(int signo) {
  int saved_errno = errno;
  struct vault_tty_guard_state *state = vault_tty_guard();
  if (state->fd >= 0) tcsetattr(state->fd, TCSAFLUSH, &state->saved);
  for (size_t i = 0; i < VAULT_TTY_GUARD_COUNT; i++) {
    if (vault_tty_guard_signals[i] == signo) sigaction(signo, &state->previous[i], NULL);
  }
  raise(signo);
  errno = saved_errno;
}

/// Before a prompt turns echo off on `fd`, whose mode is `saved`: SIGINT, SIGTERM, SIGHUP,
/// SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2 and SIGPIPE restore that mode before they act (a shell that does not reset the terminal, dash or
/// a script, would otherwise be left without echo), except those the process ignores; SIGTSTP
/// (Ctrl-Z) is ignored until `vault_tty_guard_end`, so the process never stops with echo off.
/// 0 on success, else an errno value (call `vault_tty_guard_end` either way).
static inline int vault_tty_guard_begin(int fd, const struct termios *saved) {
  struct vault_tty_guard_state *state = vault_tty_guard();
  state->saved = *saved;
  state->fd = fd;
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = vault_tty_guard_handler;
  sigfillset(&action.sa_mask);
  for (size_t i = 0; i < VAULT_TTY_GUARD_COUNT; i++) {
    state->installed[i] = 0;
    if (sigaction(vault_tty_guard_signals[i], NULL, &state->previous[i]) != 0) return errno;
    if (state->previous[i].sa_handler == SIG_IGN) continue;
    if (sigaction(vault_tty_guard_signals[i], &action, NULL) != 0) return errno;
    state->installed[i] = 1;
  }
  memset(&action, 0, sizeof action);
  action.sa_handler = SIG_IGN;
  if (sigaction(SIGTSTP, &action, &state->previous_stop) != 0) return errno;
  state->stop_ignored = 1;
  return 0;
}

/// After the prompt put the terminal back: the signals' earlier actions again.
static inline void vault_tty_guard_end(void) {
  struct vault_tty_guard_state *state = vault_tty_guard();
  for (size_t i = 0; i < VAULT_TTY_GUARD_COUNT; i++) {
    if (state->installed[i]) sigaction(vault_tty_guard_signals[i], &state->previous[i], NULL);
    state->installed[i] = 0;
  }
  if (state->stop_ignored) sigaction(SIGTSTP, &state->previous_stop, NULL);
  state->stop_ignored = 0;
  state->fd = -1;
}

#endif
