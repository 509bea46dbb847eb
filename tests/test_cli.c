/* test_cli.c — the `weft` command end to end: every subcommand run as a subprocess, with its
 * exit code (0 success, 1 the run failed, 2 bad input or usage), its output and its messages;
 * --help and --version; bad usage and bad files; and every example (the .weft files under
 * examples/) run on the CPU. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_proc.h"
#include "testutil.h"
#include "weft/sim.h"

/* ---- the programs ------------------------------------------------------------------------ */

/* A valid program with a parameter N, printing a result that depends on N. */
#define PROG_OK "param N = 8\ntensor x: f32[N, N] = ones\ny = mm(x, x)\nprint y\n"
/* What its output says with N = 8 and N = 3. */
#define PROG_OK_OUT8 "f32[8, 8]"
#define PROG_OK_OUT3 "f32[3, 3]"
/* A program with a WAR and a WAW edge on x (y reads x, then x is written twice). */
#define PROG_HAZARDS                                                                      \
  "tensor x: f32[4, 4] = ones\ntensor w: f32[4, 4] = ones\ny = mm(x, w)\nx = add(w, w)\n" \
  "x = add(w, w)\n"
/* A program with two errors: line 2 col 1 and line 4 col 11. */
#define PROG_BAD                                                                           \
  "param N = 8\nfrobnicate x\ntensor x: f32[4, 4] = ones\ntensor z: f33[4, 4]\n"
#define PROG_BAD_AT1 ":2:1:"
#define PROG_BAD_AT2 ":4:11:"
/* A program that runs and then fails: its output cannot be saved. */
#define PROG_FAILS                                                                        \
  "tensor x: f32[2, 2] = ones\ny = relu(x)\nsave y to \"no-such-dir/y.bin\"\n"
/* A program that needs a copy inserted on a machine with a GPU: add(x, y) runs where x lives
 * (cuda:0) and y is on the CPU. Without a GPU, everything is on the CPU. */
#define PROG_GPU                                                                          \
  "device gpu = cuda:0 | cpu\ntensor x: f32[2, 3] on gpu = ones\n"                          \
  "tensor y: f32[2, 3] on cpu = full(2)\nz = add(x, y)\nh = copy(z, cpu)\nprint h\n"
/* A program that is not in canonical form (spacing). */
#define PROG_NOT_CANON "param   N=8\ntensor x :f32[N,N]=ones\ny=mm( x,x )\nprint y\n"

static const double T = 60;

static void setup_files(void) {
  static int done;
  if (done) return;
  done = 1;
  free(tp_write("ok.weft", PROG_OK));
  free(tp_write("hazards.weft", PROG_HAZARDS));
  free(tp_write("bad.weft", PROG_BAD));
  free(tp_write("fails.weft", PROG_FAILS));
  free(tp_write("notcanon.weft", PROG_NOT_CANON));
  free(tp_write("gpu.weft", PROG_GPU));
}

/* ---- global ------------------------------------------------------------------------------ */

static void test_global(void **state) {
  (void)state;
  tp_out r;
  tp_expect(&r, 0, NULL, (const char *[]){"--version", NULL});
  assert_true(tp_has(r.out, "weft 0."));
  tp_out_fini(&r);
  tp_expect(&r, 0, NULL, (const char *[]){"--help", NULL});
  static const char *subs[] = {"run", "check",   "explain", "dot",
                               "fmt", "devices", "serve",   "submit"};
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) assert_true(tp_has(r.out, subs[i]));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){NULL});
  assert_true(tp_has(r.err, "Usage: weft"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"frobnicate", NULL});
  assert_true(tp_has(r.err, "unknown command 'frobnicate'"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"--frobnicate", NULL});
  tp_out_fini(&r);
  /* Every subcommand's help: exit 0, its usage line, on standard output. */
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    char usage[64];
    snprintf(usage, sizeof usage, "Usage: weft %s", subs[i]);
    tp_expect(&r, 0, NULL, (const char *[]){subs[i], "--help", NULL});
    assert_true(tp_has(r.out, usage));
    tp_out_fini(&r);
    tp_expect(&r, 0, NULL, (const char *[]){"help", subs[i], NULL});
    assert_true(tp_has(r.out, usage));
    tp_out_fini(&r);
    /* An unknown flag: exit 2, a message and a hint, nothing on standard output. */
    tp_expect(&r, 2, NULL, (const char *[]){subs[i], "--no-such-flag", NULL});
    assert_true(tp_has(r.err, "unknown option '--no-such-flag'"));
    assert_true(tp_has(r.err, "--help"));
    assert_int_equal(r.out_len, 0);
    tp_out_fini(&r);
  }
  tp_expect(&r, 2, NULL, (const char *[]){"help", "nothing", NULL});
  tp_out_fini(&r);
}

