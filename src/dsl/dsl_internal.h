/* dsl_internal.h — what the files of the .weft front end share: diagnostics, tokens, the
 * syntax tree, the text buffer and the canonical spellings of names and numbers.
 *
 * The front end is a pipeline with one direction:
 *
 *   text ─► lexer.c ─► tokens ─► parser.c ─► syntax tree ─► program.c ─► weft_graph + outputs
 *                                                 │                          │
 *                                                 └► format.c (weft fmt)     └► outputs.c
 *   any weft_graph ─► writer.c ─► .weft text
 *
 * Everything a parse allocates comes from one arena (the program's) or from vectors freed on
 * every path; an allocation failure anywhere makes the parse fail with WEFT_ENOMEM and leaves
 * nothing behind. Diagnostics are collected, not printed: each carries line and column, and
 * weft__dsl_diags_finish turns them (sorted by position) into one message with the source line
 * and a caret under the column. */
#ifndef WEFT_DSL_INTERNAL_H
#define WEFT_DSL_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>

#include "util/strbuf.h"
#include "util/util.h"
#include "weft/dsl.h"

/* ---- canonical spellings (shared by the writer, the formatter and the outputs) ------------- */

/* Writes `v` with the fewest digits that read back to the same double, always as a float
 * literal of the language ("2.0", "1e-07", "-0.0", "inf", "nan"). `buf` holds 40 bytes. */
char *weft__dsl_fmt_double(char *buf, double v);
/* The same without forcing a float literal ("2", "0.5"): for printed results. */
char *weft__dsl_fmt_number(char *buf, double v, int is_f32);
/* Appends a tensor, device or node name so that the lexer reads it back as exactly `name`:
 * as is when it is an identifier or an identifier with integer indices ("y[3]", "g[1,2]"),
 * else between backticks with escapes. */
void weft__dsl_buf_name(weft__strbuf *b, const char *name);
/* Appends an identifier (a user op's name, a name's base before its indices): as is when the
 * lexer reads it as one identifier, else between backticks. */
void weft__dsl_buf_ident(weft__strbuf *b, const char *name);
/* Appends `s` as a double-quoted string literal with escapes. */
void weft__dsl_buf_string(weft__strbuf *b, const char *s);

/* ---- name tables -------------------------------------------------------------------------- */

enum { SYM_NONE = 0, SYM_PARAM, SYM_LOOP, SYM_DEVICE, SYM_TENSOR, SYM_POISON, SYM_NODE };

typedef struct weft__dsl_value {
  int is_float;
  int64_t i;
  double f;
} weft__dsl_value;

/* One name. An entry, once made, keeps its key: unbinding sets kind to SYM_NONE. */
typedef struct weft__dsl_sym {
  const char *key; /* NULL: empty slot */
  uint32_t hash;
  int kind;        /* SYM_* */
  uint32_t line, col; /* where it was bound */
  weft__dsl_value v;
  weft_device dev;
  weft_tensor *t;
  weft_node *node;
} weft__dsl_sym;

/* A hash table of names: a compact open-addressing index (hash and entry number, 8 bytes a
 * slot, at most half full) over a dense array of entries, so a lookup touches few cache lines
 * even with millions of names. Zero-initialised means empty. */
struct weft__dsl_slot {
  uint32_t hash;
  uint32_t entry; /* 1 + the entry's position; 0: empty */
};

typedef struct weft__dsl_symtab {
  struct weft__dsl_slot *index;
  size_t cap;               /* slots, a power of two (0 before the first insert) */
  weft__dsl_sym *entries;
  size_t len, entries_cap;
} weft__dsl_symtab;

void weft__dsl_symtab_fini(weft__dsl_symtab *st);
/* The slot of `key`, or NULL. */
weft__dsl_sym *weft__dsl_sym_find(const weft__dsl_symtab *st, const char *key);
/* The entry of `key`, made (kind SYM_NONE, key copied into `a`) if there is none; NULL out of
 * memory. Pointers to entries are valid until the next call that makes an entry. */
weft__dsl_sym *weft__dsl_sym_slot(weft__dsl_symtab *st, weft__arena *a, const char *key);

/* ---- diagnostics --------------------------------------------------------------------------- */

typedef struct weft__dsl_diag {
  uint32_t line, col; /* 1-based; line 0: not tied to the text (a -D option) */
  uint32_t seq;       /* report order, to keep the sort stable */
  int status;
  char *msg;          /* weft__malloc'd */
} weft__dsl_diag;

typedef struct weft__dsl_diags {
  const char *file; /* for messages */
  const char *text;
  size_t len;
  weft__vec list; /* weft__dsl_diag */
  int oom;        /* an allocation failed while recording: report ENOMEM */
  size_t dropped; /* errors past the cap (WEFT__DSL_MAX_ERRORS): counted, not kept */
} weft__dsl_diags;

