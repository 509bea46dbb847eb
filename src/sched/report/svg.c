/* svg.c — the timeline of a run as one self-contained SVG file (no script, no external font
 * or style), meant to be read at a glance:
 *
 *   title: makespan, critical path, hidden copy fraction
 *   legend: compute | copy | critical path | merged
 *   time axis with round ticks, faint grid lines
 *   the run's setup (what happened before its first node) on a lane of its own, first: the
 *   time axis starts at the setup's start, and the nodes follow it
 *   per device a heading, then its lanes (CPU workers; a GPU's compute and copy streams);
 *   lanes that ran nothing are not drawn (a 64-core host's idle workers), only counted,
 *   one bar per node at its interval: compute blue, copies orange; nodes on the critical path
 *   outlined and underlined in dark red; a <title> on each bar for hovering
 *
 * Legibility for large graphs: a bar narrower than a pixel is not drawn alone. Consecutive thin
 * bars of a lane whose gaps are under a pixel are merged into one bar ("merged" in the legend,
 * its title saying how many nodes and copies it holds, coloured by the majority), so 10 000
 * nodes on 1 600 pixels make at most a few thousand elements and the density still shows. Each
 * node drawn alone is a <rect class="node" data-node="ID">, each merged bar a
 * <rect class="merged" data-nodes="N">; the tests count them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/report/stats.h"
#include "util/json.h"
#include "sched/sched.h"

enum { LABEL_W = 190, RIGHT_PAD = 20, TOP = 100, HEAD_H = 18 };

static const char *C_COMPUTE = "#4e79a7", *C_COPY = "#f28e2b", *C_CRIT = "#9c1c1c", *C_SETUP = "#59a14f";

/* Writes s as XML text: the markup characters escaped, control characters dropped, and invalid
 * UTF-8 repaired (each ill-formed sequence one U+FFFD), so a badly named tensor still gives a
 * well-formed picture. On a failed allocation the name is left out. */
void weft__xml_str(FILE *f, const char *text) {
  weft__strbuf b;
  weft__strbuf_init(&b);
  weft__utf8_repair(&b, text, strlen(text));
  const char *s = b.failed || b.data == NULL ? "" : b.data;
  for (; *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&apos;", f); break;
    default:
      if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n') fputc(*s, f);
    }
  }
  weft__strbuf_fini(&b);
}

typedef struct layout {
  double x0, w;    /* the plot's left edge and width, in px */
  double t_total;  /* ns shown across the plot */
  double shift;    /* ns from the plot's start to the nodes' time 0 (the setup's length) */
  double lane_h;
} layout;

static int device_differs(weft_device a, weft_device b) {
  return a.kind != b.kind || a.index != b.index;
}

static double xpos(const layout *L, uint64_t t) { return L->x0 + ((double)t + L->shift) / L->t_total * L->w; }

static void fmt_t(char *buf, size_t size, double ns, double total) {
  if (total >= 1e9)
    snprintf(buf, size, "%g s", ns * 1e-9);
  else if (total >= 1e6)
    snprintf(buf, size, "%g ms", ns * 1e-6);
  else
    snprintf(buf, size, "%g us", ns * 1e-3);
}

/* The setup's steps: one bar each, thin neighbours merged (a graph of many small tensors). */
static void setup_bars(const weft_run_stats *st, FILE *f, const layout *L, double y) {
  char label[160], d[32], bytes[32];
  for (size_t i = 0; i < st->nsetup;) {
    const weft_setup_step *x = &st->setup[i];
    double x1 = L->x0 + x->start_s * 1e9 / L->t_total * L->w, x2 = L->x0 + x->end_s * 1e9 / L->t_total * L->w;
    size_t j = i + 1;
    while (j < st->nsetup && x2 - x1 < 1.0) { /* merge until a pixel wide */
      x2 = L->x0 + st->setup[j].end_s * 1e9 / L->t_total * L->w;
      j++;
    }
    fmt_t(d, sizeof d, (st->setup[j - 1].end_s - x->start_s) * 1e9, L->t_total);
    if (j - i > 1) {
      snprintf(label, sizeof label, "%zu setup steps", j - i);
    } else if (x->kind[0] == 't' && x->what == NULL) {
      snprintf(label, sizeof label, "materialise %zu tensors under 64 KiB (%llu bytes)", x->count,
               (unsigned long long)x->bytes);
    } else if (x->kind[0] == 't') {
      char dev[32];
      snprintf(bytes, sizeof bytes, "%llu bytes", (unsigned long long)x->bytes);
      snprintf(label, sizeof label, "materialise %s (%s, %s%s)", x->what, bytes,
               weft_device_str(x->device, dev, sizeof dev), x->pinned ? ", pinned" : "");
    } else {
      snprintf(label, sizeof label, "%s%s%s", x->kind, x->what ? ": " : "", x->what ? x->what : "");
    }
    fprintf(f, "<rect class=\"setup\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>",
            x1, y, x2 - x1 < 1 ? 1 : x2 - x1, L->lane_h, C_SETUP);
    weft__xml_str(f, label);
    fprintf(f, ": %s</title></rect>\n", d);
    i = j;
  }
}


