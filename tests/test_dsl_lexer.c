/* test_dsl_lexer.c — the .weft lexer: every token kind, numbers and their limits, names and
 * strings with escapes, comments, positions, and lexical errors (one per line, never a crash). */
#include <math.h>
#include <string.h>

#include "dsl/dsl_internal.h"
#include "testutil.h"

typedef struct lexed {
  weft__arena arena;
  weft__dsl_diags d;
  weft__vec toks, comments;
} lexed;

static void lex(lexed *L, const char *text) {
  weft__arena_init(&L->arena, 1024, NULL);
  weft__dsl_diags_init(&L->d, "t.weft", text, strlen(text));
  weft__vec_init(&L->toks, sizeof(weft__dsl_tok));
  weft__vec_init(&L->comments, sizeof(weft__dsl_comment));
  assert_int_equal(weft__dsl_lex(&L->d, &L->arena, &L->toks, &L->comments), WEFT_OK);
}

static void unlex(lexed *L) {
  weft__vec_fini(&L->toks);
  weft__vec_fini(&L->comments);
  weft__dsl_diags_fini(&L->d);
  weft__arena_fini(&L->arena);
}

static const weft__dsl_tok *tok(const lexed *L, size_t i) {
  assert_true(i < L->toks.len);
  return &WEFT__VEC_AT(&L->toks, weft__dsl_tok, i);
}

/* The diagnostics as composed for the user. */
static const char *message(lexed *L) {
  weft__dsl_diags_finish(&L->d);
  return weft_last_error();
}

static void test_kinds(void **state) {
  (void)state;
  lexed L;
  lex(&L, "( ) [ ] { } , : ; = | + - * / % .. -> @\n");
  static const int want[] = {TK_LPAREN, TK_RPAREN, TK_LBRACKET, TK_RBRACKET, TK_LBRACE, TK_RBRACE,
                             TK_COMMA,  TK_COLON,  TK_SEMI,     TK_ASSIGN,   TK_PIPE,   TK_PLUS,
                             TK_MINUS,  TK_STAR,   TK_SLASH,    TK_PERCENT,  TK_DOTDOT, TK_ARROW,
                             TK_AT,     TK_NEWLINE, TK_EOF};
  assert_int_equal(L.toks.len, sizeof want / sizeof want[0]);
  for (size_t i = 0; i < L.toks.len; i++) assert_int_equal(tok(&L, i)->kind, want[i]);
  assert_int_equal(weft__dsl_error_count(&L.d), 0);
  unlex(&L);
}

static void test_keywords_and_names(void **state) {
  (void)state;
  lexed L;
  lex(&L, "param device tensor for print save keep edge strict cpu cuda inf nan on as x_1 _y F32");
  static const int want[] = {TK_KW_PARAM, TK_KW_DEVICE, TK_KW_TENSOR, TK_KW_FOR, TK_KW_PRINT,
                             TK_KW_SAVE,  TK_KW_KEEP,   TK_KW_EDGE,   TK_KW_STRICT, TK_KW_CPU,
                             TK_KW_CUDA,  TK_KW_INF,    TK_KW_NAN,    TK_IDENT,  TK_IDENT,
                             TK_IDENT,    TK_IDENT,     TK_IDENT,     TK_EOF};
  assert_int_equal(L.toks.len, sizeof want / sizeof want[0]);
  for (size_t i = 0; i < L.toks.len; i++) assert_int_equal(tok(&L, i)->kind, want[i]);
  assert_string_equal(tok(&L, 13)->str, "on");
  assert_string_equal(tok(&L, 15)->str, "x_1");
  assert_string_equal(tok(&L, 17)->str, "F32");
  unlex(&L);
}

static void test_numbers(void **state) {
  (void)state;
  lexed L;
  lex(&L, "0 42 9223372036854775807 2.5 1e3 1E-3 6.02e+23 0x1F 0xffffffffffffffff 0..10 007");
  assert_int_equal(tok(&L, 0)->kind, TK_INT);
  assert_int_equal(tok(&L, 0)->i, 0);
  assert_int_equal(tok(&L, 1)->i, 42);
  assert_int_equal(tok(&L, 2)->i, INT64_MAX);
  assert_int_equal(tok(&L, 3)->kind, TK_FLOAT);
  assert_true(tok(&L, 3)->f == 2.5);
  assert_int_equal(tok(&L, 4)->kind, TK_FLOAT);
  assert_true(tok(&L, 4)->f == 1000.0);
  assert_true(tok(&L, 5)->f == 1e-3);
  assert_true(tok(&L, 6)->f == 6.02e23);
  assert_int_equal(tok(&L, 7)->kind, TK_INT);
  assert_int_equal(tok(&L, 7)->i, 31);
  assert_int_equal(tok(&L, 8)->i, -1); /* the 64-bit pattern */
  /* "0..10" is a range, not a float "0." */
  assert_int_equal(tok(&L, 9)->kind, TK_INT);
  assert_int_equal(tok(&L, 10)->kind, TK_DOTDOT);
  assert_int_equal(tok(&L, 11)->kind, TK_INT);
  assert_int_equal(tok(&L, 11)->i, 10);
  assert_int_equal(tok(&L, 12)->i, 7);
  assert_int_equal(weft__dsl_error_count(&L.d), 0);
  unlex(&L);
}

