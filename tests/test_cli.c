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
/* A program of two ranks: b on rank 1 comes to rank 0 as a message. */
#define PROG_RANKS                                                                        \
  "device far = rank(1, cpu)\ntensor a: f64[512, 512] on cpu = ones\n"                      \
  "tensor b: f64[512, 512] on far = full(2)\nbb = mm(b, b)\ns = add(a, bb)\nn = norm(s)\nprint n\n"
/* A product on rank 1's GPU, its result copied to rank 0's CPU. */
#define PROG_RANKS_GPU                                                                    \
  "device g1 = rank(1, cuda:0)\ntensor a: f32[256, 256] on g1 = ones\nb = mm(a, a)\nc = copy(b, cpu)\nprint c\n"
/* A program that is not in canonical form (spacing). */
#define PROG_NOT_CANON "param   N=8\ntensor x :f32[N,N]=ones\ny=mm( x,x )\nprint y\n"

static const double T = 60;

/* The group's setup: the programs above, as files in tp_dir(), where the commands run. */
static int write_programs(void **state) {
  (void)state;
  free(tp_write("ok.weft", PROG_OK));
  free(tp_write("hazards.weft", PROG_HAZARDS));
  free(tp_write("bad.weft", PROG_BAD));
  free(tp_write("fails.weft", PROG_FAILS));
  free(tp_write("notcanon.weft", PROG_NOT_CANON));
  free(tp_write("gpu.weft", PROG_GPU));
  free(tp_write("ranks.weft", PROG_RANKS));
  free(tp_write("ranks_gpu.weft", PROG_RANKS_GPU));
  return 0;
}

/* ---- global ------------------------------------------------------------------------------ */

static void test_global(void **state) {
  (void)state;
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("--version"));
  assert_true(tp_has(r->out, "weft 0."));
  r = tp_cmd(0, NULL, TP_ARGS("--help"));
  static const char *subs[] = {"run", "check",   "explain", "dot",
                               "fmt", "devices", "serve",   "submit"};
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) assert_true(tp_has(r->out, subs[i]));
  r = tp_cmd(2, NULL, (const char *[]){NULL}); /* no arguments at all */
  assert_true(tp_has(r->err, "Usage: weft"));
  r = tp_cmd(2, NULL, TP_ARGS("frobnicate"));
  assert_true(tp_has(r->err, "unknown command 'frobnicate'"));
  tp_cmd(2, NULL, TP_ARGS("--frobnicate"));
  /* Every subcommand's help: exit 0, its usage line, on standard output. */
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    char usage[64];
    snprintf(usage, sizeof usage, "Usage: weft %s", subs[i]);
    r = tp_cmd(0, NULL, TP_ARGS(subs[i], "--help"));
    assert_true(tp_has(r->out, usage));
    r = tp_cmd(0, NULL, TP_ARGS("help", subs[i]));
    assert_true(tp_has(r->out, usage));
    /* An unknown flag: exit 2, a message and a hint, nothing on standard output. */
    r = tp_cmd(2, NULL, TP_ARGS(subs[i], "--no-such-flag"));
    assert_true(tp_has(r->err, "unknown option '--no-such-flag'"));
    assert_true(tp_has(r->err, "--help"));
    assert_int_equal(r->out_len, 0);
  }
  tp_cmd(2, NULL, TP_ARGS("help", "nothing"));
}

/* ---- run ---------------------------------------------------------------------------------- */

