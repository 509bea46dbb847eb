/* test_report_render.c — the SVG timeline of the overlap example, rendered by headless Chromium
 * (Debian's `chromium`) and decoded with libpng: the picture is not blank and shows both the
 * compute colour and the copy colour. Skips when no Chromium is installed. */
#define _POSIX_C_SOURCE 200809L
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "weft/report.h"

/* Counts pixels near an RGB colour (each channel within 24). */
static size_t near(const png_byte *px, size_t n, int r, int g, int b) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++, px += 3)
    if (abs(px[0] - r) < 24 && abs(px[1] - g) < 24 && abs(px[2] - b) < 24) k++;
  return k;
}

static void timeline_renders_in_chromium(void **state) {
  (void)state;
  const char *chromium = tu_find_chromium();
  if (chromium == NULL) {
    print_message("no chromium on PATH: skipped (scripts/setup.sh installs it)\n");
    skip();
  }
  weft_runtime *rt = tu_runtime_cpu(2);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  /* The overlap example: y[i] = x . x; h[i] = copy(y[i]). */
  weft_tensor *x = tu_matrix(g, "x", 200, 200, 42);
  for (int i = 0; i < 16; i++) {
    weft_tensor *y = NULL, *h = NULL;
    CHECK(weft_mm(g, x, x, &y));
    CHECK(weft_copy(g, y, weft_cpu(), &h));
  }
  /* The second run: a first run's timeline opens with the runtime's creation (its setup lane),
   * which under a sanitizer can take most of the picture and leave the nodes a few pixels. */
  CHECK(weft_graph_run(g));
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  CHECK(weft_run_wait(run));
  weft_run_stats *st;
  CHECK(weft_run_stats_create(run, &st));
  char dir[] = "/tmp/weft_render_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char svg[600], png[600], cmd[2400];
  snprintf(svg, sizeof svg, "%s/timeline.svg", dir);
  snprintf(png, sizeof png, "%s/timeline.png", dir);
  CHECK(weft_run_stats_save(st, WEFT_REPORT_SVG, svg));
  snprintf(cmd, sizeof cmd,
           "timeout 120 '%s' --headless --no-sandbox --disable-gpu --hide-scrollbars "
           "--user-data-dir='%s/profile' --window-size=1600,300 --screenshot='%s' 'file://%s' "
           "> '%s/chromium.log' 2>&1",
           chromium, dir, png, svg, dir);
  int rc = system(cmd);
  if (rc != 0) {
    snprintf(cmd, sizeof cmd, "tail -20 '%s/chromium.log'", dir);
    if (system(cmd) != 0) print_message("(no chromium log)\n");
    fail_msg("chromium exited with %d", rc);
  }
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  assert_true(png_image_begin_read_from_file(&img, png));
  img.format = PNG_FORMAT_RGB;
  size_t n = (size_t)img.width * img.height;
  png_byte *px = malloc(PNG_IMAGE_SIZE(img));
  assert_non_null(px);
  assert_true(png_image_finish_read(&img, NULL, px, 0, NULL));
  assert_int_equal(img.width, 1600);
  size_t white = near(px, n, 255, 255, 255);
  size_t compute = near(px, n, 0x4e, 0x79, 0xa7);
  size_t copy = near(px, n, 0xf2, 0x8e, 0x2b);
  print_message("%zu pixels: %zu white, %zu compute-blue, %zu copy-orange\n", n, white, compute, copy);
  assert_true(white < n - n / 50); /* not blank: more than 2% of the picture is drawn */
  assert_true(compute > 1000);
  assert_true(copy > 0);
  free(px);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
  weft_run_stats_destroy(st);
  weft_run_destroy(run);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(timeline_renders_in_chromium)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
