/* outputs.c — the program's files and results: reading a .weft file, loading `from` files
 * into tensors, printing results as text or JSON, and saving tensors.
 *
 * File formats (docs/dsl.md): a binary file is the tensor's elements, row-major, as
 * little-endian f32 or f64 — exactly weft_tensor_bytes bytes, no header; a text file is the
 * elements' values, row-major, separated by blanks, commas or newlines ('#' starts a comment).
 * `save ... to text` writes the last dimension on one line, so a matrix reads as a table, and
 * every value with the digits that read back to the same f32 or f64.
 *
 * Only regular files are opened (a FIFO or a device cannot stall a parse), without following
 * the program into reads of unbounded size: the tensor's size is known before the read. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsl/dsl_internal.h"
#include "util/json.h"

static int host_is_little_endian(void) {
  const uint16_t probe = 1;
  return *(const unsigned char *)&probe == 1;
}

/* Reverses each element's bytes on a big-endian host, so files are little-endian everywhere. */
static void to_little_endian(void *data, size_t bytes, size_t elem) {
  if (host_is_little_endian()) return;
  unsigned char *p = data;
  for (size_t i = 0; i + elem <= bytes; i += elem)
    for (size_t a = 0, b = elem - 1; a < b; a++, b--) {
      unsigned char t = p[i + a];
      p[i + a] = p[i + b];
      p[i + b] = t;
    }
}

/* Reads a whole regular file into a weft__malloc'd buffer (NUL-terminated). `expect` (or
 * SIZE_MAX) is the size it must have. */
static int read_file(const char *path, size_t expect, char **out, size_t *len) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return weft__err(errno == ENOENT ? WEFT_ENOENT : WEFT_EIO, "cannot open '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return weft__err(WEFT_EIO, "'%s' is not a regular file", path);
  }
  size_t size = (size_t)st.st_size;
  if (expect != SIZE_MAX && size != expect) {
    close(fd);
    *len = size;
    return weft__err(WEFT_EINVAL, "'%s' holds %zu bytes; expected %zu", path, size, expect);
  }
  char *buf = weft__malloc(size + 1);
  if (buf == NULL) {
    close(fd);
    return weft__oom("a file's contents");
  }
  size_t got = 0;
  while (got < size) {
    ssize_t r = read(fd, buf + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = errno;
      close(fd);
      weft__free(buf);
      return weft__err(WEFT_EIO, "cannot read '%s': %s", path, r < 0 ? strerror(e) : "it became shorter");
    }
    got += (size_t)r;
  }
  close(fd);
  buf[size] = '\0';
  *out = buf;
  *len = size;
  return WEFT_OK;
}

int weft__dsl_load_tensor(weft_tensor *t, const char *path, int text_format) {
  size_t bytes = weft_tensor_bytes(t), esize = weft_dtype_size(weft_tensor_dtype(t));
  int64_t numel = weft_tensor_numel(t);
  char shape[160];
  int len = snprintf(shape, sizeof shape, "%s[", weft_dtype_name(weft_tensor_dtype(t)));
  for (int i = 0; i < weft_tensor_ndim(t) && len > 0 && (size_t)len < sizeof shape; i++)
    len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%lld", i ? ", " : "",
                    (long long)weft_tensor_dim(t, i));
  if (len > 0 && (size_t)len < sizeof shape) snprintf(shape + len, sizeof shape - (size_t)len, "]");
  char *buf;
  size_t n;
  int rc;
  if (!text_format) {
    if ((rc = read_file(path, bytes, &buf, &n)) != WEFT_OK) {
      if (rc == WEFT_EINVAL)
        weft__err(rc, "'%s' holds %zu bytes but tensor '%s' (%s) needs %zu; expected raw little-endian %s values",
                  path, n, weft_tensor_name(t), shape, bytes, weft_dtype_name(weft_tensor_dtype(t)));
      return rc;
    }
    to_little_endian(buf, bytes, esize);
    rc = weft_tensor_write(t, buf, bytes);
    weft__free(buf);
    return rc;
  }
  if ((rc = read_file(path, SIZE_MAX, &buf, &n)) != WEFT_OK) return rc;
  void *vals = weft__malloc(bytes ? bytes : 1);
  if (vals == NULL) {
    weft__free(buf);
    return weft__oom("a tensor's values");
  }
  int64_t count = 0;
  unsigned line = 1;
  char *p = buf;
  rc = WEFT_OK;
  while (rc == WEFT_OK) {
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == ',' || *p == '\n') line += *p++ == '\n';
    if (*p == '#') {
      while (*p && *p != '\n') p++;
      continue;
    }
    if (*p == '\0' && (size_t)(p - buf) >= n) break;
    char *end;
    double v = strtod(p, &end);
    if (end == p || (*end && !strchr(" \t\r\n,#", *end))) {
      char *stop = p;
      while (*stop && !strchr(" \t\r\n,", *stop) && stop - p < 40) stop++;
      rc = weft__err(WEFT_EINVAL, "%s:%u: '%.*s' is not a number; expected numbers separated by blanks, commas or newlines",
                     path, line, (int)(stop - p), p);
      break;
    }
    if (count < numel) {
      if (esize == 4)
        ((float *)vals)[count] = (float)v;
      else
        ((double *)vals)[count] = v;
    }
    count++;
    p = end;
  }
  if (rc == WEFT_OK && count != numel)
    rc = weft__err(WEFT_EINVAL, "'%s' holds %lld numbers but tensor '%s' (%s) needs %lld", path,
                   (long long)count, weft_tensor_name(t), shape, (long long)numel);
  if (rc == WEFT_OK) rc = weft_tensor_write(t, vals, bytes);
  weft__free(vals);
  weft__free(buf);
  return rc;
}