static void test_run(void **state) {
  (void)state;
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("run", "ok.weft"));
  assert_true(tp_has(r->out, PROG_OK_OUT8));
  assert_int_equal(r->err_len, 0);
  /* -D, in either position, and --define=. */
  r = tp_cmd(0, NULL, TP_ARGS("run", "-D", "N=3", "ok.weft"));
  assert_true(tp_has(r->out, PROG_OK_OUT3));
  r = tp_cmd(0, NULL, TP_ARGS("run", "ok.weft", "--define=N=3"));
  assert_true(tp_has(r->out, PROG_OK_OUT3));
  /* --device cpu works everywhere; a device that is not there is bad input. */
  tp_cmd(0, NULL, TP_ARGS("run", "--device", "cpu", "ok.weft"));
  r = tp_cmd(2, NULL, TP_ARGS("run", "--device", "tpu", "ok.weft"));
  assert_true(tp_has(r->err, "--device"));
  /* --repeat and --time: one timing line per run on standard error. */
  r = tp_cmd(0, NULL, TP_ARGS("run", "--repeat", "4", "--time", "ok.weft"));
  assert_true(tp_has(r->err, "run 4:"));
  assert_false(tp_has(r->err, "run 5:"));
  /* Standard input. */
  r = tp_cmd(0, PROG_OK, TP_ARGS("run", "-"));
  assert_true(tp_has(r->out, PROG_OK_OUT8));
}

static void test_run_json(void **state) {
  (void)state;
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("run", "--json", "--repeat", "3", "ok.weft"));
  assert_true(tp_has(r->out, "{\"file\": \"ok.weft\", \"status\": \"ok\", \"exit_code\": 0"));
  assert_true(tp_has(r->out, "\"runs\": [{\"status\": \"OK\", \"wall_ms\": "));
  int runs = 0;
  for (const char *p = r->out; (p = strstr(p, "wall_ms")) != NULL; p++) runs++;
  assert_int_equal(runs, 3);
  assert_true(tp_has(r->out, "\"outputs\": {"));
  r = tp_cmd(2, NULL, TP_ARGS("run", "--json", "bad.weft"));
  assert_true(tp_has(r->out, "\"status\": \"invalid\", \"exit_code\": 2"));
  assert_true(tp_has(r->out, "\"phase\": \"load\""));
  assert_true(tp_has(r->out, "{\"file\": \"bad.weft\", \"line\": 2, \"col\": 1"));
  assert_true(tp_has(r->out, "{\"file\": \"bad.weft\", \"line\": 4, \"col\": 11"));
  assert_true(tp_has(r->out, "\"outputs\": null"));
  assert_true(tp_has(r->err, "bad.weft" PROG_BAD_AT1)); /* and on stderr for a human */
  r = tp_cmd(1, NULL, TP_ARGS("run", "--json", "fails.weft"));
  assert_true(tp_has(r->out, "\"status\": \"failed\", \"exit_code\": 1"));
  assert_true(tp_has(r->out, "\"phase\": \"outputs\""));
  assert_true(tp_has(r->out, "no-such-dir/y.bin"));
  assert_true(tp_has(r->out, "\"runs\": [{\"status\": \"OK\""));
}

static void test_run_errors(void **state) {
  (void)state;
  /* Every error of the file, each with file:line:col. */
  const tp_out *r = tp_cmd(2, NULL, TP_ARGS("run", "bad.weft"));
  assert_true(tp_has(r->err, "bad.weft" PROG_BAD_AT1));
  assert_true(tp_has(r->err, "bad.weft" PROG_BAD_AT2));
  assert_int_equal(r->out_len, 0);
  r = tp_cmd(2, NULL, TP_ARGS("run", "missing.weft"));
  assert_true(tp_has(r->err, "missing.weft"));
  r = tp_cmd(1, NULL, TP_ARGS("run", "fails.weft"));
  assert_true(tp_has(r->err, "cannot write the outputs"));
  r = tp_cmd(2, NULL, TP_ARGS("run"));
  assert_true(tp_has(r->err, "missing FILE"));
  tp_cmd(2, NULL, TP_ARGS("run", "ok.weft", "bad.weft"));
  r = tp_cmd(2, NULL, TP_ARGS("run", "--repeat", "0", "ok.weft"));
  assert_true(tp_has(r->err, "--repeat"));
  tp_cmd(2, NULL, TP_ARGS("run", "--repeat", "x", "ok.weft"));
  r = tp_cmd(2, NULL, TP_ARGS("run", "ok.weft", "--repeat"));
  assert_true(tp_has(r->err, "needs a value"));
  r = tp_cmd(2, NULL, TP_ARGS("run", "-D", "N", "ok.weft"));
  assert_true(tp_has(r->err, "NAME=VALUE"));
  tp_cmd(2, NULL, TP_ARGS("run", "--json=yes", "ok.weft"));
  /* A directory, not a file. */
  tp_cmd(2, NULL, TP_ARGS("run", "."));
}

