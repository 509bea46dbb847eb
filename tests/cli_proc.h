/* cli_proc.h — what test_cli and test_serve share: running the built `weft` command as a
 * subprocess with a time limit, capturing its exit code and output; a temporary directory for
 * the programs they write; and a server in the background. */
#ifndef WEFT_TEST_CLI_PROC_H
#define WEFT_TEST_CLI_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* The result of one command: its exit code (128 + N when killed by signal N) and what it
 * wrote, NUL-terminated. */
typedef struct tp_out {
  int code;
  char *out, *err;
  size_t out_len, err_len;
} tp_out;

/* The path of the `weft` binary under test. */
const char *tp_weft(void);

/* Runs `weft` with the NULL-terminated arguments `args` (without argv[0]), `input` on its
 * standard input (NULL: empty), in directory `cwd` (NULL: tp_dir()). Fails the test if it runs
 * longer than timeout_s. */
void tp_run(tp_out *r, const char *input, const char *cwd, double timeout_s,
            const char *const *args);
void tp_out_fini(tp_out *r);
/* tp_run in tp_dir() with a 60 s limit, then fails the test (showing what the command wrote)
 * unless it exited with `code`. */
void tp_expect(tp_out *r, int code, const char *input, const char *const *args);
/* tp_expect into a result held here: it stays valid until the next tp_cmd, which frees it, so
 * a test checks one command after another without freeing each. */
const tp_out *tp_cmd(int code, const char *input, const char *const *args);
/* The NULL-terminated arguments of a command: TP_ARGS("run", "ok.weft"). */
#define TP_ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* A fresh temporary directory for this test process, removed at exit. */
const char *tp_dir(void);
/* Writes `text` to tp_dir()/name; returns the full path (malloc'd). */
char *tp_write(const char *name, const char *text);

/* A `weft` in the background (a server): its standard output is a pipe, its standard error
 * goes to a file. */
typedef struct tp_proc {
  pid_t pid;
  int out_fd;
  char *err_path;
  char line[512];
} tp_proc;

void tp_spawn(tp_proc *p, const char *const *args);
/* Reads standard output until a line starting with `prefix`; returns the rest of that line
 * (in p->line), or NULL after timeout_s. */
const char *tp_read_line(tp_proc *p, const char *prefix, double timeout_s);
/* Sends `sig` (0: none), waits at most timeout_s for the exit (then kills it and fails the
 * test), and returns the exit code (128 + N when killed by signal N). *err (may be NULL)
 * receives its standard error, malloc'd. */
int tp_stop(tp_proc *p, int sig, double timeout_s, char **err);

/* Monotonic seconds. */
double tp_now(void);
/* 1 if s contains needle. */
int tp_has(const char *s, const char *needle);

#endif