/* A run of thin bars being merged. */
typedef struct merged {
  int open;
  double xa, xb;
  uint32_t count, copies, critical;
  uint64_t ta, tb;
} merged;

static void flush(FILE *f, const layout *L, merged *m, double y) {
  if (!m->open) return;
  char a[32], b[32];
  double w = m->xb - m->xa < 1 ? 1 : m->xb - m->xa;
  fprintf(f, "<rect class=\"merged\" data-nodes=\"%u\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
             "height=\"%.2f\" fill=\"%s\" fill-opacity=\"0.6\"><title>%u nodes (%u copies), %s to %s"
             "</title></rect>\n",
          m->count, m->xa, y, w, L->lane_h, 2 * m->copies > m->count ? C_COPY : C_COMPUTE, m->count,
          m->copies, (fmt_t(a, sizeof a, (double)m->ta, L->t_total), a),
          (fmt_t(b, sizeof b, (double)m->tb, L->t_total), b));
  if (m->critical)
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"2\" fill=\"%s\"/>\n", m->xa,
            y + L->lane_h - 2, w, C_CRIT);
  m->open = 0;
}

static void bars(const weft_run_stats *st, FILE *f, const layout *L, const uint32_t *o, size_t k,
                 double y) {
  const weft__rep *r = st->rep;
  merged m = {0};
  char label[200], d[32];
  for (size_t j = 0; j < k; j++) {
    const weft__rnode *x = &r->node[o[j]];
    double x1 = xpos(L, x->start), x2 = xpos(L, x->end);
    if (x2 - x1 >= 1.0) {
      flush(f, L, &m, y);
      fprintf(f, "<rect class=\"node\" data-node=\"%u\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                 "height=\"%.2f\" fill=\"%s\"",
              o[j], x1, y, x2 - x1, L->lane_h, x->copy ? C_COPY : C_COMPUTE);
      if (x->critical) fprintf(f, " stroke=\"%s\" stroke-width=\"1.5\"", C_CRIT);
      fputs("><title>", f);
      weft__xml_str(f, weft__stats_label(st, o[j], label, sizeof label));
      fmt_t(d, sizeof d, (double)(x->end - x->start), L->t_total);
      fprintf(f, ": %s%s</title></rect>\n", d, x->critical ? ", critical path" : "");
      if (x->critical)
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"2\" fill=\"%s\"/>\n", x1,
                y + L->lane_h - 2, x2 - x1, C_CRIT);
      continue;
    }
    if (m.open && x1 <= m.xb + 1.0) {
      if (x2 > m.xb) m.xb = x2;
      if (x->end > m.tb) m.tb = x->end;
    } else {
      flush(f, L, &m, y);
      m = (merged){1, x1, x2, 0, 0, 0, x->start, x->end};
    }
    m.count++;
    m.copies += x->copy;
    m.critical |= x->critical;
  }
  flush(f, L, &m, y);
}

static void axis(FILE *f, const layout *L, double y_top, double y_bottom) {
  double raw = L->t_total / 10, mag = pow(10, floor(log10(raw)));
  double step = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
  fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#444\"/>\n", L->x0,
          y_top, L->x0 + L->w, y_top);
  for (double t = 0; t <= L->t_total * 1.0000001; t += step) {
    double x = L->x0 + t / L->t_total * L->w;
    char lab[32];
    fmt_t(lab, sizeof lab, t, L->t_total);
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#ddd\"/>\n", x, y_top,
            x, y_bottom);
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#444\"/>\n", x,
            y_top - 4, x, y_top);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"10\" text-anchor=\"middle\">%s</text>\n", x,
            y_top - 7, lab);
  }
}

static void legend(FILE *f, double x, double y) {
  const struct {
    const char *label, *fill, *stroke;
    double opacity;
  } items[] = {
      {"compute", C_COMPUTE, NULL, 1},
      {"copy", C_COPY, NULL, 1},
      {"critical path", "#fff", C_CRIT, 1},
      {"merged (bars under a pixel)", C_COMPUTE, NULL, 0.6},
      {"setup", C_SETUP, NULL, 1},
  };
  for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
    fprintf(f, "<rect class=\"legend\" x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\" "
               "fill-opacity=\"%.1f\"",
            x, y - 9, items[i].fill, items[i].opacity);
    if (items[i].stroke) fprintf(f, " stroke=\"%s\" stroke-width=\"1.5\"", items[i].stroke);
    fprintf(f, "/><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n", x + 18, y, items[i].label);
    x += 40 + 7.0 * (double)strlen(items[i].label);
  }
}