/* ---- check, explain, dot ----------------------------------------------------------------- */

static void test_check(void **state) {
  (void)state;
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("check", "hazards.weft"));
  assert_true(tp_has(r->out, "hazards.weft: ok"));
  assert_true(tp_has(r->out, "nodes    3"));
  assert_true(tp_has(r->out, "RAW 0, WAR 1, WAW 1"));
  assert_true(tp_has(r->out, "devices  cpu (3 nodes"));
  r = tp_cmd(0, NULL, TP_ARGS("check", "--json", "hazards.weft"));
  assert_true(tp_has(r->out, "\"nodes\": 3"));
  assert_true(tp_has(r->out, "\"WAR\": 1, \"WAW\": 1"));
  assert_true(tp_has(r->out, "{\"device\": \"cpu\", \"nodes\": 3"));
  r = tp_cmd(2, NULL, TP_ARGS("check", "bad.weft"));
  assert_true(tp_has(r->err, "bad.weft" PROG_BAD_AT1));
  /* check never runs: a program whose run would fail is valid. */
  tp_cmd(0, NULL, TP_ARGS("check", "fails.weft"));
}

static void test_explain(void **state) {
  (void)state;
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("explain", "hazards.weft"));
  assert_true(tp_has(r->out, "3 nodes, 2 edges, 0 inserted copies"));
  assert_true(tp_has(r->out, "#0 -> #1  WAR      x"));
  assert_true(tp_has(r->out, "#1 -> #2  WAW      x"));
  assert_true(tp_has(r->out, "overwrites x, which #0 reads first"));
  assert_true(tp_has(r->out, "device cpu"));
  assert_true(tp_has(r->out, "lane   cpu workers"));
  tp_cmd(2, NULL, TP_ARGS("explain", "bad.weft"));
}

static void test_dot(void **state) {
  (void)state;
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("dot", "hazards.weft"));
  assert_true(strncmp(r->out, "digraph \"hazards.weft\" {", 24) == 0);
  assert_true(tp_has(r->out, "subgraph \"cluster_cpu\""));
  assert_true(tp_has(r->out, "n0 -> n1 [label=\"WAR x\", style=dashed];"));
  assert_true(tp_has(r->out, "n1 -> n2 [label=\"WAW x\", style=dotted];"));
  assert_true(r->out_len > 2 && strcmp(r->out + r->out_len - 2, "}\n") == 0);
  tp_cmd(2, NULL, TP_ARGS("dot", "missing.weft"));
}

/* On a simulated machine with a GPU (weft's simulator, so this runs without one): the copy
 * weft inserts, what it serves, and the streams and copy engines the plan chose. */