int weft_program_load(weft_runtime *rt, const char *path, const weft_dsl_options *opts, weft_program **out) {
  if (out != NULL) *out = NULL;
  if (rt == NULL || path == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_program_load: NULL argument");
  char *text;
  size_t len;
  int rc = read_file(path, SIZE_MAX, &text, &len);
  if (rc != WEFT_OK) return rc;
  rc = weft_program_parse(rt, path, text, len, opts, out);
  weft__free(text);
  return rc;
}

/* ---- results ------------------------------------------------------------------------------ */

/* Appends values [from, from + count) of a tensor of `ndim` dims `shape` as nested lists. */
static void put_nested(weft__strbuf *b, const void *data, int is_f32, const int64_t *shape, int ndim,
                       int64_t *index, int json) {
  char num[48];
  if (ndim == 0) {
    double v = is_f32 ? (double)((const float *)data)[*index] : ((const double *)data)[*index];
    (*index)++;
    if (json && !(v - v == 0))
      weft__strbuf_puts(b, "null");
    else
      weft__strbuf_puts(b, weft__dsl_fmt_number(num, v, is_f32));
    return;
  }
  weft__strbuf_puts(b, "[");
  for (int64_t i = 0; i < shape[0]; i++) {
    if (i) weft__strbuf_puts(b, ", ");
    put_nested(b, data, is_f32, shape + 1, ndim - 1, index, json);
  }
  weft__strbuf_puts(b, "]");
}

/* Tensors up to this many elements are printed in full as text. */
enum { PRINT_ALL = 16, PRINT_HEAD = 4 };

static void put_text(weft__strbuf *b, const char *name, weft_tensor *t, const void *data) {
  char num[48], dev[32];
  int is_f32 = weft_tensor_dtype(t) == WEFT_F32, ndim = weft_tensor_ndim(t);
  int64_t n = weft_tensor_numel(t), shape[WEFT_MAX_DIMS], index = 0;
  for (int i = 0; i < ndim; i++) shape[i] = weft_tensor_dim(t, i);
  if (ndim == 0) {
    weft__strbuf_printf(b, "%s = ", name);
    put_nested(b, data, is_f32, shape, 0, &index, 0);
    weft__strbuf_puts(b, "\n");
    return;
  }
  weft__strbuf_printf(b, "%s: %s[", name, weft_dtype_name(weft_tensor_dtype(t)));
  for (int i = 0; i < ndim; i++) weft__strbuf_printf(b, "%s%lld", i ? ", " : "", (long long)shape[i]);
  weft__strbuf_printf(b, "] on %s", weft_device_str(weft_tensor_device(t), dev, sizeof dev));
  if (n <= PRINT_ALL) {
    weft__strbuf_puts(b, " = ");
    put_nested(b, data, is_f32, shape, ndim, &index, 0);
    weft__strbuf_puts(b, "\n");
    return;
  }
  double sum = 0, lo = 0, hi = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = is_f32 ? (double)((const float *)data)[i] : ((const double *)data)[i];
    sum += v;
    if (i == 0 || v < lo) lo = v;
    if (i == 0 || v > hi) hi = v;
  }
  weft__strbuf_printf(b, ": sum %s", weft__dsl_fmt_number(num, sum, 0));
  weft__strbuf_printf(b, ", min %s", weft__dsl_fmt_number(num, lo, is_f32));
  weft__strbuf_printf(b, ", max %s, values [", weft__dsl_fmt_number(num, hi, is_f32));
  for (int64_t i = 0; i < PRINT_HEAD; i++) {
    double v = is_f32 ? (double)((const float *)data)[i] : ((const double *)data)[i];
    weft__strbuf_printf(b, "%s, ", weft__dsl_fmt_number(num, v, is_f32));
  }
  double last = is_f32 ? (double)((const float *)data)[n - 1] : ((const double *)data)[n - 1];
  weft__strbuf_printf(b, "..., %s]\n", weft__dsl_fmt_number(num, last, is_f32));
}