int weft__stats_write_svg(const weft_run_stats *st, FILE *f, int width) {
  const weft__rep *r = st->rep;
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  layout L;
  L.x0 = LABEL_W;
  L.w = (width < 400 ? 400 : width) - LABEL_W - RIGHT_PAD;
  L.shift = (double)st->setup_ns;
  L.t_total = L.shift + (double)(r->wall > r->span_end ? r->wall : r->span_end);
  if (L.t_total <= 0) L.t_total = 1;
  /* Lanes are numbered CPU workers first, then by device and role: grouping is a walk over
   * the lanes that ran something. */
  size_t ngroups = 0, drawn = 0;
  const weft__rlane *prev = NULL;
  for (uint32_t l = 0; l < r->nlanes; l++) {
    if (r->lanes[l].nodes == 0) continue;
    if (prev == NULL || device_differs(prev->device, r->lanes[l].device)) ngroups++;
    prev = &r->lanes[l];
    drawn++;
  }
  L.lane_h = drawn <= 40 ? 16 : drawn <= 200 ? 8 : 4;
  int has_setup = st->nsetup > 0;
  double height = TOP + (double)(ngroups + has_setup) * HEAD_H + (double)(drawn + has_setup) * (L.lane_h + 3) + 40;
  uint32_t *o, *begin;
  int rc = weft__rep_lane_order(r, &o, &begin);
  if (rc != WEFT_OK) return rc;

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" "
             "viewBox=\"0 0 %d %.0f\" font-family=\"sans-serif\">\n",
          (int)(L.x0 + L.w + RIGHT_PAD), height, (int)(L.x0 + L.w + RIGHT_PAD), height);
  fprintf(f, "<rect class=\"background\" x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
  char a[32], b[32], c[48];
  weft__fmt_time(a, sizeof a, s.makespan_s);
  weft__fmt_time(b, sizeof b, s.critical_path_s);
  if (s.hidden_copy_fraction < 0)
    snprintf(c, sizeof c, s.copies == 0 ? "no copies" : "no copies with device times");
  else
    snprintf(c, sizeof c, "%.1f%% of copy time hidden", 100 * s.hidden_copy_fraction);
  fprintf(f, "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">weft run: makespan %s, "
             "critical path %s (%zu nodes), %s</text>\n",
          a, b, s.critical_path_nodes, c);
  if (s.host_timed_nodes > 0)
    fprintf(f, "<text x=\"10\" y=\"%d\" font-size=\"11\" fill=\"%s\">%zu device nodes have "
               "host-side times only (their backend reports no device times)</text>\n",
            TOP - 36, C_CRIT, s.host_timed_nodes);
  legend(f, 10, 44);
  double y = TOP;
  axis(f, &L, y - 12, height - 30);
  if (has_setup) {
    char t[32];
    weft__fmt_time(t, sizeof t, s.setup_s);
    fprintf(f, "<text x=\"10\" y=\"%.1f\" font-size=\"12\" font-weight=\"bold\">setup: %s before the first node</text>\n",
            y + 13, t);
    y += HEAD_H;
    fprintf(f, "<rect class=\"lane\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#f4f4f4\"/>\n", L.x0, y,
            L.w, L.lane_h);
    setup_bars(st, f, &L, y);
    y += L.lane_h + 3;
  }
  prev = NULL;
  for (uint32_t l = 0; l < r->nlanes; l++) {
    if (r->lanes[l].nodes == 0) continue;
    if (prev == NULL || device_differs(prev->device, r->lanes[l].device)) {
      char dev[32];
      fprintf(f, "<text x=\"10\" y=\"%.1f\" font-size=\"12\" font-weight=\"bold\">%s</text>\n",
              y + 13, weft_device_str(r->lanes[l].device, dev, sizeof dev));
      fprintf(f, "<line x1=\"10\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#bbb\"/>\n", y + 16,
              L.x0 + L.w, y + 16);
      y += HEAD_H;
    }
    fprintf(f, "<text x=\"20\" y=\"%.1f\" font-size=\"%d\">", y + L.lane_h - 3, L.lane_h >= 12 ? 11 : 7);
    weft__xml_str(f, st->lane_name[l]);
    fprintf(f, "</text>\n<rect class=\"lane\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
               "fill=\"#f4f4f4\"/>\n",
            L.x0, y, L.w, L.lane_h);
    bars(st, f, &L, o + begin[l], begin[l + 1] - begin[l], y);
    y += L.lane_h + 3;
    prev = &r->lanes[l];
  }
  fprintf(f, "<text x=\"10\" y=\"%.1f\" font-size=\"10\" fill=\"#666\">time from the launch call (the "
             "setup, then the nodes); hover a bar for its node",
          height - 10);
  if (drawn < r->nlanes) fprintf(f, "; %zu lanes that ran nothing are not drawn", r->nlanes - drawn);
  fputs("</text>\n</svg>\n", f);
  weft__free(o);
  weft__free(begin);
  return weft__stats_stream_status(f, "timeline (SVG)");
}