static void test_explain_simulated(void **state) {
  (void)state;
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("explain", "--simulate", "h100", "gpu.weft"));
  assert_true(tp_has(r->out, "3 nodes, 2 edges, 1 inserted copy"));
  assert_true(tp_has(r->out, "#0    y@cuda:0 = copy(y)  [inserted]  at gpu.weft:4:1"));
  assert_true(tp_has(r->out, "inserted by weft: node 1 'add' (z) on cuda:0"));
  assert_true(tp_has(r->out, "reads y, which lives on cpu"));
  assert_true(tp_has(r->out, "lane   cuda:0 copy h2d"));
  assert_true(tp_has(r->out, "lane   cuda:0 stream"));
  assert_true(tp_has(r->out, "lane   cuda:0 copy d2h"));
  assert_true(tp_has(r->out, "#0 -> #1  RAW      y@cuda:0"));
  r = tp_cmd(0, NULL, TP_ARGS("check", "--simulate", "h100", "gpu.weft"));
  assert_true(tp_has(r->out, "nodes    3 (2 copies, 1 inserted by weft)"));
  assert_true(tp_has(r->out, "cuda:0 (3 nodes"));
  r = tp_cmd(0, NULL, TP_ARGS("dot", "--simulate", "h100", "gpu.weft"));
  assert_true(tp_has(r->out, "subgraph \"cluster_cuda:0\""));
  assert_true(tp_has(r->out, "inserted copy to cuda:0\", style=dashed"));
  /* --device cpu: no GPU, no copy to insert. */
  r = tp_cmd(0, NULL, TP_ARGS("explain", "--simulate", "h100", "--device", "cpu", "gpu.weft"));
  assert_true(tp_has(r->out, "0 inserted copies"));
  r = tp_cmd(0, NULL, TP_ARGS("devices", "--simulate", "h200x2"));
  assert_true(tp_has(r->out, "cuda:1 "));
  assert_true(tp_has(r->out, "simulated"));
  r = tp_cmd(2, NULL, TP_ARGS("devices", "--simulate", "no-such-machine"));
  assert_true(tp_has(r->err, "no-such-machine"));
  tp_cmd(2, NULL, TP_ARGS("explain", "--simulate", "no-such-machine", "gpu.weft"));
}

/* A program of two ranks on a simulated job of two (--ranks): the message between them counted,
 * each rank's lanes named, and the result, computed, what one process gives; bad --ranks. */
static void test_run_simulated_ranks(void **state) {
  (void)state;
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("run", "--simulate", "h200x2", "--ranks", "2", "--stats", "ranks.weft"));
  assert_true(tp_has(r->out, "2.1 MB to and from other ranks")); /* bb: 512^2 f64 */
  assert_true(tp_has(r->out, "rank 1: 2.1 MB sent, 0.0 MB received"));
  tp_cmd(0, NULL, TP_ARGS("run", "--simulate", "h200x2", "--ranks", "2", "--ranks-per-host", "1", "ranks.weft"));
  /* Rank 1's GPU, as explain names it. */
  r = tp_cmd(0, NULL, TP_ARGS("explain", "--simulate", "h200x2", "--ranks", "2", "ranks_gpu.weft"));
  assert_true(tp_has(r->out, "lane   rank 1 cuda:0 stream 0"));
  assert_true(tp_has(r->out, "lane   rank 1 cuda:0 copy d2h"));
  /* The tiled Cholesky on auto, computed over 4 simulated ranks' GPUs on one host (copies between
   * their GPUs directly) and over 2 hosts of 2 ranks: the residual one CPU process prints. */
  char chol[4200];
  snprintf(chol, sizeof chol, "%s/examples/cholesky.weft", WEFT_SOURCE_DIR);
  if (access(chol, R_OK) == 0) {
    char want[128] = "";
    r = tp_cmd(0, NULL, TP_ARGS("run", "-D", "N=1024", "-D", "B=128", chol));
    const char *at = strstr(r->out, "residual = ");
    assert_non_null(at);
    snprintf(want, sizeof want, "%.*s", (int)strcspn(at, "\n"), at);
    setenv("WEFT_SIM_COMPUTE", "1", 1);
    r = tp_cmd(0, NULL, TP_ARGS("run", "--simulate", "h200x4", "--ranks", "4", "--stats", "-D", "N=1024", "-D", "B=128", chol));
    assert_true(tp_has(r->out, want));
    assert_false(tp_has(r->out, " 0.0 MB to and from other ranks")); /* it did spread */
    r = tp_cmd(0, NULL, TP_ARGS("run", "--simulate", "h200x4", "--ranks", "4", "--ranks-per-host", "2", "-D", "N=1024",
                                "-D", "B=128", chol));
    assert_true(tp_has(r->out, want));
    unsetenv("WEFT_SIM_COMPUTE");
  }
  r = tp_cmd(2, NULL, TP_ARGS("run", "ranks.weft")); /* one process: rank 1 does not exist */
  assert_true(tp_has(r->err, "rank"));
  r = tp_cmd(2, NULL, TP_ARGS("run", "--ranks", "2", "ranks.weft"));
  assert_true(tp_has(r->err, "need --simulate"));
  r = tp_cmd(2, NULL, TP_ARGS("run", "--simulate", "h200x2", "--ranks-per-host", "2", "ranks.weft"));
  assert_true(tp_has(r->err, "--ranks-per-host needs --ranks"));
  r = tp_cmd(2, NULL, TP_ARGS("run", "--simulate", "h200x2", "--ranks", "0", "ranks.weft"));
  assert_true(tp_has(r->err, "--ranks expects an integer"));
}