static int save(const weft__dsl_output *o, void *data) {
  weft_tensor *t = o->t;
  size_t bytes = weft_tensor_bytes(t), esize = weft_dtype_size(weft_tensor_dtype(t));
  FILE *f = fopen(o->path, o->text_format ? "w" : "wb");
  if (f == NULL) return weft__err(WEFT_EIO, "save %s: cannot write '%s': %s", o->name, o->path, strerror(errno));
  int ok = 1;
  if (!o->text_format) {
    to_little_endian(data, bytes, esize);
    ok = fwrite(data, 1, bytes, f) == bytes;
  } else {
    char num[48];
    int ndim = weft_tensor_ndim(t), is_f32 = esize == 4;
    int64_t n = weft_tensor_numel(t), row = ndim >= 2 ? weft_tensor_dim(t, ndim - 1) : 1;
    for (int64_t i = 0; i < n && ok; i++) {
      double v = is_f32 ? (double)((const float *)data)[i] : ((const double *)data)[i];
      int end_of_row = row <= 1 || (i + 1) % row == 0;
      ok = fprintf(f, "%s%s", weft__dsl_fmt_number(num, v, is_f32), end_of_row ? "\n" : " ") > 0;
    }
  }
  int e = errno;
  if (fclose(f) != 0) ok = 0;
  if (!ok) return weft__err(WEFT_EIO, "save %s: writing '%s' failed: %s", o->name, o->path, strerror(e));
  return WEFT_OK;
}

int weft_program_outputs(weft_program *p, FILE *out, int json) {
  if (p == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_program_outputs: NULL argument");
  weft__strbuf b;
  weft__strbuf_init(&b);
  int first_rc = WEFT_OK, printed = 0;
  if (json) weft__strbuf_puts(&b, "{");
  const weft__dsl_output *outs = p->outputs.data;
  /* Across ranks (MPI) every rank takes part in reading each output (the rank that owns it
   * sends it), and rank 0 alone prints and saves them. */
  int writer = weft_runtime_rank(weft_graph_runtime(p->graph)) == 0;
  weft__dsl_symtab seen; /* JSON: a name printed twice is one key */
  weft__arena keys;
  memset(&seen, 0, sizeof seen);
  weft__arena_init(&keys, 1024, NULL);
  for (size_t i = 0; i < p->outputs.len; i++) {
    const weft__dsl_output *o = &outs[i];
    if (json && o->kind == WEFT__DSL_PRINT) {
      weft__dsl_sym *s = weft__dsl_sym_slot(&seen, &keys, o->name);
      if (s == NULL) {
        first_rc = weft__oom("the program's outputs");
        break;
      }
      if (s->kind != SYM_NONE) continue;
      s->kind = SYM_TENSOR;
    }
    size_t bytes = weft_tensor_bytes(o->t);
    void *data = weft__malloc(bytes ? bytes : 1);
    int rc = data ? weft_tensor_read_all(o->t, data, bytes) : weft__oom("a result's values");
    if (rc == WEFT_OK && writer && o->kind == WEFT__DSL_SAVE) rc = save(o, data);
    if (rc == WEFT_OK && writer && o->kind == WEFT__DSL_PRINT) {
      if (json) {
        weft__strbuf_puts(&b, printed++ ? ", " : "");
        weft__json_put_str(&b, o->name);
        weft__strbuf_puts(&b, ": ");
        int64_t shape[WEFT_MAX_DIMS], index = 0;
        for (int d = 0; d < weft_tensor_ndim(o->t); d++) shape[d] = weft_tensor_dim(o->t, d);
        put_nested(&b, data, weft_tensor_dtype(o->t) == WEFT_F32, shape, weft_tensor_ndim(o->t), &index, 1);
      } else {
        put_text(&b, o->name, o->t, data);
      }
    }
    weft__free(data);
    if (rc != WEFT_OK) {
      first_rc = rc;
      break;
    }
  }
  weft__dsl_symtab_fini(&seen);
  weft__arena_fini(&keys);
  if (json) weft__strbuf_puts(&b, "}\n");
  if (b.failed) {
    weft__strbuf_fini(&b);
    return weft__oom("the program's outputs");
  }
  if (b.len && fwrite(b.data, 1, b.len, out) != b.len && first_rc == WEFT_OK)
    first_rc = weft__err(WEFT_EIO, "weft_program_outputs: writing the results failed");
  weft__strbuf_fini(&b);
  return first_rc;
}
