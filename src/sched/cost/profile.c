/* profile.c — machine profiles: the JSON format read and written, shipped names resolved.
 *
 * jansson reads the document (util/json.h: syntax errors with line and column, a key given
 * twice refused with its path). The reader walks it table-driven: each object of the format
 * (the top level, "host", "gpu", a link) has a table of fields with their type, where they go
 * in weft__sim_profile, whether they are required and their valid range. A key the table does not know is an error that names it —
 * a misspelt field must not silently fall back to a default — except "notes" and keys that
 * start with '_', which are free for people. Every message names the field by its path. */
#include "sched/cost/profile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"

#define FORMAT_NAME "weft-machine-profile"
#define FORMAT_VERSION 1
#define MAX_FILE ((size_t)1 << 20)

/* ---- curves ------------------------------------------------------------------------------ */

double weft__sim_curve_at(const weft__sim_curve *c, double x) {
  if (c->n <= 0) return 0;
  if (c->n == 1 || x <= c->x[0]) return c->y[0];
  if (x >= c->x[c->n - 1]) return c->y[c->n - 1];
  int i = 1;
  while (c->x[i] < x) i++;
  double lx0 = log(c->x[i - 1]), lx1 = log(c->x[i]);
  double f = (log(x) - lx0) / (lx1 - lx0);
  return exp(log(c->y[i - 1]) + f * (log(c->y[i]) - log(c->y[i - 1])));
}

/* ---- reading ------------------------------------------------------------------------------ */

typedef enum ftype { F_NUM, F_INT, F_SIZE, F_STR, F_CURVE, F_LINK, F_CC, F_CALLER } ftype;

typedef struct field {
  const char *key;
  ftype type;
  size_t off;
  int required;
  double lo, hi; /* F_NUM, F_INT, F_SIZE, curve values, link figures */
  size_t cap;    /* F_STR */
} field;

#define OFF(m) offsetof(weft__sim_profile, m)
static const double BIG = 1e30;

/* F_CALLER: read by weft__sim_profile_parse itself (checked by hand, or an object with its
 * own table). */
static const field top_fields[] = {
    {"format", F_CALLER, 0, 1, 0, 0, 0},
    {"version", F_CALLER, 0, 1, 0, 0, 0},
    {"name", F_STR, OFF(name), 1, 0, 0, sizeof(((weft__sim_profile *)0)->name)},
    {"source", F_STR, OFF(source), 1, 0, 0, sizeof(((weft__sim_profile *)0)->source)},
    {"host", F_CALLER, 0, 1, 0, 0, 0},
    {"gpu", F_CALLER, 0, 1, 0, 0, 0},
    {"links", F_CALLER, 0, 1, 0, 0, 0},
};

static const field host_fields[] = {
    {"name", F_STR, OFF(host.name), 1, 0, 0, sizeof(((weft__sim_host *)0)->name)},
    {"cores", F_INT, OFF(host.cores), 1, 1, 65536, 0},
    {"memory_bytes", F_SIZE, OFF(host.memory_bytes), 1, 1, BIG, 0},
    {"gemm_f32_flops", F_CURVE, OFF(host.gemm[0]), 1, 1, BIG, 0},
    {"gemm_f64_flops", F_CURVE, OFF(host.gemm[1]), 1, 1, BIG, 0},
    {"gemm_f32_wide_flops", F_CURVE, OFF(host.gemm_wide[0]), 0, 1, BIG, 0},
    {"gemm_f64_wide_flops", F_CURVE, OFF(host.gemm_wide[1]), 0, 1, BIG, 0},
    {"potrf_f32_wide_flops", F_CURVE, OFF(host.la_wide[0][0]), 0, 1, BIG, 0},
    {"potrf_f64_wide_flops", F_CURVE, OFF(host.la_wide[0][1]), 0, 1, BIG, 0},
    {"trsm_f32_wide_flops", F_CURVE, OFF(host.la_wide[1][0]), 0, 1, BIG, 0},
    {"trsm_f64_wide_flops", F_CURVE, OFF(host.la_wide[1][1]), 0, 1, BIG, 0},
    {"syrk_f32_wide_flops", F_CURVE, OFF(host.la_wide[2][0]), 0, 1, BIG, 0},
    {"syrk_f64_wide_flops", F_CURVE, OFF(host.la_wide[2][1]), 0, 1, BIG, 0},
    {"trtri_f32_wide_flops", F_CURVE, OFF(host.la_wide[3][0]), 0, 1, BIG, 0},
    {"trtri_f64_wide_flops", F_CURVE, OFF(host.la_wide[3][1]), 0, 1, BIG, 0},
    {"memory_bandwidth", F_NUM, OFF(host.memory_bandwidth), 1, 1, BIG, 0},
    {"fill_rate", F_NUM, OFF(host.fill_rate), 1, 1, BIG, 0},
    {"node_s", F_NUM, OFF(host.node_s), 1, 0, 1, 0},
    {"wake_s", F_NUM, OFF(host.wake_s), 0, 0, 1, 0},
};