/* ---- calibrate ----------------------------------------------------------------------------- */

static void test_calibrate(void **state) {
  (void)state;
  /* A simulated machine calibrates in virtual time: the method is checked without a GPU, and
   * the profile it writes must load as a profile again. */
  tp_cmd(0, NULL, TP_ARGS("calibrate", "--simulate", "h100", "--quick", "-q", "-o", "cal.json"));
  char path[4200];
  snprintf(path, sizeof path, "%s/cal.json", tp_dir()); /* the commands run in tp_dir() */
  assert_int_equal(weft_sim_profile_check(path), WEFT_OK);
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("devices", "--simulate", "cal.json"));
  assert_true(tp_has(r->out, "cuda:0 "));
  r = tp_cmd(2, NULL, TP_ARGS("calibrate"));
  assert_true(tp_has(r->err, "missing -o FILE"));
  tp_cmd(2, NULL, TP_ARGS("calibrate", "-o", "x.json", "--simulate", "no-such"));
  /* A profile that could not be written is said before the minute of measuring, once. */
  r = tp_cmd(2, NULL, TP_ARGS("calibrate", "--simulate", "h100", "--quick", "-q", "-o", "no-such-dir/cal.json"));
  assert_true(tp_has(r->err, "calibrate: cannot write the profile no-such-dir/cal.json"));
  assert_false(tp_has(r->err, "calibrate: calibrate:"));
}

/* ---- fmt ---------------------------------------------------------------------------------- */

static void test_fmt(void **state) {
  (void)state;
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("fmt", "notcanon.weft"));
  assert_true(r->out_len > 0);
  char *canon = strdup(r->out);
  assert_non_null(canon);
  /* The canonical text is a fixed point. */
  free(tp_write("fmt1.weft", canon));
  r = tp_cmd(0, NULL, TP_ARGS("fmt", "fmt1.weft"));
  assert_string_equal(r->out, canon);
  r = tp_cmd(0, NULL, TP_ARGS("fmt", "--check", "fmt1.weft"));
  assert_int_equal(r->out_len, 0);
  r = tp_cmd(1, NULL, TP_ARGS("fmt", "--check", "notcanon.weft"));
  assert_true(tp_has(r->err, "not in canonical form"));
  /* --write rewrites the file; then --check passes. */
  char *path = tp_write("w.weft", PROG_NOT_CANON);
  tp_cmd(0, NULL, TP_ARGS("fmt", "--write", "w.weft"));
  char *written = tu_read_file(path, NULL);
  assert_string_equal(written, canon);
  free(written);
  free(path);
  free(canon);
  tp_cmd(0, NULL, TP_ARGS("fmt", "--check", "w.weft"));
  tp_cmd(2, NULL, TP_ARGS("fmt", "--check", "--write", "w.weft"));
  r = tp_cmd(2, NULL, TP_ARGS("fmt", "bad.weft"));
  assert_true(tp_has(r->err, "bad.weft" PROG_BAD_AT1));
  tp_cmd(2, PROG_OK, TP_ARGS("fmt", "--write", "-"));
  r = tp_cmd(0, PROG_NOT_CANON, TP_ARGS("fmt", "-"));
  assert_true(tp_has(r->out, "y = mm(x, x)"));
}

