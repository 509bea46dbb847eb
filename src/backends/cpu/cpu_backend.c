/* cpu_backend.c — the CPU backend: one device, "cpu", whose nodes run synchronously on the
 * worker that dispatches them. Host storage is managed by src/sched/storage.c, so the
 * storage entries of this table are unused. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"


static int cpu_device_count(const weft__backend *b) {
  (void)b;
  return 1;
}

static int cpu_device_info(const weft__backend *b, int index, weft_device_info *out) {
  (void)b;
  (void)index;
  snprintf(out->name, sizeof out->name, "cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f != NULL) {
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
      if (strncmp(line, "model name", 10) == 0) {
        char *colon = strchr(line, ':');
        if (colon != NULL) {
          colon++;
          while (*colon == ' ') colon++;
          colon[strcspn(colon, "\n")] = '\0';
          snprintf(out->name, sizeof out->name, "%s", colon);
        }
        break;
      }
    }
    fclose(f);
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  out->memory_bytes = (pages > 0 && page > 0) ? (size_t)pages * (size_t)page : 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  out->multiprocessors = cores > 0 ? (int)cores : 1;
  return WEFT_OK;
}

static int cpu_launch(weft__backend *b, weft_kernel_ctx *ctx) {
  (void)b;
  return weft__cpu_exec(ctx);
}

const weft__backend_vtable weft__cpu_backend = {
    .version = WEFT__BACKEND_VERSION,
    .name = "cpu",
    .device_kind = WEFT_DEVICE_CPU,
    .flags = 0,
    .device_count = cpu_device_count,
    .device_info = cpu_device_info,
    .launch = cpu_launch,
};