static const field gpu_fields[] = {
    {"count", F_INT, OFF(ngpus), 1, 0, WEFT__SIM_MAX_GPUS, 0},
    {"name", F_STR, OFF(gpu.name), 1, 0, 0, sizeof(((weft__sim_gpu *)0)->name)},
    {"memory_bytes", F_SIZE, OFF(gpu.memory_bytes), 1, 1, BIG, 0},
    {"compute_capability", F_CC, OFF(gpu.cc_major), 1, 0, 0, 0},
    {"multiprocessors", F_INT, OFF(gpu.multiprocessors), 1, 1, 1 << 20, 0},
    {"compute_streams", F_INT, OFF(gpu.compute_streams), 1, 1, 8, 0},
    {"copy_engines", F_INT, OFF(gpu.copy_engines), 1, 1, 3, 0},
    {"gemm_f32_flops", F_CURVE, OFF(gpu.gemm[0]), 1, 1, BIG, 0},
    {"gemm_f64_flops", F_CURVE, OFF(gpu.gemm[1]), 1, 1, BIG, 0},
    {"memory_bandwidth", F_NUM, OFF(gpu.memory_bandwidth), 1, 1, BIG, 0},
    {"fill_bandwidth", F_NUM, OFF(gpu.fill_bandwidth), 1, 1, BIG, 0},
    {"kernel_s", F_NUM, OFF(gpu.kernel_s), 1, 0, 1, 0},
    {"launch_s", F_NUM, OFF(gpu.launch_s), 1, 0, 1, 0},
    {"gemm_launch_s", F_NUM, OFF(gpu.gemm_launch_s), 0, 0, 1, 0},
    {"event_s", F_NUM, OFF(gpu.event_s), 1, 0, 1, 0},
    {"notify_s", F_NUM, OFF(gpu.notify_s), 1, 0, 1, 0},
    {"replay_node_s", F_NUM, OFF(gpu.replay_node_s), 0, 0, 1, 0},
    {"gemm_t_f32_flops", F_CURVE, OFF(gpu.gemm_t[0]), 0, 1, BIG, 0},
    {"gemm_t_f64_flops", F_CURVE, OFF(gpu.gemm_t[1]), 0, 1, BIG, 0},
    {"gemm_f32_share", F_CURVE, OFF(gpu.gemm_share), 0, 1e-6, 1, 0},
    {"gemm_f32_wide_s", F_CURVE, OFF(gpu.gemm_wide_s), 0, 1e-9, 1, 0},
    {"potrf_f32_flops", F_CURVE, OFF(gpu.la[0][0]), 0, 1, BIG, 0},
    {"potrf_f64_flops", F_CURVE, OFF(gpu.la[0][1]), 0, 1, BIG, 0},
    {"trsm_f32_flops", F_CURVE, OFF(gpu.la[1][0]), 0, 1, BIG, 0},
    {"trsm_f64_flops", F_CURVE, OFF(gpu.la[1][1]), 0, 1, BIG, 0},
    {"syrk_f32_flops", F_CURVE, OFF(gpu.la[2][0]), 0, 1, BIG, 0},
    {"syrk_f64_flops", F_CURVE, OFF(gpu.la[2][1]), 0, 1, BIG, 0},
    {"trtri_f32_flops", F_CURVE, OFF(gpu.la[3][0]), 0, 1, BIG, 0},
    {"trtri_f64_flops", F_CURVE, OFF(gpu.la[3][1]), 0, 1, BIG, 0},
    {"temp_s", F_NUM, OFF(gpu.temp_s), 0, 0, 1, 0},
    {"replay_temp_s", F_NUM, OFF(gpu.replay_temp_s), 0, 0, 1, 0},
    {"launch_lanes", F_NUM, OFF(gpu.launch_lanes), 0, 0, 64, 0},
    {"batch_node_s", F_NUM, OFF(gpu.batch_node_s), 0, 0, 1, 0},
    {"batch_op_s", F_NUM, OFF(gpu.batch_op_s), 0, 0, 1, 0},
    {"run_s", F_NUM, OFF(gpu.run_s), 0, 0, 1, 0},
    {"replay_run_s", F_NUM, OFF(gpu.replay_run_s), 0, 0, 1, 0},
};

