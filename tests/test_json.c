/* test_json.c — src/util/json.c and src/util/strbuf.c: the string buffer, the UTF-8 repair of
 * every kind of ill-formed sequence, JSON strings and numbers written through jansson, and
 * documents read (errors with line and column, a key given twice named by its path); then
 * valid JSON everywhere for tensor, node and file names that are not UTF-8 — the Chrome trace,
 * the run statistics and the SVG timeline (valid UTF-8) through the C API, and `weft run --json`, `weft run --trace`,
 * `weft check --json` and `weft explain` through the command — each output parsed by jansson
 * (which refuses invalid UTF-8), the names read back with U+FFFD where the bad bytes were. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_proc.h"
#include "testutil.h"
#include "util/json.h"
#include "util/strbuf.h"
#include "weft/report.h"

#define FFFD "\xef\xbf\xbd"

/* A tensor name with bytes that are not UTF-8 (FF, FE), a control character, a quote and a
 * multi-byte sequence cut short (E2 82 of the euro sign's E2 82 AC), and what it reads back as. */
#define BAD_TENSOR "bad\xff\xfe\x01\"q\xe2\x82"
#define BAD_TENSOR_FIXED "bad" FFFD FFFD "\x01\"q" FFFD
/* A node name: an overlong '/' (C0 AF), a tab, a UTF-16 surrogate (ED A0 80). */
#define BAD_NODE "node\xc0\xaf\t\xed\xa0\x80"
#define BAD_NODE_FIXED "node" FFFD FFFD "\t" FFFD FFFD FFFD
/* A file name: a lone continuation byte and a four-byte sequence above U+10FFFF. */
#define BAD_FILE "f\x80\xf4\x90\x80\x80.weft"
#define BAD_FILE_FIXED "f" FFFD FFFD FFFD FFFD FFFD ".weft"

/* ---- helpers --------------------------------------------------------------------------- */

/* Parses `text` as jansson does by default (strict UTF-8, any value at the top); fails the
 * test with jansson's message if it cannot. */
static json_t *parse(const char *text, size_t len) {
  json_error_t e;
  json_t *j = json_loadb(text, len, JSON_DECODE_ANY, &e);
  if (j == NULL) fail_msg("not valid JSON (%s at line %d, column %d): %.*s", e.text, e.line, e.column, (int)len, text);
  return j;
}

/* What `weft__utf8_repair` makes of s[0..n). The caller frees it. */
static char *repaired(const char *s, size_t n) {
  weft__strbuf b;
  weft__strbuf_init(&b);
  weft__utf8_repair(&b, s, n);
  char *out;
  CHECK(weft__strbuf_take(&b, "a test string", &out));
  return out;
}

/* What weft__json_fput_str writes for s to a stream, given the writer's status *rc (updated);
 * the caller frees it. */
static char *fput_str_text(const char *s, int *rc, size_t *len) {
  char *text = NULL;
  FILE *f = open_memstream(&text, len);
  assert_non_null(f);
  weft__json_fput_str(f, s, rc);
  fclose(f);
  return text;
}