/* The most diagnostics one parse reports; past it, a closing line says the list is cut. */
#define WEFT__DSL_MAX_ERRORS 40

void weft__dsl_diags_init(weft__dsl_diags *d, const char *file, const char *text, size_t len);
void weft__dsl_diags_fini(weft__dsl_diags *d);
/* Records an error at line:col and returns `status`. Only the first error at a position is
 * kept (a statement in a loop that fails on every iteration is reported once). */
int weft__dsl_error(weft__dsl_diags *d, int status, uint32_t line, uint32_t col, const char *fmt,
                    ...) WEFT__PRINTF(5, 6);
int weft__dsl_verror(weft__dsl_diags *d, int status, uint32_t line, uint32_t col, const char *fmt,
                     va_list ap);
/* Number of errors recorded so far. */
size_t weft__dsl_error_count(const weft__dsl_diags *d);
/* Composes every diagnostic into the calling thread's error message and returns the status of
 * the first (by position); WEFT_OK if there were none. */
int weft__dsl_diags_finish(weft__dsl_diags *d);

/* ---- tokens -------------------------------------------------------------------------------- */

typedef enum weft__dsl_tk {
  TK_EOF = 0,
  TK_NEWLINE,
  TK_ERROR, /* the lexer reported it already */
  TK_IDENT,
  TK_QNAME,  /* `any name` */
  TK_INT,
  TK_FLOAT,
  TK_STRING,
  TK_LPAREN,
  TK_RPAREN,
  TK_LBRACKET,
  TK_RBRACKET,
  TK_LBRACE,
  TK_RBRACE,
  TK_COMMA,
  TK_COLON,
  TK_SEMI,
  TK_ASSIGN,
  TK_PIPE,
  TK_PLUS,
  TK_MINUS,
  TK_STAR,
  TK_SLASH,
  TK_PERCENT,
  TK_DOTDOT,
  TK_ARROW,
  TK_AT,
  /* reserved words */
  TK_KW_PARAM,
  TK_KW_DEVICE,
  TK_KW_TENSOR,
  TK_KW_FOR,
  TK_KW_PRINT,
  TK_KW_SAVE,
  TK_KW_KEEP,
  TK_KW_EDGE,
  TK_KW_STRICT,
  TK_KW_CPU,
  TK_KW_CUDA,
  TK_KW_INF,
  TK_KW_NAN,
  TK_COUNT
} weft__dsl_tk;

typedef struct weft__dsl_tok {
  int kind;
  uint32_t line, col;
  uint32_t off, len; /* the source text of the token */
  int64_t i;         /* TK_INT */
  double f;          /* TK_FLOAT */
  const char *str;   /* TK_IDENT, TK_QNAME, TK_STRING: decoded text (arena) */
} weft__dsl_tok;

typedef struct weft__dsl_comment {
  uint32_t line, col;
  const char *text; /* from '#' to the end of the line, trailing blanks removed (arena) */
  int own_line;     /* nothing but blanks before it on its line */
} weft__dsl_comment;

/* The reserved word spelled `s` (n bytes), or 0. */
int weft__dsl_keyword(const char *s, size_t n);
/* How a token kind reads in a message ("')'", "end of line", "a number"). */
const char *weft__dsl_tk_desc(int kind);

/* Splits text into tokens (always ending with TK_EOF) and comments. Lexical errors are
 * recorded in `d` (at most one per line) and become TK_ERROR tokens. Returns WEFT_OK or
 * WEFT_ENOMEM. */
int weft__dsl_lex(weft__dsl_diags *d, weft__arena *a, weft__vec *toks, weft__vec *comments);

/* ---- syntax tree --------------------------------------------------------------------------- */

typedef enum weft__dsl_ek {
  EX_INT = 0,
  EX_FLOAT,
  EX_INF,
  EX_NAN,
  EX_NAME,   /* name, or name[index, ...] */
  EX_NEG,    /* -a */
  EX_POS,    /* +a */
  EX_BIN,    /* a op b */
  EX_PAREN,  /* (a) */
  EX_CALL,   /* name(args) */
  EX_CPU,    /* cpu */
  EX_CUDA,   /* cuda:a */
  EX_NODEID, /* @a */
} weft__dsl_ek;