static const field link_fields[] = {
    {"h2d", F_LINK, OFF(h2d), 1, 0, 0, 0},
    {"d2h", F_LINK, OFF(d2h), 1, 0, 0, 0},
    {"h2d_pageable", F_LINK, OFF(h2d_pageable), 1, 0, 0, 0},
    {"d2h_pageable", F_LINK, OFF(d2h_pageable), 1, 0, 0, 0},
    {"peer", F_LINK, OFF(peer), 0, 0, 0, 0}, /* absent or null: no peer access */
    {"ranks", F_LINK, OFF(ranks), 0, 0, 0, 0},     /* absent: WEFT__SIM_RANKS_LINK */
    {"network", F_LINK, OFF(network), 0, 0, 0, 0}, /* absent: WEFT__SIM_NETWORK_LINK */
};

#define NFIELDS(t) (sizeof(t) / sizeof((t)[0]))

/* Every message names the field by its path; jansson keeps no positions of values, so a
 * field's line is not known, but its path is unique in a profile. */
static int bad(const char *what, const char *path, const char *msg) {
  return weft__err(WEFT_EINVAL, "%s: %s: %s", what, path, msg);
}

static int read_number(const char *what, const char *path, const json_t *v, double lo,
                       double hi, double *out) {
  char msg[160];
  if (!json_is_number(v)) {
    snprintf(msg, sizeof msg, "expected a number, found %s", weft__json_type_name(v));
    return bad(what, path, msg);
  }
  double x = json_number_value(v);
  if (!(x >= lo && x <= hi)) {
    snprintf(msg, sizeof msg, "%g is out of range [%g, %g]", x, lo, hi);
    return bad(what, path, msg);
  }
  *out = x;
  return WEFT_OK;
}

static int read_curve(const char *what, const char *path, const json_t *v, double lo,
                      double hi, weft__sim_curve *c) {
  char p[160];
  size_t n = json_array_size(v);
  if (!json_is_array(v) || n == 0 || n > WEFT__SIM_CURVE_MAX) {
    snprintf(p, sizeof p, "expected an array of 1 to %d [size, value] pairs", WEFT__SIM_CURVE_MAX);
    return bad(what, path, p);
  }
  c->n = 0;
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(v, i);
    snprintf(p, sizeof p, "%.100s[%d]", path, c->n);
    if (!json_is_array(e) || json_array_size(e) != 2)
      return bad(what, p, "expected a pair [size, value]");
    double x, y;
    int rc;
    if ((rc = read_number(what, p, json_array_get(e, 0), 1e-9, BIG, &x)) != WEFT_OK) return rc;
    if ((rc = read_number(what, p, json_array_get(e, 1), lo, hi, &y)) != WEFT_OK) return rc;
    if (c->n > 0 && !(x > c->x[c->n - 1])) return bad(what, p, "sizes must be strictly ascending");
    c->x[c->n] = x;
    c->y[c->n] = y;
    c->n++;
  }
  return WEFT_OK;
}

/* Keys free for people: "notes" and any key that starts with '_'. */
static int free_key(const char *key) { return key[0] == '_' || strcmp(key, "notes") == 0; }

static int read_link(const char *what, const char *path, const json_t *v, weft__sim_link *l) {
  char p[160];
  if (!json_is_object(v)) return bad(what, path, "expected an object {bandwidth, latency_s}");
  int have_bw = 0, have_lat = 0;
  const char *key;
  json_t *m;
  json_object_foreach((json_t *)v, key, m) {
    snprintf(p, sizeof p, "%.80s.%.60s", path, key);
    int rc;
    if (strcmp(key, "bandwidth") == 0) {
      if ((rc = read_number(what, p, m, 1, BIG, &l->bandwidth)) != WEFT_OK) return rc;
      have_bw = 1;
    } else if (strcmp(key, "latency_s") == 0) {
      if ((rc = read_number(what, p, m, 0, 1, &l->latency_s)) != WEFT_OK) return rc;
      have_lat = 1;
    } else if (!free_key(key)) {
      return bad(what, p, "unknown field (expected bandwidth or latency_s)");
    }
  }
  if (!have_bw) return bad(what, path, "missing field bandwidth");
  if (!have_lat) return bad(what, path, "missing field latency_s");
  return WEFT_OK;
}