/* ---- run ---------------------------------------------------------------------------------- */

static void test_run(void **state) {
  (void)state;
  setup_files();
  tp_out r;
  tp_expect(&r, 0, NULL, (const char *[]){"run", "ok.weft", NULL});
  assert_true(tp_has(r.out, PROG_OK_OUT8));
  assert_int_equal(r.err_len, 0);
  tp_out_fini(&r);
  /* -D, in either position, and --define=. */
  tp_expect(&r, 0, NULL, (const char *[]){"run", "-D", "N=3", "ok.weft", NULL});
  assert_true(tp_has(r.out, PROG_OK_OUT3));
  tp_out_fini(&r);
  tp_expect(&r, 0, NULL, (const char *[]){"run", "ok.weft", "--define=N=3", NULL});
  assert_true(tp_has(r.out, PROG_OK_OUT3));
  tp_out_fini(&r);
  /* --device cpu works everywhere; a device that is not there is bad input. */
  tp_expect(&r, 0, NULL, (const char *[]){"run", "--device", "cpu", "ok.weft", NULL});
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"run", "--device", "tpu", "ok.weft", NULL});
  assert_true(tp_has(r.err, "--device"));
  tp_out_fini(&r);
  /* --repeat and --time: one timing line per run on standard error. */
  tp_expect(&r, 0, NULL, (const char *[]){"run", "--repeat", "4", "--time", "ok.weft", NULL});
  assert_true(tp_has(r.err, "run 4:"));
  assert_false(tp_has(r.err, "run 5:"));
  tp_out_fini(&r);
  /* Standard input. */
  tp_expect(&r, 0, PROG_OK, (const char *[]){"run", "-", NULL});
  assert_true(tp_has(r.out, PROG_OK_OUT8));
  tp_out_fini(&r);
}

static void test_run_json(void **state) {
  (void)state;
  setup_files();
  tp_out r;
  tp_expect(&r, 0, NULL, (const char *[]){"run", "--json", "--repeat", "3", "ok.weft", NULL});
  assert_true(tp_has(r.out, "{\"file\": \"ok.weft\", \"status\": \"ok\", \"exit_code\": 0"));
  assert_true(tp_has(r.out, "\"runs\": [{\"status\": \"OK\", \"wall_ms\": "));
  int runs = 0;
  for (const char *p = r.out; (p = strstr(p, "wall_ms")) != NULL; p++) runs++;
  assert_int_equal(runs, 3);
  assert_true(tp_has(r.out, "\"outputs\": {"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"run", "--json", "bad.weft", NULL});
  assert_true(tp_has(r.out, "\"status\": \"invalid\", \"exit_code\": 2"));
  assert_true(tp_has(r.out, "\"phase\": \"load\""));
  assert_true(tp_has(r.out, "{\"file\": \"bad.weft\", \"line\": 2, \"col\": 1"));
  assert_true(tp_has(r.out, "{\"file\": \"bad.weft\", \"line\": 4, \"col\": 11"));
  assert_true(tp_has(r.out, "\"outputs\": null"));
  assert_true(tp_has(r.err, "bad.weft" PROG_BAD_AT1)); /* and on stderr for a human */
  tp_out_fini(&r);
  tp_expect(&r, 1, NULL, (const char *[]){"run", "--json", "fails.weft", NULL});
  assert_true(tp_has(r.out, "\"status\": \"failed\", \"exit_code\": 1"));
  assert_true(tp_has(r.out, "\"phase\": \"outputs\""));
  assert_true(tp_has(r.out, "no-such-dir/y.bin"));
  assert_true(tp_has(r.out, "\"runs\": [{\"status\": \"OK\""));
  tp_out_fini(&r);
}