/* ---- devices ------------------------------------------------------------------------------ */

static void test_devices(void **state) {
  (void)state;
  const tp_out *r = tp_cmd(0, NULL, TP_ARGS("devices"));
  assert_true(strncmp(r->out, "cpu ", 4) == 0);
  assert_true(tp_has(r->out, "cores"));
  /* The BLAS weft links: a serial one and no warning, or the threaded one it fell back to. */
  assert_true(tp_has(r->out, "\n         BLAS "));
  assert_true(tp_has(r->out, "\n         topology: ")); /* hwloc's counts */
  assert_true(tp_has(r->out, " NUMA node"));
  assert_true(tp_has(r->out, WEFT_TEST_BLAS_SERIAL ? ", sequential (/" : ", pthreads, "));
  if (WEFT_TEST_BLAS_SERIAL) assert_false(tp_has(r->out, "warning"));
  r = tp_cmd(0, NULL, TP_ARGS("devices", "--json"));
  assert_true(tp_has(r->out, "[\n  {\"device\": \"cpu\", \"name\": "));
  assert_true(tp_has(r->out, "\"memory_bytes\": "));
  assert_true(tp_has(r->out, "\"blas\": {\"library\": \"/"));
  assert_true(tp_has(r->out, "\"topology\": {\"packages\": "));
  if (WEFT_TEST_BLAS_SERIAL)
    assert_true(tp_has(r->out, "\"threading\": \"sequential\", \"threads\": 1, \"stopped\": false, "
                               "\"competes\": false, \"thread_safe\": true, \"message\": null}"));
  tp_cmd(2, NULL, TP_ARGS("devices", "extra"));
  /* A threaded BLAS brought by the process (OpenBLAS's pthreads build, preloaded) is named,
   * with the threads it started at load, which weft stopped (it holds the library to one thread
   * a call): nothing competes, so no warning. Where it is installed and there are two cores. */
  const char *lib = WEFT_TEST_PTHREAD_BLAS;
  if (lib[0] == '\0' || access(lib, R_OK) != 0 || sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
  char *asan = getenv("ASAN_OPTIONS") ? strdup(getenv("ASAN_OPTIONS")) : NULL;
  char *nthreads = getenv("OPENBLAS_NUM_THREADS") ? strdup(getenv("OPENBLAS_NUM_THREADS")) : NULL;
  setenv("LD_PRELOAD", lib, 1);
  setenv("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1);
  unsetenv("OPENBLAS_NUM_THREADS");
  r = tp_cmd(0, NULL, TP_ARGS("devices"));
  unsetenv("LD_PRELOAD");
  if (asan != NULL)
    setenv("ASAN_OPTIONS", asan, 1);
  else
    unsetenv("ASAN_OPTIONS");
  if (nthreads != NULL) setenv("OPENBLAS_NUM_THREADS", nthreads, 1);
  free(asan);
  free(nthreads);
  assert_true(tp_has(r->out, ", pthreads, held to one thread a call (the "));
  assert_true(tp_has(r->out, " threads it started at load are stopped) (/"));
  assert_true(tp_has(r->out, "openblas-pthread/libopenblas.so.0)\n"));
  assert_false(tp_has(r->out, "warning"));
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
      cmocka_unit_test(test_run_simulated_ranks),
      cmocka_unit_test(test_fmt),      cmocka_unit_test(test_calibrate),
      cmocka_unit_test(test_devices),  cmocka_unit_test(test_examples),
  };
  return cmocka_run_group_tests(tests, write_programs, NULL);
}
