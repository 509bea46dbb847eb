/* cli_proc.c — see cli_proc.h. fork/exec with pipes read through poll, so a test never hangs
 * on a command: every wait has a deadline, after which the child is killed and the test
 * fails. The tests that use it are single-threaded, so fork is safe under the sanitizers. */
#include "cli_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

double tp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tp_has(const char *s, const char *needle) { return s != NULL && strstr(s, needle) != NULL; }

const char *tp_weft(void) {
  static char path[4096];
  if (path[0]) return path;
  const char *env = getenv("WEFT_BIN");
  if (env != NULL && *env) {
    snprintf(path, sizeof path, "%s", env);
    return path;
  }
  if (access(WEFT_CLI_PATH, X_OK) == 0) {
    snprintf(path, sizeof path, "%s", WEFT_CLI_PATH);
    return path;
  }
  /* Beside this test binary (a staged copy of the build). */
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 8);
  if (n > 0) {
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (slash != NULL) strcpy(slash + 1, "weft");
  }
  return path;
}

static char dir[256];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static void rm_dir(void) {
  if (dir[0]) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tp_dir(void) {
  if (dir[0]) return dir;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/weft-test-XXXXXX", tmp != NULL && *tmp ? tmp : "/tmp");
  if (mkdtemp(dir) == NULL) fail_msg("mkdtemp: %s", strerror(errno));
  atexit(rm_dir);
  return dir;
}

char *tp_write(const char *name, const char *text) {
  size_t n = strlen(tp_dir()) + strlen(name) + 2;
  char *path = malloc(n);
  assert_non_null(path);
  snprintf(path, n, "%s/%s", tp_dir(), name);
  FILE *f = fopen(path, "wb");
  if (f == NULL) fail_msg("cannot write %s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
  return path;
}

/* argv for exec: the binary, then args. */
static char **make_argv(const char *const *args) {
  int n = 0;
  while (args[n] != NULL) n++;
  char **v = calloc((size_t)n + 2, sizeof *v);
  assert_non_null(v);
  v[0] = (char *)tp_weft();
  for (int i = 0; i < n; i++) v[i + 1] = (char *)args[i];
  return v;
}

static void append(char **buf, size_t *len, size_t *cap, const char *data, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t c = *cap ? *cap : 4096;
    while (c < *len + n + 1) c *= 2;
    *buf = realloc(*buf, c);
    assert_non_null(*buf);
    *cap = c;
  }
  memcpy(*buf + *len, data, n);
  *len += n;
  (*buf)[*len] = '\0';
}

static int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

void tp_run(tp_out *r, const char *input, const char *cwd, double timeout_s,
            const char *const *args) {
  memset(r, 0, sizeof *r);
  int in[2], out[2], err[2];
  assert_int_equal(pipe2(in, O_CLOEXEC), 0);
  assert_int_equal(pipe2(out, O_CLOEXEC), 0);
  assert_int_equal(pipe2(err, O_CLOEXEC), 0);
  char **argv = make_argv(args);
  const char *wd = cwd != NULL ? cwd : tp_dir();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    if (chdir(wd) != 0) _exit(126);
    execv(argv[0], argv);
    _exit(127);
  }
  free(argv);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  signal(SIGPIPE, SIG_IGN);
  size_t in_len = input != NULL ? strlen(input) : 0, in_off = 0;
  if (in_len == 0) {
    close(in[1]);
    in[1] = -1;
  } else {
    fcntl(in[1], F_SETFL, O_NONBLOCK);
  }
  size_t ocap = 0, ecap = 0;
  append(&r->out, &r->out_len, &ocap, "", 0);
  append(&r->err, &r->err_len, &ecap, "", 0);
  double deadline = tp_now() + timeout_s;
  int open_fds = 2;
  while (open_fds > 0) {
    struct pollfd p[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {in[1], POLLOUT, 0}};
    int left = (int)((deadline - tp_now()) * 1000);
    if (left <= 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      fail_msg("'weft %s ...' ran longer than %.0f s", args[0] != NULL ? args[0] : "",
               timeout_s);
    }
    if (poll(p, in[1] >= 0 ? 3 : 2, left) < 0) continue;
    char buf[65536];
    for (int k = 0; k < 2; k++) {
      if (p[k].fd < 0 || !(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(p[k].fd, buf, sizeof buf);
      if (n > 0) {
        if (k == 0)
          append(&r->out, &r->out_len, &ocap, buf, (size_t)n);
        else
          append(&r->err, &r->err_len, &ecap, buf, (size_t)n);
      } else if (n == 0 || errno != EINTR) {
        close(p[k].fd);
        if (k == 0) out[0] = -1; else err[0] = -1;
        open_fds--;
      }
    }
    if (in[1] >= 0 && (p[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n = write(in[1], input + in_off, in_len - in_off);
      if (n > 0) in_off += (size_t)n;
      if (n < 0 && errno != EAGAIN && errno != EINTR) in_off = in_len;
      if (in_off == in_len) {
        close(in[1]);
        in[1] = -1;
      }
    }
  }
  if (in[1] >= 0) close(in[1]);
  int status;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (tp_now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      fail_msg("'weft %s ...' did not exit after closing its output",
               args[0] != NULL ? args[0] : "");
    }
    usleep(1000);
  }
  r->code = decode(status);
}

void tp_expect(tp_out *r, int code, const char *input, const char *const *args) {
  tp_run(r, input, NULL, 60, args);
  if (r->code != code)
    fail_msg("weft %s: exit %d, expected %d\nstdout: %s\nstderr: %s", args[0], r->code, code,
             r->out, r->err);
}

void tp_out_fini(tp_out *r) {
  free(r->out);
  free(r->err);
  memset(r, 0, sizeof *r);
}

const tp_out *tp_cmd(int code, const char *input, const char *const *args) {
  static tp_out last;
  tp_out_fini(&last);
  tp_expect(&last, code, input, args);
  return &last;
}

void tp_spawn(tp_proc *p, const char *const *args) {
  memset(p, 0, sizeof *p);
  static int counter;
  char name[64];
  snprintf(name, sizeof name, "server-%d.err", counter++);
  p->err_path = tp_write(name, "");
  int out[2];
  assert_int_equal(pipe2(out, O_CLOEXEC), 0);
  char **argv = make_argv(args);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(p->err_path, O_WRONLY | O_TRUNC);
    int null = open("/dev/null", O_RDONLY);
    if (fd < 0 || null < 0 || chdir(tp_dir()) != 0) _exit(126);
    dup2(null, 0);
    dup2(out[1], 1);
    dup2(fd, 2);
    execv(argv[0], argv);
    _exit(127);
  }
  free(argv);
  close(out[1]);
  p->pid = pid;
  p->out_fd = out[0];
}

const char *tp_read_line(tp_proc *p, const char *prefix, double timeout_s) {
  double deadline = tp_now() + timeout_s;
  size_t n = 0, pl = strlen(prefix);
  for (;;) {
    int left = (int)((deadline - tp_now()) * 1000);
    if (left <= 0) return NULL;
    struct pollfd pf = {p->out_fd, POLLIN, 0};
    if (poll(&pf, 1, left) <= 0) continue;
    char ch;
    ssize_t k = read(p->out_fd, &ch, 1);
    if (k <= 0) return NULL;
    if (ch != '\n') {
      if (n + 1 < sizeof p->line) p->line[n++] = ch;
      continue;
    }
    p->line[n] = '\0';
    if (strncmp(p->line, prefix, pl) == 0) return p->line + pl;
    n = 0;
  }
}

int tp_stop(tp_proc *p, int sig, double timeout_s, char **err) {
  if (sig != 0) kill(p->pid, sig);
  double deadline = tp_now() + timeout_s;
  int status, code;
  for (;;) {
    pid_t w = waitpid(p->pid, &status, WNOHANG);
    if (w == p->pid) {
      code = decode(status);
      break;
    }
    if (tp_now() > deadline) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, NULL, 0);
      close(p->out_fd);
      fail_msg("the server (pid %d) did not exit within %.0f s", (int)p->pid, timeout_s);
    }
    usleep(2000);
  }
  close(p->out_fd);
  if (err != NULL) {
    FILE *f = fopen(p->err_path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    append(&buf, &len, &cap, "", 0);
    if (f != NULL) {
      char chunk[4096];
      size_t k;
      while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) append(&buf, &len, &cap, chunk, k);
      fclose(f);
    }
    *err = buf;
  }
  free(p->err_path);
  p->err_path = NULL;
  return code;
}