static void test_run_errors(void **state) {
  (void)state;
  setup_files();
  tp_out r;
  /* Every error of the file, each with file:line:col. */
  tp_expect(&r, 2, NULL, (const char *[]){"run", "bad.weft", NULL});
  assert_true(tp_has(r.err, "bad.weft" PROG_BAD_AT1));
  assert_true(tp_has(r.err, "bad.weft" PROG_BAD_AT2));
  assert_int_equal(r.out_len, 0);
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"run", "missing.weft", NULL});
  assert_true(tp_has(r.err, "missing.weft"));
  tp_out_fini(&r);
  tp_expect(&r, 1, NULL, (const char *[]){"run", "fails.weft", NULL});
  assert_true(tp_has(r.err, "cannot write the outputs"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"run", NULL});
  assert_true(tp_has(r.err, "missing FILE"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"run", "ok.weft", "bad.weft", NULL});
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"run", "--repeat", "0", "ok.weft", NULL});
  assert_true(tp_has(r.err, "--repeat"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"run", "--repeat", "x", "ok.weft", NULL});
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"run", "ok.weft", "--repeat", NULL});
  assert_true(tp_has(r.err, "needs a value"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"run", "-D", "N", "ok.weft", NULL});
  assert_true(tp_has(r.err, "NAME=VALUE"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"run", "--json=yes", "ok.weft", NULL});
  tp_out_fini(&r);
  /* A directory, not a file. */
  tp_expect(&r, 2, NULL, (const char *[]){"run", ".", NULL});
  tp_out_fini(&r);
}

/* ---- check, explain, dot ----------------------------------------------------------------- */

static void test_check(void **state) {
  (void)state;
  setup_files();
  tp_out r;
  tp_expect(&r, 0, NULL, (const char *[]){"check", "hazards.weft", NULL});
  assert_true(tp_has(r.out, "hazards.weft: ok"));
  assert_true(tp_has(r.out, "nodes    3"));
  assert_true(tp_has(r.out, "RAW 0, WAR 1, WAW 1"));
  assert_true(tp_has(r.out, "devices  cpu (3 nodes"));
  tp_out_fini(&r);
  tp_expect(&r, 0, NULL, (const char *[]){"check", "--json", "hazards.weft", NULL});
  assert_true(tp_has(r.out, "\"nodes\": 3"));
  assert_true(tp_has(r.out, "\"WAR\": 1, \"WAW\": 1"));
  assert_true(tp_has(r.out, "{\"device\": \"cpu\", \"nodes\": 3"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"check", "bad.weft", NULL});
  assert_true(tp_has(r.err, "bad.weft" PROG_BAD_AT1));
  tp_out_fini(&r);
  /* check never runs: a program whose run would fail is valid. */
  tp_expect(&r, 0, NULL, (const char *[]){"check", "fails.weft", NULL});
  tp_out_fini(&r);
}

static void test_explain(void **state) {
  (void)state;
  setup_files();
  tp_out r;
  tp_expect(&r, 0, NULL, (const char *[]){"explain", "hazards.weft", NULL});
  assert_true(tp_has(r.out, "3 nodes, 2 edges, 0 inserted copies"));
  assert_true(tp_has(r.out, "#0 -> #1  WAR      x"));
  assert_true(tp_has(r.out, "#1 -> #2  WAW      x"));
  assert_true(tp_has(r.out, "overwrites x, which #0 reads first"));
  assert_true(tp_has(r.out, "device cpu"));
  assert_true(tp_has(r.out, "lane   cpu workers"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"explain", "bad.weft", NULL});
  tp_out_fini(&r);
}

static void test_dot(void **state) {
  (void)state;
  setup_files();
  tp_out r;
  tp_expect(&r, 0, NULL, (const char *[]){"dot", "hazards.weft", NULL});
  assert_true(strncmp(r.out, "digraph \"hazards.weft\" {", 24) == 0);
  assert_true(tp_has(r.out, "subgraph \"cluster_cpu\""));
  assert_true(tp_has(r.out, "n0 -> n1 [label=\"WAR x\", style=dashed];"));
  assert_true(tp_has(r.out, "n1 -> n2 [label=\"WAW x\", style=dotted];"));
  assert_true(r.out_len > 2 && strcmp(r.out + r.out_len - 2, "}\n") == 0);
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"dot", "missing.weft", NULL});
  tp_out_fini(&r);
}