/* Reads the members of object `obj` (at `path`) through `table` into `prof`; F_CALLER members
 * are only checked for presence. A key given twice never gets here: weft__json_read refuses
 * it. */
static int read_object(const char *what, const char *path, const json_t *obj,
                       const field *table, size_t nt, weft__sim_profile *prof) {
  char p[160], msg[200];
  if (!json_is_object(obj)) return bad(what, path, "expected an object");
  const char *key;
  json_t *m;
  json_object_foreach((json_t *)obj, key, m) {
    snprintf(p, sizeof p, "%.80s%s%.60s", path, *path ? "." : "", key);
    const field *f = NULL;
    for (size_t i = 0; i < nt && f == NULL; i++)
      if (strcmp(table[i].key, key) == 0) f = &table[i];
    if (f == NULL) {
      if (free_key(key)) continue;
      return bad(what, p, "unknown field");
    }
    char *dst = (char *)prof + f->off;
    double d;
    int rc = WEFT_OK;
    switch (f->type) {
      case F_NUM:
        rc = read_number(what, p, m, f->lo, f->hi, (double *)dst);
        break;
      case F_INT:
        if ((rc = read_number(what, p, m, f->lo, f->hi, &d)) == WEFT_OK) {
          if (d != floor(d)) return bad(what, p, "expected an integer");
          *(int *)dst = (int)d;
        }
        break;
      case F_SIZE:
        if ((rc = read_number(what, p, m, f->lo, f->hi, &d)) == WEFT_OK) *(size_t *)dst = (size_t)d;
        break;
      case F_CALLER:
        break;
      case F_STR: {
        if (!json_is_string(m)) {
          snprintf(msg, sizeof msg, "expected a string, found %s", weft__json_type_name(m));
          return bad(what, p, msg);
        }
        size_t len = json_string_length(m);
        if (len >= f->cap || strlen(json_string_value(m)) != len) {
          snprintf(msg, sizeof msg, "expected a string of at most %zu bytes without NUL", f->cap - 1);
          return bad(what, p, msg);
        }
        memcpy(dst, json_string_value(m), len + 1);
        break;
      }
      case F_CURVE:
        rc = read_curve(what, p, m, f->lo, f->hi, (weft__sim_curve *)dst);
        break;
      case F_LINK:
        if (json_is_null(m) && !f->required) break;
        if ((rc = read_link(what, p, m, (weft__sim_link *)dst)) == WEFT_OK && f->off == OFF(peer))
          prof->peer_access = 1;
        break;
      case F_CC: {
        double ma, mi;
        if (!json_is_array(m) || json_array_size(m) != 2) return bad(what, p, "expected [major, minor]");
        if ((rc = read_number(what, p, json_array_get(m, 0), 0, 1000, &ma)) != WEFT_OK ||
            (rc = read_number(what, p, json_array_get(m, 1), 0, 1000, &mi)) != WEFT_OK)
          return rc;
        prof->gpu.cc_major = (int)ma;
        prof->gpu.cc_minor = (int)mi;
        break;
      }
    }
    if (rc != WEFT_OK) return rc;
  }
  for (size_t i = 0; i < nt; i++)
    if (table[i].required && json_object_get(obj, table[i].key) == NULL) {
      snprintf(msg, sizeof msg, "missing field %s", table[i].key);
      return bad(what, *path ? path : "the profile", msg);
    }
  return WEFT_OK;
}