/* The string member `key` of object o (NULL if absent or not a string). */
static const char *str_at(const json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

/* ---- the string buffer ------------------------------------------------------------------- */

static void test_strbuf(void **state) {
  (void)state;
  weft__strbuf b;
  weft__strbuf_init(&b);
  assert_null(b.data);
  weft__strbuf_puts(&b, "ab");
  weft__strbuf_put(&b, "c\0d", 3);
  assert_int_equal(b.len, 5);
  assert_memory_equal(b.data, "abc\0d", 6);
  char big[1000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  weft__strbuf_printf(&b, "[%s|%d]", big, 42); /* longer than printf's first attempt */
  assert_int_equal(b.len, 5 + 1 + 999 + 4);
  assert_string_equal(b.data + 5 + 1 + 999, "|42]");
  weft__strbuf_truncate(&b, 2);
  assert_string_equal(b.data, "ab");
  char *s;
  CHECK(weft__strbuf_take(&b, "text", &s));
  assert_string_equal(s, "ab");
  free(s); /* the C library's block */
  assert_null(b.data);
  CHECK(weft__strbuf_take(&b, "text", &s)); /* empty: "" */
  assert_string_equal(s, "");
  free(s);

  /* A failed allocation fails the buffer: later appends are ignored, the text kept is what was
   * there, and take reports out of memory naming what was built. */
  weft__strbuf_puts(&b, "kept");
  tu_alloc_install(0);
  weft__strbuf_printf(&b, "%0300d", 1);
  weft__strbuf_puts(&b, "more");
  assert_true(tu_alloc_failed());
  tu_alloc_uninstall();
  assert_true(b.failed);
  assert_string_equal(b.data, "kept");
  assert_int_equal(weft__strbuf_take(&b, "the test's text", &s), WEFT_ENOMEM);
  assert_null(s);
  assert_true(tu_contains(weft_last_error(), "the test's text"));
  weft__strbuf_fini(&b);
}

/* ---- UTF-8 repair ------------------------------------------------------------------------ */

static void test_utf8_repair(void **state) {
  (void)state;
  static const struct {
    const char *what, *in, *out;
  } cases[] = {
      {"ASCII and valid sequences", "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", NULL},
      {"U+FFFD itself", FFFD, NULL},
      {"the highest code point", "\xf4\x8f\xbf\xbf", NULL},
      {"a lone continuation byte", "a\x80z", "a" FFFD "z"},
      {"two continuation bytes", "\x80\xbf", FFFD FFFD},
      {"bytes that never start a sequence", "\xfe\xff\xf5\xc1", FFFD FFFD FFFD FFFD},
      {"a truncated 2-byte sequence", "a\xc3", "a" FFFD},
      {"a truncated 3-byte sequence, at the end", "\xe2\x82", FFFD},
      {"a truncated 3-byte sequence, then ASCII", "\xe2\x82z", FFFD "z"},
      {"a truncated 4-byte sequence", "\xf0\x9f\x98z", FFFD "z"},
      {"an overlong '/' (2 bytes)", "\xc0\xaf", FFFD FFFD},
      {"an overlong '/' (3 bytes)", "\xe0\x80\xaf", FFFD FFFD FFFD},
      {"an overlong '/' (4 bytes)", "\xf0\x80\x80\xaf", FFFD FFFD FFFD FFFD},
      {"a high surrogate", "\xed\xa0\x80", FFFD FFFD FFFD},
      {"a low surrogate", "\xed\xbf\xbf", FFFD FFFD FFFD},
      {"U+110000, above the last code point", "\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD},
      {"a 5-byte form", "\xf8\x88\x80\x80\x80", FFFD FFFD FFFD FFFD FFFD},
      /* The example of Unicode's chapter 3.9 (table 3-8), maximal subparts. */
      {"Unicode's example", "a\xf1\x80\x80\xe1\x80\xc2" "b\x80" "c\x80\xbf" "d",
       "a" FFFD FFFD FFFD "b" FFFD "c" FFFD FFFD "d"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *in = cases[i].in, *want = cases[i].out != NULL ? cases[i].out : in;
    char *got = repaired(in, strlen(in));
    if (strcmp(got, want) != 0) fail_msg("%s: repaired wrongly", cases[i].what);
    assert_int_equal(weft__utf8_valid(in, strlen(in)), cases[i].out == NULL);
    assert_true(weft__utf8_valid(got, strlen(got)));
    free(got);
  }
  /* A NUL byte is a character like any other when the length is given. */
  char *got = repaired("a\0\xff", 3);
  assert_memory_equal(got, "a\0" FFFD, 5);
  free(got);
}

/* ---- writing ------------------------------------------------------------------------------- */

static void test_json_write(void **state) {
  (void)state;
  static const char *const strings[] = {
      "", "plain", "quote \" backslash \\ slash /", "controls \x01\x1f\t\n\r\x7f",
      "caf\xc3\xa9 \xf0\x9f\x98\x80", BAD_TENSOR, BAD_NODE, BAD_FILE,
  };
  for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
    const char *s = strings[i];
    char *want = repaired(s, strlen(s));
    /* To the buffer... */
    weft__strbuf b;
    weft__strbuf_init(&b);
    weft__json_put_str(&b, s);
    assert_false(b.failed);
    for (size_t k = 0; k < b.len; k++) /* no raw control character: JSON forbids them */
      assert_true((unsigned char)b.data[k] >= 0x20);
    json_t *j = parse(b.data, b.len);
    assert_string_equal(json_string_value(j), want);
    json_decref(j);
    /* ... and to a stream: the same text. */
    int rc = WEFT_OK;
    size_t len;
    char *text = fput_str_text(s, &rc, &len);
    assert_int_equal(rc, WEFT_OK);
    assert_int_equal(len, b.len);
    assert_memory_equal(text, b.data, len);
    free(text);
    weft__strbuf_fini(&b);
    free(want);
  }
  /* NULL is null, to the buffer and to a stream. */
  weft__strbuf b;
  weft__strbuf_init(&b);
  weft__json_put_str(&b, NULL);
  assert_string_equal(b.data, "null");
  weft__strbuf_fini(&b);
  int rc = WEFT_OK;
  size_t len;
  char *text = fput_str_text(NULL, &rc, &len);
  assert_string_equal(text, "null");
  free(text);
  /* A writer that has failed writes nothing more. */
  rc = WEFT_ENOMEM;
  text = fput_str_text("x", &rc, &len);
  assert_int_equal(len, 0);
  assert_int_equal(rc, WEFT_ENOMEM);
  free(text);
  /* Numbers have nine significant digits, and JSON has no NaN or infinity. */
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  static const double nums[] = {0.5, 1e-7, 123456789012.0, -2, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    fputc(' ', f);
    weft__json_fput_num(f, nums[i]);
  }
  fclose(f);
  assert_string_equal(text, " 0.5 1e-07 1.23456789e+11 -2 null null null");
  free(text);
}

/* ---- reading ------------------------------------------------------------------------------- */

static void test_json_read(void **state) {
  (void)state;
  json_t *v;
  const char *doc = " {\"a\": [1, -2.5e3, true, null, 12345678901234567890], "
                    "\"s\": \"x\\u00e9\\ud83d\\ude00\\n\", \"o\": {}} ";
  CHECK(weft__json_read(doc, strlen(doc), "doc", &v));
  const json_t *a = json_object_get(v, "a");
  assert_int_equal(json_array_size(a), 5);
  assert_true(json_number_value(json_array_get(a, 1)) == -2500);
  assert_true(json_number_value(json_array_get(a, 4)) > 1.2e19); /* integers read as doubles */
  assert_string_equal(str_at(v, "s"), "x\xc3\xa9\xf0\x9f\x98\x80\n");
  assert_string_equal(weft__json_type_name(json_array_get(a, 0)), "number");
  assert_string_equal(weft__json_type_name(json_array_get(a, 2)), "boolean");
  assert_string_equal(weft__json_type_name(json_array_get(a, 3)), "null");
  assert_string_equal(weft__json_type_name(a), "array");
  assert_string_equal(weft__json_type_name(json_object_get(v, "o")), "object");
  assert_string_equal(weft__json_type_name(json_object_get(v, "s")), "string");
  json_decref(v);

  static const struct {
    const char *text;
    int status;
    const char *msg;
  } bad[] = {
      {"{\"a\": 1,}", WEFT_EPARSE, "t.json: line 1, column 9:"},
      {"\n\n  [01]", WEFT_EPARSE, "t.json: line 3,"},
      {"[1 2]", WEFT_EPARSE, "line 1"},
      {"\"a\xff\"", WEFT_EPARSE, "unable to decode byte 0xff"},
      {"[NaN]", WEFT_EPARSE, "t.json: line 1"},
      {"", WEFT_EPARSE, "t.json: line 1"},
      {"{} x", WEFT_EPARSE, "end of file expected"},
      {"{\"k\": 1, \"k\": 2}", WEFT_EINVAL, "t.json: line 1, column 12: k: field given twice"},
      {"{\"a\": [1, {\"b\": 2, \"b\": 3}]}", WEFT_EINVAL, ": a[1].b: field given twice"},
      {"{\"g\": {\"x\": [0], \"y\": {\"z\": 1}, \"y\": 2}}", WEFT_EINVAL, ": g.y: field given twice"},
      {"{\"p\\\"q\": {\"r\": 1, \"r\": 1}}", WEFT_EINVAL, ": p\\\"q.r: field given twice"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = (json_t *)1;
    int rc = weft__json_read(bad[i].text, strlen(bad[i].text), "t.json", &v);
    if (rc != bad[i].status || !tu_contains(weft_last_error(), bad[i].msg))
      fail_msg("case %zu: %s, '%s'; expected %s with '%s'", i, weft_status_name(rc),
               weft_last_error(), weft_status_name(bad[i].status), bad[i].msg);
    assert_null(v);
  }
  /* Nesting is bounded by jansson, so hostile input cannot exhaust the stack. */
  enum { DEEP = 100000 };
  char *deep = malloc(2 * DEEP);
  assert_non_null(deep);
  memset(deep, '[', DEEP);
  memset(deep + DEEP, ']', DEEP);
  assert_int_equal(weft__json_read(deep, 2 * DEEP, "deep", &v), WEFT_EPARSE);
  assert_true(tu_contains(weft_last_error(), "deep: line 1"));
  free(deep);
}

/* ---- the library's writers --------------------------------------------------------------- */

/* The statistics (format WEFT_REPORT_JSON or _TRACE) as text; the caller frees it. */
static char *stats_text(const weft_run_stats *st, int format, size_t *len) {
  char *text = NULL;
  FILE *f = open_memstream(&text, len);
  assert_non_null(f);
  CHECK(weft_run_stats_write(st, format, f));
  fclose(f);
  return text;
}

/* A run on a simulated H100 (no GPU needed): a tensor with a bad name on cuda:0, a relu in
 * place with a bad node name and origin, and a copy of the tensor to the host after it, which
 * nothing can hide and so gets a diagnostic naming the tensor in the statistics. */
static void test_library_outputs(void **state) {
  (void)state;
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = "h100";
  o.cpu_workers = 1;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *rt;
  CHECK(weft_runtime_create(&o, &rt));
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x, *h = NULL;
  CHECK(weft_tensor_create(g, BAD_TENSOR, WEFT_F32, 2, (int64_t[]){256, 256}, weft_cuda(0),
                           weft_ones(), &x));
  weft_tensor *y = x;
  CHECK(weft_relu(g, x, &y));
  weft_node *relu = weft_graph_node(g, weft_graph_node_count(g) - 1);
  CHECK(weft_node_set_name(relu, BAD_NODE));
  CHECK(weft_node_set_origin(relu, BAD_FILE ":2:1"));
  CHECK(weft_copy(g, x, weft_cpu(), &h));
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  CHECK(weft_run_wait(r));
  weft_run_stats *st;
  CHECK(weft_run_stats_create(r, &st));

  /* The trace: the relu's slice carries its label, what it read and its origin. */
  size_t len;
  char *text = stats_text(st, WEFT_REPORT_TRACE, &len);
  json_t *doc = parse(text, len);
  json_t *events = json_object_get(doc, "traceEvents");
  size_t i;
  json_t *e;
  int seen = 0;
  json_array_foreach(events, i, e) {
    const json_t *args = json_object_get(e, "args");
    if (strcmp(str_at(e, "ph"), "X") != 0 || strcmp(str_at(e, "name"), "relu") != 0) continue;
    seen++;
    assert_string_equal(str_at(args, "label"), "relu " BAD_NODE_FIXED " (node 0)");
    assert_string_equal(json_string_value(json_array_get(json_object_get(args, "reads"), 0)),
                        BAD_TENSOR_FIXED);
    assert_string_equal(str_at(args, "origin"), BAD_FILE_FIXED ":2:1");
  }
  assert_int_equal(seen, 1);
  json_decref(doc);
  free(text);

  /* The statistics: the exposed copy's diagnostic names the tensor. */
  text = stats_text(st, WEFT_REPORT_JSON, &len);
  doc = parse(text, len);
  json_t *diags = json_object_get(doc, "not_hidden");
  assert_true(json_array_size(diags) >= 1);
  seen = 0;
  json_array_foreach(diags, i, e) seen += tu_contains(str_at(e, "message"), "copy " BAD_TENSOR_FIXED " cuda:0->cpu");
  assert_int_equal(seen, 1);
  json_decref(doc);
  free(text);

  /* The SVG timeline is XML: well-formed UTF-8 too (whether a node's box is wide enough to
   * carry its label depends on the run's wall time, so the label itself is not looked for). */
  text = stats_text(st, WEFT_REPORT_SVG, &len);
  assert_true(weft__utf8_valid(text, len));
  free(text);

  weft_run_stats_destroy(st);
  weft_run_destroy(r);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* ---- the command ----------------------------------------------------------------------------- */

/* A name in .weft source: between backticks, the bad bytes as \xHH escapes (docs/dsl.md). */
#define Q_TENSOR "`bad\\xff\\xfe\\x01\"q\\xe2\\x82`"
#define Q_NODE "`node\\xc0\\xaf\\t\\xed\\xa0\\x80`"
#define PROGRAM                                                                            \
  "tensor " Q_TENSOR ": f32[2] = ones\n"                                                   \
  "y = relu(" Q_TENSOR ") as " Q_NODE "\n"                                                 \
  "print " Q_TENSOR "\n"                                                                   \
  "print y\n"

static void test_command_outputs(void **state) {
  (void)state;
  char *path = tp_write(BAD_FILE, PROGRAM);
  char *trace = tp_write("trace.json", "");
  char *want_file = repaired(path, strlen(path));

  /* weft run --json: the file, the outputs keyed by name, the statistics. */
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("run", "--json", "--quiet", "--trace", trace, path));
  json_t *doc = parse(r->out, r->out_len);
  assert_string_equal(str_at(doc, "file"), want_file);
  assert_string_equal(str_at(doc, "status"), "ok");
  const json_t *outs = json_object_get(doc, "outputs");
  assert_non_null(json_object_get(outs, BAD_TENSOR_FIXED));
  assert_non_null(json_object_get(outs, "y"));
  assert_true(json_is_object(json_object_get(doc, "stats")));
  json_decref(doc);

  /* ... and the trace it wrote. */
  size_t len;
  char *text = tu_read_file(trace, &len);
  doc = parse(text, len);
  int seen = 0;
  size_t i;
  json_t *ev;
  json_array_foreach(json_object_get(doc, "traceEvents"), i, ev) {
    const char *label = str_at(json_object_get(ev, "args"), "label");
    seen += label != NULL && strcmp(label, "relu " BAD_NODE_FIXED " (node 0)") == 0;
  }
  assert_int_equal(seen, 1);
  json_decref(doc);
  free(text);

  /* A program that does not parse: the error, each diagnostic's file and message. */
  char *broken = tp_write(BAD_FILE ".broken", "tensor x: f32[2] = ones\ny = relu(`z\\xff`)\n");
  char *want_broken = repaired(broken, strlen(broken));
  r = tp_cmd(2, NULL, TP_ARGS("run", "--json", broken));
  doc = parse(r->out, r->out_len);
  assert_true(tu_contains(str_at(doc, "error"), "unknown tensor 'z" FFFD "'"));
  const json_t *diag = json_array_get(json_object_get(doc, "diagnostics"), 0);
  assert_string_equal(str_at(diag, "file"), want_broken);
  assert_true(tu_contains(str_at(diag, "message"), "'z" FFFD "'"));
  json_decref(doc);

  /* weft check --json. */
  r = tp_cmd(0, NULL, TP_ARGS("check", "--json", path));
  doc = parse(r->out, r->out_len);
  assert_string_equal(str_at(doc, "file"), want_file);
  assert_int_equal(json_integer_value(json_object_get(doc, "nodes")), 1);
  json_decref(doc);

  /* weft explain has no JSON form: its text passes names through as they are, one node per
   * entry, and the layout holds (the names carry no line break). */
  r = tp_cmd(0, NULL, TP_ARGS("explain", path));
  assert_true(tp_has(r->out, "1 node, 0 edges"));
  assert_true(tp_has(r->out, "#0    y = relu(" BAD_TENSOR ")  at "));
  assert_true(tp_has(r->out, "edges (the second node waits for the first):\n  none"));

  free(want_file);
  free(want_broken);
  free(broken);
  free(trace);
  free(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_strbuf),
      cmocka_unit_test(test_utf8_repair),
      cmocka_unit_test(test_json_write),
      cmocka_unit_test(test_json_read),
      cmocka_unit_test(test_library_outputs),
      cmocka_unit_test(test_command_outputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