/* On a simulated machine with a GPU (weft's simulator, so this runs without one): the copy
 * weft inserts, what it serves, and the streams and copy engines the plan chose. */
static void test_explain_simulated(void **state) {
  (void)state;
  setup_files();
  tp_out r;
  tp_expect(&r, 0, NULL, (const char *[]){"explain", "--simulate", "h100", "gpu.weft", NULL});
  assert_true(tp_has(r.out, "3 nodes, 2 edges, 1 inserted copy"));
  assert_true(tp_has(r.out, "#0    y@cuda:0 = copy(y)  [inserted]  at gpu.weft:4:1"));
  assert_true(tp_has(r.out, "inserted by weft: node 1 'add' (z) on cuda:0"));
  assert_true(tp_has(r.out, "reads y, which lives on cpu"));
  assert_true(tp_has(r.out, "lane   cuda:0 copy h2d"));
  assert_true(tp_has(r.out, "lane   cuda:0 stream"));
  assert_true(tp_has(r.out, "lane   cuda:0 copy d2h"));
  assert_true(tp_has(r.out, "#0 -> #1  RAW      y@cuda:0"));
  tp_out_fini(&r);
  tp_expect(&r, 0, NULL, (const char *[]){"check", "--simulate", "h100", "gpu.weft", NULL});
  assert_true(tp_has(r.out, "nodes    3 (2 copies, 1 inserted by weft)"));
  assert_true(tp_has(r.out, "cuda:0 (3 nodes"));
  tp_out_fini(&r);
  tp_expect(&r, 0, NULL, (const char *[]){"dot", "--simulate", "h100", "gpu.weft", NULL});
  assert_true(tp_has(r.out, "subgraph \"cluster_cuda:0\""));
  assert_true(tp_has(r.out, "inserted copy to cuda:0\", style=dashed"));
  tp_out_fini(&r);
  /* --device cpu: no GPU, no copy to insert. */
  tp_expect(&r, 0, NULL,
         (const char *[]){"explain", "--simulate", "h100", "--device", "cpu", "gpu.weft", NULL});
  assert_true(tp_has(r.out, "0 inserted copies"));
  tp_out_fini(&r);
  tp_expect(&r, 0, NULL, (const char *[]){"devices", "--simulate", "h200x2", NULL});
  assert_true(tp_has(r.out, "cuda:1 "));
  assert_true(tp_has(r.out, "simulated"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"devices", "--simulate", "no-such-machine", NULL});
  assert_true(tp_has(r.err, "no-such-machine"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL,
         (const char *[]){"explain", "--simulate", "no-such-machine", "gpu.weft", NULL});
  tp_out_fini(&r);
}

/* ---- calibrate ----------------------------------------------------------------------------- */

static void test_calibrate(void **state) {
  (void)state;
  tp_out r;
  /* A simulated machine calibrates in virtual time: the method is checked without a GPU, and
   * the profile it writes must load as a profile again. */
  tp_expect(&r, 0, NULL,
            (const char *[]){"calibrate", "--simulate", "h100", "--quick", "-q", "-o", "cal.json", NULL});
  tp_out_fini(&r);
  char path[4200];
  snprintf(path, sizeof path, "%s/cal.json", tp_dir()); /* the commands run in tp_dir() */
  assert_int_equal(weft_sim_profile_check(path), WEFT_OK);
  tp_expect(&r, 0, NULL, (const char *[]){"devices", "--simulate", "cal.json", NULL});
  assert_true(tp_has(r.out, "cuda:0 "));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"calibrate", NULL});
  assert_true(tp_has(r.err, "missing -o FILE"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"calibrate", "-o", "x.json", "--simulate", "no-such", NULL});
  tp_out_fini(&r);
}

/* ---- fmt ---------------------------------------------------------------------------------- */