int weft__sim_profile_parse(const char *json, size_t len, const char *what,
                            weft__sim_profile *out) {
  json_t *root;
  weft__sim_profile p;
  memset(&p, 0, sizeof p);
  int rc = weft__json_read(json, len, what, &root);
  if (rc != WEFT_OK) return rc;
  if (!json_is_object(root)) {
    rc = bad(what, "the profile", "expected a JSON object");
    goto done;
  }
  const json_t *fmt = json_object_get(root, "format");
  if (!json_is_string(fmt) || strcmp(json_string_value(fmt), FORMAT_NAME) != 0) {
    rc = bad(what, "format", "not a weft machine profile (\"format\": \"" FORMAT_NAME "\" is missing)");
    goto done;
  }
  if ((rc = read_object(what, "", root, top_fields, NFIELDS(top_fields), &p)) != WEFT_OK) goto done;
  const json_t *ver = json_object_get(root, "version");
  if (!json_is_number(ver) || json_number_value(ver) != FORMAT_VERSION) {
    rc = bad(what, "version", "this weft reads version 1 profiles");
    goto done;
  }
  if ((rc = read_object(what, "host", json_object_get(root, "host"), host_fields,
                        NFIELDS(host_fields), &p)) != WEFT_OK ||
      (rc = read_object(what, "gpu", json_object_get(root, "gpu"), gpu_fields, NFIELDS(gpu_fields),
                        &p)) != WEFT_OK ||
      (rc = read_object(what, "links", json_object_get(root, "links"), link_fields,
                        NFIELDS(link_fields), &p)) != WEFT_OK)
    goto done;
  p.rank_links = (p.ranks.bandwidth > 0) | (p.network.bandwidth > 0) << 1;
  if (p.ranks.bandwidth == 0) p.ranks = WEFT__SIM_RANKS_LINK;
  if (p.network.bandwidth == 0) p.network = WEFT__SIM_NETWORK_LINK;
  if (p.gpu.replay_node_s > p.gpu.launch_s) {
    rc = bad(what, "gpu.replay_node_s",
             "a replayed node cannot cost more host time than a launched one (launch_s)");
    goto done;
  }
  *out = p;
done:
  json_decref(root);
  return rc;
}

/* ---- names --------------------------------------------------------------------------------- */

static int read_file(const char *path, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return weft__err(errno == ENOENT ? WEFT_ENOENT : WEFT_EIO, "machine profile %s: %s", path,
                     strerror(errno));
  char *buf = weft__malloc(MAX_FILE + 1);
  if (buf == NULL) {
    fclose(f);
    return weft__oom("a machine profile");
  }
  size_t n = fread(buf, 1, MAX_FILE + 1, f);
  int err = ferror(f);
  fclose(f);
  if (err) {
    weft__free(buf);
    return weft__err(WEFT_EIO, "machine profile %s: read error", path);
  }
  if (n > MAX_FILE) {
    weft__free(buf);
    return weft__err(WEFT_ELIMIT, "machine profile %s is larger than 1 MiB", path);
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return WEFT_OK;
}

/* Splits "h200x8" into the family "h200" and the count 8; returns 0 if spec has no count. */
static int split_count(const char *spec, size_t *base_len, long *count) {
  const char *x = strrchr(spec, 'x');
  if (x == NULL || x == spec || x[1] == '\0') return 0;
  char *end;
  errno = 0;
  long v = strtol(x + 1, &end, 10);
  if (*end != '\0' || errno != 0 || x[1] < '0' || x[1] > '9') return 0;
  *base_len = (size_t)(x - spec);
  *count = v;
  return 1;
}

static int shipped_parse(int i, weft__sim_profile *out) {
  const weft__sim_shipped *s = &weft__sim_shipped_profiles[i];
  char what[96];
  snprintf(what, sizeof what, "shipped profile %s", s->name);
  return weft__sim_profile_parse(s->json, strlen(s->json), what, out);
}

static int unknown_name(const char *spec) {
  char list[512] = "";
  size_t len = 0;
  for (int i = 0; i < weft__sim_shipped_count && len < sizeof list - 80; i++)
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                            weft__sim_shipped_profiles[i].name);
  return weft__err(WEFT_ENOENT,
                   "simulate: no machine profile named '%s'; shipped: %s (a family name with "
                   "xN, such as h200x8, scales it to N GPUs), or give a path to a .json file",
                   spec, list);
}