typedef struct weft__dsl_expr weft__dsl_expr;
struct weft__dsl_expr {
  int kind;
  uint32_t line, col;
  int op;                  /* EX_BIN: '+', '-', '*', '/', '%' */
  weft__dsl_expr *a, *b;   /* operands */
  int64_t i;               /* EX_INT */
  double f;                /* EX_FLOAT */
  const char *text;        /* EX_INT, EX_FLOAT: the literal as written; EX_NAME, EX_CALL: the name */
  int quoted;              /* EX_NAME, EX_CALL: written between backticks */
  weft__dsl_expr **items;  /* EX_NAME: indices; EX_CALL: arguments */
  const char **keys;       /* EX_CALL: each argument's keyword, or NULL */
  int nitems;
  int has_index;           /* EX_NAME: written with brackets (possibly empty: "x[]") */
  int has_parens;          /* EX_CALL: written with parentheses ("zeros" vs "zeros()") */
};

typedef enum weft__dsl_sk {
  ST_PARAM = 0,
  ST_DEVICE,
  ST_TENSOR,
  ST_ASSIGN,
  ST_CALL,
  ST_FOR,
  ST_PRINT,
  ST_SAVE,
  ST_KEEP,
  ST_EDGE,
  ST_STRICT,
  ST_BROKEN, /* a statement with a syntax error: poisons the names it would have defined */
} weft__dsl_sk;

typedef struct weft__dsl_block weft__dsl_block;
typedef struct weft__dsl_stmt weft__dsl_stmt;

struct weft__dsl_stmt {
  int kind;
  uint32_t line, col;
  const char *name;          /* ST_PARAM, ST_DEVICE: the name; ST_FOR: the loop variable */
  uint32_t name_line, name_col;
  weft__dsl_expr *target;    /* ST_TENSOR, ST_ASSIGN, ST_SAVE: a tensor name; ST_BROKEN: what it poisons */
  weft__dsl_expr *value;     /* ST_PARAM: the value; ST_ASSIGN, ST_CALL: the call; ST_TENSOR: the initialiser */
  weft__dsl_expr **list;     /* ST_DEVICE: alternatives; ST_TENSOR: shape; ST_PRINT, ST_KEEP: names; ST_EDGE: nodes */
  int nlist;
  int dtype;                 /* ST_TENSOR */
  int has_shape;             /* ST_TENSOR: written with brackets */
  weft__dsl_expr *device;    /* ST_TENSOR: after 'on', or NULL */
  const char *path;          /* ST_TENSOR ('from'), ST_SAVE ('to') */
  int text_format;           /* ... 'text' */
  uint32_t path_line, path_col;
  weft__dsl_expr *label;     /* ST_ASSIGN, ST_CALL: after 'as', or NULL */
  weft__dsl_expr *lo, *hi;   /* ST_FOR */
  weft__dsl_block *body;     /* ST_FOR */
  int poison_var;            /* ST_FOR: the header was broken: run the body once, var poisoned */
  /* Layout kept by weft fmt. */
  const char **lead;         /* comments on their own lines before the statement; "" is a blank line */
  int nlead;
  const char *trail;         /* a comment after it on the same line, or NULL */
  const char *brace_trail;   /* ST_FOR: a comment after its '{', or NULL */
};

struct weft__dsl_block {
  weft__dsl_stmt **stmts;
  int n;
  const char **tail; /* comments after the last statement (before '}' or the end); "" is a blank line */
  int ntail;
};

/* Parses the tokens into a block. Syntax errors are recorded in `d`; the parser recovers at
 * the next statement. Returns WEFT_OK (with errors possibly recorded) or WEFT_ENOMEM. */
int weft__dsl_parse(weft__dsl_diags *d, weft__arena *a, const weft__dsl_tok *toks, size_t ntoks,
                    const weft__dsl_comment *comments, size_t ncomments, weft__dsl_block **out);

/* Writes `blk` in canonical form at indentation `depth`. */
void weft__dsl_format_block(weft__strbuf *b, const weft__dsl_block *blk, int depth);

/* ---- programs ------------------------------------------------------------------------------ */

enum { WEFT__DSL_PRINT = 0, WEFT__DSL_SAVE };

typedef struct weft__dsl_output {
  int kind;          /* WEFT__DSL_PRINT or WEFT__DSL_SAVE */
  weft_tensor *t;
  const char *name;  /* as written in the program, after indices were evaluated (arena) */
  const char *path;  /* WEFT__DSL_SAVE: resolved against base_dir (arena) */
  int text_format;
} weft__dsl_output;

struct weft_program {
  weft_graph *graph;
  weft__arena arena;        /* the syntax tree, names, outputs */
  weft__dsl_block *ast;
  weft__vec outputs;        /* weft__dsl_output */
};

/* Reads a tensor's initial contents from `path` (raw little-endian bytes, or text numbers
 * when text_format), checks the size and writes them into t. Errors are returned with a
 * message naming the file (not recorded as diagnostics). */
int weft__dsl_load_tensor(weft_tensor *t, const char *path, int text_format);

#endif