typedef struct bad_case {
  const char *text, *msg;
} bad_case;

/* Each text gives exactly one lexical error, whose message starts with msg; the bad token is
 * an error token, so the parser stays silent about it. */
static void check_bad(const bad_case *cases, size_t n) {
  for (size_t i = 0; i < n; i++) {
    lexed L;
    lex(&L, cases[i].text);
    assert_int_equal(weft__dsl_error_count(&L.d), 1);
    const char *m = message(&L);
    if (strstr(m, cases[i].msg) != m) fail_msg("case %zu: got\n%s\nwant prefix\n%s", i, m, cases[i].msg);
    int saw_error = 0;
    for (size_t k = 0; k < L.toks.len; k++) saw_error |= tok(&L, k)->kind == TK_ERROR;
    assert_true(saw_error);
    unlex(&L);
  }
}

static void test_bad_numbers(void **state) {
  (void)state;
  static const bad_case cases[] = {
      {"x = 9223372036854775808", "t.weft:1:5: error: integer 9223372036854775808 is too large; expected at most 9223372036854775807"},
      {"x = 1.", "t.weft:1:5: error: invalid number '1.'; expected digits, an optional fraction and exponent (1, 2.5, 1e-3)"},
      {"x = 1e", "t.weft:1:5: error: invalid number '1e'; expected digits"},
      {"x = 12ab", "t.weft:1:5: error: invalid number '12ab'"},
      {"x = 0x", "t.weft:1:5: error: invalid hexadecimal number '0x'; expected 0x and 1 to 16 hex digits"},
      {"x = 0x11112222333344445", "t.weft:1:5: error: invalid hexadecimal number"},
      {"x = 1e999", "t.weft:1:5: error: number 1e999 is too large for a double"},
  };
  check_bad(cases, sizeof cases / sizeof cases[0]);
}

static void test_quoted(void **state) {
  (void)state;
  lexed L;
  lex(&L, "`a b` `x@cuda:0` `tab\\there` \"s\\\"q\\\\\\n\" `\\x41\\`` \"\xc3\xa9t\xc3\xa9\"");
  assert_int_equal(tok(&L, 0)->kind, TK_QNAME);
  assert_string_equal(tok(&L, 0)->str, "a b");
  assert_string_equal(tok(&L, 1)->str, "x@cuda:0");
  assert_string_equal(tok(&L, 2)->str, "tab\there");
  assert_int_equal(tok(&L, 3)->kind, TK_STRING);
  assert_string_equal(tok(&L, 3)->str, "s\"q\\\n");
  assert_string_equal(tok(&L, 4)->str, "A`");
  assert_string_equal(tok(&L, 5)->str, "\xc3\xa9t\xc3\xa9"); /* UTF-8 passes through */
  assert_int_equal(weft__dsl_error_count(&L.d), 0);
  unlex(&L);
}

static void test_bad_quoted(void **state) {
  (void)state;
  static const bad_case cases[] = {
      {"save x to \"out.bin", "t.weft:1:11: error: unterminated string; expected a closing '\"' before the end of the line"},
      {"y = mm(`a, b)\nz = 1", "t.weft:1:8: error: unterminated quoted name; expected a closing '`'"},
      {"x = \"a\\qb\"", "t.weft:1:7: error: unknown escape in a string; expected \\\\, \\\", \\`, \\n, \\t, \\r or \\xHH"},
      {"x = `a\\x00`", "t.weft:1:7: error: a quoted name cannot contain a NUL byte (\\x00)"},
      {"x = ``", "t.weft:1:5: error: empty quoted name; expected at least one character between the backticks"},
      {"x = \"a\x01\"", "t.weft:1:7: error: control character 0x01 in a string; write it as \\x01"},
  };
  check_bad(cases, sizeof cases / sizeof cases[0]);
}