int weft__sim_profile_load(const char *spec, weft__sim_profile *out) {
  if (spec == NULL || *spec == '\0')
    return weft__err(WEFT_EINVAL, "simulate: the machine profile name is empty");
  size_t sl = strlen(spec);
  if (strchr(spec, '/') != NULL || (sl > 5 && strcmp(spec + sl - 5, ".json") == 0)) {
    char *text = NULL;
    size_t len = 0;
    int rc = read_file(spec, &text, &len);
    if (rc != WEFT_OK) return rc;
    rc = weft__sim_profile_parse(text, len, spec, out);
    weft__free(text);
    return rc;
  }
  for (int i = 0; i < weft__sim_shipped_count; i++)
    if (strcmp(weft__sim_shipped_profiles[i].name, spec) == 0) return shipped_parse(i, out);
  size_t blen;
  long count;
  if (!split_count(spec, &blen, &count)) return unknown_name(spec);
  if (count < 1 || count > WEFT__SIM_MAX_GPUS)
    return weft__err(WEFT_EINVAL, "simulate: '%s' asks for %ld GPUs (1 to %d)", spec, count,
                     WEFT__SIM_MAX_GPUS);
  /* The family's profile with the most GPUs carries the device-to-device links. */
  int best = -1;
  long best_count = -1;
  for (int i = 0; i < weft__sim_shipped_count; i++) {
    const char *name = weft__sim_shipped_profiles[i].name;
    size_t nb;
    long nc = 1;
    if (strcmp(name, "") == 0) continue;
    if (!(strlen(name) == blen && strncmp(name, spec, blen) == 0) &&
        !(split_count(name, &nb, &nc) && nb == blen && strncmp(name, spec, blen) == 0))
      continue;
    if (nc > best_count) {
      best = i;
      best_count = nc;
    }
  }
  if (best < 0) return unknown_name(spec);
  int rc = shipped_parse(best, out);
  if (rc != WEFT_OK) return rc;
  out->ngpus = (int)count;
  snprintf(out->name, sizeof out->name, "%s", spec);
  size_t used = strlen(out->source);
  if (used + 120 < sizeof out->source)
    snprintf(out->source + used, sizeof out->source - used,
             " Scaled to %ld identical GPUs from the shipped profile %s.", count,
             weft__sim_shipped_profiles[best].name);
  return WEFT_OK;
}

/* ---- writing -------------------------------------------------------------------------------- */

static void put_curve(FILE *f, const char *key, const weft__sim_curve *c) {
  fprintf(f, "    \"%s\": [", key);
  for (int i = 0; i < c->n; i++) fprintf(f, "%s[%.9g, %.6g]", i ? ", " : "", c->x[i], c->y[i]);
  fprintf(f, "]");
}

/* A curve that is optional: written (after a comma) only where it has points. */
static void put_opt_curve(FILE *f, const char *key, const weft__sim_curve *c) {
  if (c->n == 0) return;
  fprintf(f, ",\n");
  put_curve(f, key, c);
}

const char *const weft__sim_la_ops[WEFT__SIM_LA_OPS] = {"potrf", "trsm", "syrk", "trtri"};

/* The linear-algebra curves of table la, keyed op_dtype{infix}_flops. */
static void put_la_curves(FILE *f, const weft__sim_curve la[WEFT__SIM_LA_OPS][2], const char *infix) {
  static const char *const dts[2] = {"f32", "f64"};
  char key[48];
  for (int op = 0; op < WEFT__SIM_LA_OPS; op++)
    for (int d = 0; d < 2; d++) {
      snprintf(key, sizeof key, "%s_%s%s_flops", weft__sim_la_ops[op], dts[d], infix);
      put_opt_curve(f, key, &la[op][d]);
    }
}

/* A link of the "links" object; every one but the first after a comma. */
static void put_link(FILE *f, const char *key, const weft__sim_link *l, int first) {
  fprintf(f, "%s    \"%s\": {\"bandwidth\": %.6g, \"latency_s\": %.4g}", first ? "" : ",\n", key, l->bandwidth,
          l->latency_s);
}

