/* weft_calibrate.c — measures this machine's profile for the simulator and writes it
 * (the calibration tool's weft_calibrate, src/tools/calibrate, does the work; `weft calibrate`
 * calls the same function).
 *
 * Usage: weft_calibrate [--quick] [--name NAME] [--simulate PROFILE] --out FILE
 *   --simulate   calibrate a simulated machine instead (gives its profile back: a check) */
#include <stdio.h>
#include <string.h>

#include "tools/calibrate/calibrate.h"
#include "weft/weft.h"

int main(int argc, char **argv) {
  weft_calibrate_options co;
  weft_calibrate_options_init(&co);
  co.log = stderr;
  const char *out = NULL, *simulate = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--quick") == 0) {
      co.quick = 1;
    } else if (v != NULL && strcmp(argv[i], "--name") == 0) {
      co.name = v, i++;
    } else if (v != NULL && strcmp(argv[i], "--simulate") == 0) {
      simulate = v, i++;
    } else if (v != NULL && strcmp(argv[i], "--out") == 0) {
      out = v, i++;
    } else {
      out = NULL;
      break;
    }
  }
  if (out == NULL) {
    fprintf(stderr, "usage: weft_calibrate [--quick] [--name NAME] [--simulate PROFILE] --out FILE\n");
    return 2;
  }
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.flags = WEFT_RUNTIME_QUIET;
  o.simulate = simulate;
  weft_runtime *rt;
  int rc = weft_runtime_create(&o, &rt);
  if (rc == WEFT_OK) {
    rc = weft_calibrate(rt, &co, out);
    weft_runtime_destroy(rt);
  }
  if (rc != WEFT_OK) {
    fprintf(stderr, "weft_calibrate: %s\n", weft_calibrate_last_error());
    return 1;
  }
  return 0;
}