static void test_fmt(void **state) {
  (void)state;
  setup_files();
  tp_out r, again;
  tp_expect(&r, 0, NULL, (const char *[]){"fmt", "notcanon.weft", NULL});
  assert_true(r.out_len > 0);
  /* The canonical text is a fixed point. */
  free(tp_write("fmt1.weft", r.out));
  tp_expect(&again, 0, NULL, (const char *[]){"fmt", "fmt1.weft", NULL});
  assert_string_equal(again.out, r.out);
  tp_out_fini(&again);
  tp_expect(&again, 0, NULL, (const char *[]){"fmt", "--check", "fmt1.weft", NULL});
  assert_int_equal(again.out_len, 0);
  tp_out_fini(&again);
  tp_expect(&again, 1, NULL, (const char *[]){"fmt", "--check", "notcanon.weft", NULL});
  assert_true(tp_has(again.err, "not in canonical form"));
  tp_out_fini(&again);
  /* --write rewrites the file; then --check passes. */
  char *path = tp_write("w.weft", PROG_NOT_CANON);
  tp_expect(&again, 0, NULL, (const char *[]){"fmt", "--write", "w.weft", NULL});
  tp_out_fini(&again);
  FILE *f = fopen(path, "rb");
  char buf[4096] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  assert_string_equal(buf, r.out);
  free(path);
  tp_expect(&again, 0, NULL, (const char *[]){"fmt", "--check", "w.weft", NULL});
  tp_out_fini(&again);
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"fmt", "--check", "--write", "w.weft", NULL});
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"fmt", "bad.weft", NULL});
  assert_true(tp_has(r.err, "bad.weft" PROG_BAD_AT1));
  tp_out_fini(&r);
  tp_expect(&r, 2, PROG_OK, (const char *[]){"fmt", "--write", "-", NULL});
  tp_out_fini(&r);
  tp_expect(&r, 0, PROG_NOT_CANON, (const char *[]){"fmt", "-", NULL});
  assert_true(tp_has(r.out, "y = mm(x, x)"));
  tp_out_fini(&r);
}

/* ---- devices ------------------------------------------------------------------------------ */

static void test_devices(void **state) {
  (void)state;
  tp_out r;
  tp_expect(&r, 0, NULL, (const char *[]){"devices", NULL});
  assert_true(strncmp(r.out, "cpu ", 4) == 0);
  assert_true(tp_has(r.out, "cores"));
  tp_out_fini(&r);
  tp_expect(&r, 0, NULL, (const char *[]){"devices", "--json", NULL});
  assert_true(tp_has(r.out, "[\n  {\"device\": \"cpu\", \"name\": "));
  assert_true(tp_has(r.out, "\"memory_bytes\": "));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"devices", "extra", NULL});
  tp_out_fini(&r);
}

/* ---- examples ------------------------------------------------------------------------------ */

static void test_examples(void **state) {
  (void)state;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/examples", WEFT_SOURCE_DIR);
  DIR *d = opendir(dir);
  if (d == NULL) {
    snprintf(dir, sizeof dir, "examples"); /* a staged copy runs from its own directory */
    d = opendir(dir);
  }
  if (d == NULL) skip();
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".weft") != 0) continue;
    tp_out r;
    tp_run(&r, NULL, dir, T, (const char *[]){"run", e->d_name, NULL}); /* falls back to the CPU */
    if (r.code != 0)
      fail_msg("examples/%s: exit %d\n%s%s", e->d_name, r.code, r.out, r.err);
    tp_out_fini(&r);
    tp_run(&r, NULL, dir, T, (const char *[]){"check", e->d_name, NULL});
    assert_int_equal(r.code, 0);
    tp_out_fini(&r);
    /* Simulated on an H100 without computing: the run's statistics are the result. */
    tp_run(&r, NULL, dir, T, (const char *[]){"run", "--simulate", "h100", e->d_name, NULL});
    if (r.code != 0 || !tp_has(r.out, "makespan") || !tp_has(r.err, "outputs are not computed"))
      fail_msg("examples/%s --simulate h100: exit %d\n%s%s", e->d_name, r.code, r.out, r.err);
    tp_out_fini(&r);
    n++;
  }
  closedir(d);
  if (n == 0) skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_global),   cmocka_unit_test(test_run),
      cmocka_unit_test(test_run_json), cmocka_unit_test(test_run_errors),
      cmocka_unit_test(test_check),    cmocka_unit_test(test_explain),
      cmocka_unit_test(test_dot),      cmocka_unit_test(test_explain_simulated),
      cmocka_unit_test(test_fmt),      cmocka_unit_test(test_calibrate),
      cmocka_unit_test(test_devices),  cmocka_unit_test(test_examples),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