int weft__sim_profile_write(const weft__sim_profile *p, const char *path) {
  FILE *f = fopen(path, "w");
  if (f == NULL) return weft__err(WEFT_EIO, "cannot write the profile %s: %s", path, strerror(errno));
  const weft__sim_host *h = &p->host;
  const weft__sim_gpu *g = &p->gpu;
  int rc = WEFT_OK;
  fprintf(f, "{\n  \"format\": \"" FORMAT_NAME "\",\n  \"version\": %d,\n  \"name\": ", FORMAT_VERSION);
  weft__json_fput_str(f, p->name, &rc);
  fprintf(f, ",\n  \"source\": ");
  weft__json_fput_str(f, p->source, &rc);
  fprintf(f, ",\n  \"host\": {\n    \"name\": ");
  weft__json_fput_str(f, h->name, &rc);
  fprintf(f, ",\n    \"cores\": %d,\n    \"memory_bytes\": %zu,\n", h->cores, h->memory_bytes);
  put_curve(f, "gemm_f32_flops", &h->gemm[0]);
  fprintf(f, ",\n");
  put_curve(f, "gemm_f64_flops", &h->gemm[1]);
  put_opt_curve(f, "gemm_f32_wide_flops", &h->gemm_wide[0]);
  put_opt_curve(f, "gemm_f64_wide_flops", &h->gemm_wide[1]);
  put_la_curves(f, h->la_wide, "_wide");
  fprintf(f, ",\n    \"memory_bandwidth\": %.6g,\n    \"fill_rate\": %.6g,\n    \"node_s\": %.4g",
          h->memory_bandwidth, h->fill_rate, h->node_s);
  if (h->wake_s > 0) fprintf(f, ",\n    \"wake_s\": %.4g", h->wake_s);
  fprintf(f, "\n  },\n");
  fprintf(f, "  \"gpu\": {\n    \"count\": %d,\n    \"name\": ", p->ngpus);
  weft__json_fput_str(f, g->name, &rc);
  fprintf(f, ",\n    \"memory_bytes\": %zu,\n    \"compute_capability\": [%d, %d],\n"
             "    \"multiprocessors\": %d,\n    \"compute_streams\": %d,\n    \"copy_engines\": %d,\n",
          g->memory_bytes, g->cc_major, g->cc_minor, g->multiprocessors, g->compute_streams,
          g->copy_engines);
  put_curve(f, "gemm_f32_flops", &g->gemm[0]);
  fprintf(f, ",\n");
  put_curve(f, "gemm_f64_flops", &g->gemm[1]);
  fprintf(f, ",\n    \"memory_bandwidth\": %.6g,\n    \"fill_bandwidth\": %.6g,\n"
             "    \"kernel_s\": %.4g,\n    \"launch_s\": %.4g,\n    \"gemm_launch_s\": %.4g,\n"
             "    \"event_s\": %.4g,\n    \"notify_s\": %.4g,\n    \"replay_node_s\": %.4g,\n"
             "    \"temp_s\": %.4g,\n    \"replay_temp_s\": %.4g,\n    \"launch_lanes\": %.4g",
          g->memory_bandwidth, g->fill_bandwidth, g->kernel_s, g->launch_s, g->gemm_launch_s,
          g->event_s, g->notify_s, g->replay_node_s, g->temp_s, g->replay_temp_s, g->launch_lanes);
  if (g->batch_node_s > 0 || g->batch_op_s > 0)
    fprintf(f, ",\n    \"batch_node_s\": %.4g,\n    \"batch_op_s\": %.4g", g->batch_node_s, g->batch_op_s);
  if (g->run_s > 0 || g->replay_run_s > 0)
    fprintf(f, ",\n    \"run_s\": %.4g,\n    \"replay_run_s\": %.4g", g->run_s, g->replay_run_s);
  put_opt_curve(f, "gemm_t_f32_flops", &g->gemm_t[0]);
  put_opt_curve(f, "gemm_t_f64_flops", &g->gemm_t[1]);
  put_opt_curve(f, "gemm_f32_share", &g->gemm_share);
  put_opt_curve(f, "gemm_f32_wide_s", &g->gemm_wide_s);
  put_la_curves(f, g->la, "");
  fprintf(f, "\n  },\n  \"links\": {\n");
  put_link(f, "h2d", &p->h2d, 1);
  put_link(f, "d2h", &p->d2h, 0);
  put_link(f, "h2d_pageable", &p->h2d_pageable, 0);
  put_link(f, "d2h_pageable", &p->d2h_pageable, 0);
  if (p->peer_access) put_link(f, "peer", &p->peer, 0);
  if (p->rank_links & 1) put_link(f, "ranks", &p->ranks, 0);
  if (p->rank_links & 2) put_link(f, "network", &p->network, 0);
  fprintf(f, "\n");
  fprintf(f, "  }\n}\n");
  int bad_write = ferror(f);
  if (fclose(f) != 0 || bad_write) return weft__err(WEFT_EIO, "cannot write the profile %s", path);
  return rc;
}
