/* test_dsl_bad.c — the bad-input suite: every file in tests/dsl_bad/ is a .weft program with a
 * mistake. Its first line says the exact diagnostic it must give ("# expect: FILE:LINE:COL:
 * error: ..."); more header lines may add diagnostics that must also be reported ("# also:"),
 * the status when it is not WEFT_EPARSE ("# status: EDEVICE"), and -D or --device options
 * ("# define: N=3", "# device: cuda:9"). The test checks the status, the first line of the
 * message exactly, the source line and the caret under the column that follow it, and each
 * "also" diagnostic. The runtime is CPU-only (so device messages do not depend on the machine)
 * and has one user op, touch(read, write). */
#define _POSIX_C_SOURCE 200809L /* open_memstream, mkdtemp, scandir */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "weft/dsl.h"

static int touch_cpu(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

static int status_of(const char *name) {
#define WEFT_STATUS_FIND(n, value, msg) \
  if (strcmp(name, #n) == 0) return value;
  WEFT_STATUS_MAP(WEFT_STATUS_FIND)
#undef WEFT_STATUS_FIND
  fail_msg("unknown status name '%s'", name);
  return 0;
}

/* Line `n` (1-based) of text, without its newline, into buf. */
static const char *line_of(const char *text, long n, char *buf, size_t size) {
  const char *p = text;
  for (long i = 1; i < n && p; i++) {
    p = strchr(p, '\n');
    if (p) p++;
  }
  if (p == NULL) p = "";
  size_t len = strcspn(p, "\n");
  if (len > 0 && p[len - 1] == '\r') len--;
  if (len >= size) len = size - 1;
  memcpy(buf, p, len);
  buf[len] = '\0';
  return buf;
}

/* Checks the excerpt under the first diagnostic: the source line, then a caret under column
 * `col` (tabs copied, one column per UTF-8 character, control bytes shown as '?'). */
static void check_excerpt(const char *file, const char *text, const char *msg, long line, long col) {
  char src[512], want[1200], caret[1200];
  line_of(text, line, src, sizeof src);
  if (strlen(src) > 160) return; /* long lines are shown as a window; test_dsl_parser covers it */
  size_t n = 0, k = 0;
  for (; src[n]; n++) want[n] = ((unsigned char)src[n] < 0x20 && src[n] != '\t') || src[n] == 0x7f ? '?' : src[n];
  want[n] = '\0';
  for (long i = 0; i < col - 1 && src[i]; i++) {
    unsigned char c = (unsigned char)src[i];
    if (c == '\t')
      caret[k++] = '\t';
    else if ((c & 0xc0) != 0x80)
      caret[k++] = ' ';
  }
  caret[k++] = '^';
  caret[k] = '\0';
  char got_src[1200], got_caret[1200];
  line_of(msg, 2, got_src, sizeof got_src);
  line_of(msg, 3, got_caret, sizeof got_caret);
  if (strcmp(got_src, want) != 0) fail_msg("%s: the excerpt shows\n%s\ninstead of line %ld\n%s", file, got_src, line, want);
  if (strcmp(got_caret, caret) != 0) fail_msg("%s: the caret line is\n%s|\ninstead of\n%s|", file, got_caret, caret);
}

static void check_file(weft_runtime *rt, const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char text[1 << 16];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';

  char expect[2048] = "", also[8][2048], status[32] = "EPARSE", opt_device[64] = "";
  static char defines[8][128];
  const char *defs[8];
  int nalso = 0, ndefs = 0;
  for (long n = 1;; n++) {
    char l[2048];
    line_of(text, n, l, sizeof l);
    if (strncmp(l, "# ", 2) != 0) break;
    if (n == 1 && strncmp(l, "# expect: ", 10) == 0)
      snprintf(expect, sizeof expect, "%s", l + 10);
    else if (strncmp(l, "# also: ", 8) == 0 && nalso < 8)
      snprintf(also[nalso++], sizeof also[0], "%s", l + 8);
    else if (strncmp(l, "# status: ", 10) == 0)
      snprintf(status, sizeof status, "%.30s", l + 10);
    else if (strncmp(l, "# define: ", 10) == 0 && ndefs < 8)
      defs[ndefs] = strcpy(defines[ndefs], l + 10), ndefs++;
    else if (strncmp(l, "# device: ", 10) == 0)
      snprintf(opt_device, sizeof opt_device, "%.60s", l + 10);
  }
  if (expect[0] == '\0') fail_msg("%s: the first line must be '# expect: <diagnostic>'", name);

  weft_dsl_options o;
  weft_dsl_options_init(&o);
  o.defines = defs;
  o.ndefines = ndefs;
  o.device = opt_device[0] ? opt_device : NULL;
  weft_program *p = (weft_program *)1;
  int rc = weft_program_parse(rt, name, text, len, &o, &p);
  if (rc == WEFT_OK) fail_msg("%s: parsed without error", name);
  assert_null(p);
  const char *msg = weft_last_error();
  if (rc != status_of(status)) fail_msg("%s: status %s, expected %s:\n%s", name, weft_status_name(rc), status, msg);
  char first[2048];
  line_of(msg, 1, first, sizeof first);
  if (strcmp(first, expect) != 0) fail_msg("%s: the first diagnostic is\n%s\nexpected\n%s", name, first, expect);
  long line = 0, col = 0;
  size_t nl = strlen(name);
  if (strncmp(first, name, nl) == 0 && sscanf(first + nl, ":%ld:%ld: error: ", &line, &col) == 2)
    check_excerpt(name, text, msg, line, col);
  else if (strncmp(first + nl, ": error: ", 9) != 0)
    fail_msg("%s: '%s' has neither FILE:LINE:COL: nor FILE: before 'error:'", name, first);
  for (int i = 0; i < nalso; i++) {
    int found = 0;
    for (long n = 1; !found; n++) {
      char l[2048];
      const char *at = msg;
      for (long k = 1; k < n && at; k++) at = strchr(at, '\n') ? strchr(at, '\n') + 1 : NULL;
      if (at == NULL) break;
      line_of(msg, n, l, sizeof l);
      found = strcmp(l, also[i]) == 0;
    }
    if (!found) fail_msg("%s: the diagnostics lack\n%s\nin\n%s", name, also[i], msg);
  }
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static int is_weft(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n > 5 && strcmp(e->d_name + n - 5, ".weft") == 0;
}

static void test_bad_inputs(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(1);
  weft_op_desc d;
  memset(&d, 0, sizeof d);
  d.name = "touch";
  d.nargs = 2;
  d.access[0] = WEFT_READ;
  d.access[1] = WEFT_WRITE;
  d.cpu = touch_cpu;
  CHECK(weft_op_register(rt, &d, NULL));
  struct dirent **list;
  int n = scandir(WEFT_DSL_BAD_DIR, &list, is_weft, by_name);
  assert_true(n >= 40);
  for (int i = 0; i < n; i++) {
    check_file(rt, WEFT_DSL_BAD_DIR, list[i]->d_name);
    free(list[i]);
  }
  free(list);
  weft_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_inputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