static void test_comments_and_positions(void **state) {
  (void)state;
  lexed L;
  lex(&L, "# head\nx = 1  # tail  \n\t  # indented\n  y");
  assert_int_equal(L.comments.len, 3);
  weft__dsl_comment *c = L.comments.data;
  assert_string_equal(c[0].text, "# head");
  assert_true(c[0].own_line);
  assert_int_equal(c[0].line, 1);
  assert_string_equal(c[1].text, "# tail"); /* trailing blanks dropped */
  assert_false(c[1].own_line);
  assert_int_equal(c[1].line, 2);
  assert_int_equal(c[1].col, 8);
  assert_true(c[2].own_line);
  /* Tokens: NEWLINE, x = 1 NEWLINE, NEWLINE, y EOF. */
  const weft__dsl_tok *y = NULL;
  for (size_t k = 0; k < L.toks.len; k++)
    if (tok(&L, k)->kind == TK_IDENT && strcmp(tok(&L, k)->str, "y") == 0) y = tok(&L, k);
  assert_non_null(y);
  assert_int_equal(y->line, 4);
  assert_int_equal(y->col, 3);
  assert_int_equal(tok(&L, L.toks.len - 1)->kind, TK_EOF);
  unlex(&L);
}

static void test_unexpected_bytes(void **state) {
  (void)state;
  lexed L;
  /* Several bad bytes on one line give one error; the next line gets its own. */
  lex(&L, "x = $ ? ! \xc3\xa9\ny = . 1\n");
  assert_int_equal(weft__dsl_error_count(&L.d), 2);
  const char *m = message(&L);
  assert_non_null(strstr(m, "t.weft:1:5: error: unexpected character '$'; expected a name, a number or an operator\nx = $ ? ! \xc3\xa9\n    ^"));
  assert_non_null(strstr(m, "t.weft:2:5: error: unexpected '.'; expected '..' in a range (0..N) or a digit in a number"));
  unlex(&L);
  lex(&L, "\xc3\xa9 = 1");
  assert_non_null(strstr(message(&L), "unexpected byte 0xc3; names are ASCII letters, digits and '_' (write other names between backticks)"));
  unlex(&L);
}

static void test_byte_order_mark(void **state) {
  (void)state;
  lexed L;
  lex(&L, "\xef\xbb\xbfparam N = 3\n");
  assert_int_equal(weft__dsl_error_count(&L.d), 0);
  assert_int_equal(tok(&L, 0)->kind, TK_KW_PARAM);
  assert_int_equal(tok(&L, 0)->col, 4);
  unlex(&L);
  /* Elsewhere the same bytes are an error. */
  lex(&L, "x = \xef\xbb\xbf\n");
  assert_int_equal(weft__dsl_error_count(&L.d), 1);
  unlex(&L);
}

static void test_nul_and_binary(void **state) {
  (void)state;
  /* NUL bytes and arbitrary binary never crash the lexer, and the excerpt stays printable. */
  char text[64];
  for (int i = 0; i < 64; i++) text[i] = (char)(i * 37 + 5);
  text[10] = '\0';
  lexed L;
  weft__arena_init(&L.arena, 1024, NULL);
  weft__dsl_diags_init(&L.d, "bin", text, sizeof text);
  weft__vec_init(&L.toks, sizeof(weft__dsl_tok));
  weft__vec_init(&L.comments, sizeof(weft__dsl_comment));
  assert_int_equal(weft__dsl_lex(&L.d, &L.arena, &L.toks, &L.comments), WEFT_OK);
  assert_true(weft__dsl_error_count(&L.d) > 0);
  const char *m = message(&L);
  for (const char *p = m; *p; p++) assert_true((unsigned char)*p >= 0x20 || *p == '\n' || *p == '\t');
  unlex(&L);
}

static void test_out_of_memory(void **state) {
  (void)state;
  const char *text = "tensor `long name` : f32[4] = uniform(0, 1, seed=3) # c\nsave x to \"f\"\n";
  for (long at = 0;; at++) {
    tu_alloc_install(at);
    lexed L;
    weft__arena_init(&L.arena, 64, NULL);
    weft__dsl_diags_init(&L.d, "t", text, strlen(text));
    weft__vec_init(&L.toks, sizeof(weft__dsl_tok));
    weft__vec_init(&L.comments, sizeof(weft__dsl_comment));
    int rc = weft__dsl_lex(&L.d, &L.arena, &L.toks, &L.comments);
    int failed = tu_alloc_failed();
    unlex(&L);
    assert_int_equal(tu_alloc_live(), 0);
    tu_alloc_uninstall();
    if (!failed) {
      assert_int_equal(rc, WEFT_OK);
      break;
    }
    assert_int_equal(rc, WEFT_ENOMEM);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kinds),
      cmocka_unit_test(test_keywords_and_names),
      cmocka_unit_test(test_numbers),
      cmocka_unit_test(test_bad_numbers),
      cmocka_unit_test(test_quoted),
      cmocka_unit_test(test_bad_quoted),
      cmocka_unit_test(test_comments_and_positions),
      cmocka_unit_test(test_unexpected_bytes),
      cmocka_unit_test(test_byte_order_mark),
      cmocka_unit_test(test_nul_and_binary),
      cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
