/* cmd_devices.c — `weft devices`: every device the runtime sees (the CPU, then each GPU, or
 * the virtual devices of --simulate), with its properties, as text or JSON. The real CPU's
 * entry names the BLAS library loaded for its matrix products, and warns when that library's
 * own threads compete with weft's workers, it is not thread-safe or it has a known fault
 * (weft_runtime_blas_info). */
#include <string.h>

#include "cli/cli.h"

static const char devices_help[] =
    "Usage: weft devices [OPTIONS]\n"
    "List the devices weft sees, with their properties.\n"
    "\n"
    "Options:\n"
    "      --json               print a JSON array\n"
    "      --simulate PROFILE   list the virtual devices of a machine profile instead\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Exit status: 0 success, 1 the runtime could not start, 2 usage.\n";

static double gib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0 * 1024.0); }

/* "         BLAS OpenBLAS 0.3.21, pthreads, 2 threads (FILE)", and the warning if there is one. */
static void blas_lines(weft__strbuf *b, const weft_blas_info *bi) {
  weft__strbuf_printf(b, "         BLAS %s, %s", bi->name, weft_blas_threading_name(bi->threading));
  if (bi->stopped)
    weft__strbuf_printf(b, ", held to one thread a call (the %d threads it started at load are stopped)",
                        bi->threads);
  else if (bi->threading != WEFT_BLAS_SEQUENTIAL && bi->threads > 0)
    weft__strbuf_printf(b, ", %d thread%s", bi->threads, bi->threads == 1 ? "" : "s");
  weft__strbuf_printf(b, " (%s)\n", bi->library[0] ? bi->library : "file unknown");
  if (bi->message[0]) weft__strbuf_printf(b, "         warning: %s\n", bi->message);
}

/* The devices of rt, as `weft devices` prints them (json: a JSON array). Appends to b;
 * returns CLI_EXIT_OK or the exit code of a device that could not be described (the others
 * are still listed). */
int cli_devices_write(weft_runtime *rt, int json, weft__strbuf *b) {
  int ngpu = weft_device_count(rt, WEFT_DEVICE_CUDA);
  weft_blas_info blas;
  if (weft_runtime_blas_info(rt, &blas) != WEFT_OK) return cli_error(CLI_EXIT_FAILED, "%s", weft_last_error());
  weft_cpu_topology topo;
  if (weft_runtime_cpu_topology(rt, &topo) != WEFT_OK) memset(&topo, 0, sizeof topo);
  if (json) weft__strbuf_puts(b, "[");
  int code = CLI_EXIT_OK;
  for (int i = -1; i < ngpu; i++) {
    weft_device d = i < 0 ? weft_cpu() : weft_cuda(i);
    weft_device_info info;
    char name[32];
    weft_device_str(d, name, sizeof name);
    if (weft_device_info_get(rt, d, &info) != WEFT_OK) {
      code = cli_error(CLI_EXIT_FAILED, "%s: %s", name, weft_last_error());
      continue;
    }
    /* Peers this device reads directly. */
    weft__strbuf peers;
    weft__strbuf_init(&peers);
    for (int k = 0; k < ngpu && d.kind == WEFT_DEVICE_CUDA; k++) {
      if (k == i || !weft_device_can_access_peer(rt, d, weft_cuda(k))) continue;
      if (json)
        weft__strbuf_printf(&peers, "%s\"cuda:%d\"", peers.len ? ", " : "", k);
      else
        weft__strbuf_printf(&peers, "%scuda:%d", peers.len ? " " : "", k);
    }
    if (json) {
      weft__strbuf_printf(b, "%s\n  {\"device\": \"%s\", \"name\": ", i < 0 ? "" : ",", name);
      weft__json_put_str(b, info.name);
      weft__strbuf_printf(b,
                          ", \"memory_bytes\": %zu, \"copy_engines\": %d, \"compute_capability\": "
                          "\"%d.%d\", \"multiprocessors\": %d, \"ordinal\": %d, \"simulated\": %s, \"peers\": [%s]",
                          info.memory_bytes, info.copy_engines, info.compute_major, info.compute_minor,
                          info.multiprocessors, info.ordinal, info.simulated ? "true" : "false",
                          peers.data != NULL ? peers.data : "");
      weft_memory_usage use;
      if (weft_device_memory_usage(rt, d, &use) == WEFT_OK)
        weft__strbuf_printf(b, ", \"memory_in_use_bytes\": %zu, \"memory_peak_bytes\": %zu, \"memory_reserved_bytes\": %zu",
                            use.in_use, use.peak, use.reserved);
      if (d.kind == WEFT_DEVICE_CPU && !info.simulated) {
        weft__strbuf_puts(b, ", \"blas\": ");
        weft__json_put_blas(b, &blas);
        weft__strbuf_printf(b,
                            ", \"topology\": {\"packages\": %d, \"numa_nodes\": %d, \"cores\": %d, "
                            "\"hardware_threads\": %d, \"l1d_bytes\": %zu, \"l2_bytes\": %zu, \"l3_bytes\": %zu, "
                            "\"workers_bound\": %s}",
                            topo.packages, topo.numa_nodes, topo.cores, topo.pus, topo.l1d_bytes, topo.l2_bytes,
                            topo.l3_bytes, topo.bound ? "true" : "false");
      }
      weft__strbuf_puts(b, "}");
    } else if (d.kind == WEFT_DEVICE_CPU) {
      weft__strbuf_printf(b, "%-8s %s\n         %d cores, %.1f GiB memory%s\n", name, info.name,
                          info.multiprocessors, gib(info.memory_bytes),
                          info.simulated ? ", simulated" : "");
      if (!info.simulated) {
        weft__strbuf_printf(b,
                            "         topology: %d package%s, %d NUMA node%s, %d cores, %d hardware threads; "
                            "caches L1d %zu KiB, L2 %zu KiB, L3 %.1f MiB; %d workers %s (WEFT_BIND)\n",
                            topo.packages, topo.packages == 1 ? "" : "s", topo.numa_nodes,
                            topo.numa_nodes == 1 ? "" : "s", topo.cores, topo.pus, topo.l1d_bytes >> 10,
                            topo.l2_bytes >> 10, (double)topo.l3_bytes / (1 << 20), topo.workers,
                            topo.bound ? "bound to cores" : "not bound");
        blas_lines(b, &blas);
      }
    } else {
      weft__strbuf_printf(b,
                          "%-8s %s\n         GPU %d of this process, compute %d.%d, %d SMs, %.1f GiB memory, %d copy "
                          "engine%s%s%s%s\n",
                          name, info.name, info.ordinal, info.compute_major, info.compute_minor,
                          info.multiprocessors, gib(info.memory_bytes), info.copy_engines,
                          info.copy_engines == 1 ? "" : "s", peers.len ? ", peer access to " : "",
                          peers.len ? peers.data : "", info.simulated ? ", simulated" : "");
    }
    weft__strbuf_fini(&peers);
  }
  if (json) weft__strbuf_puts(b, "\n]\n");
  if (ngpu == 0 && !json) weft__strbuf_puts(b, "(no GPU found: weft runs everything on the CPU)\n");
  return code;
}

int cli_cmd_devices(int argc, char **argv) {
  enum { OPT_JSON = CLI_OPT_LOCAL, OPT_SIMULATE };
  static const struct option longopts[] = {{"json", no_argument, NULL, OPT_JSON},
                                           {"simulate", required_argument, NULL, OPT_SIMULATE},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int json = 0, c;
  const char *simulate = NULL;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
      case OPT_JSON: json = 1; break;
      case OPT_SIMULATE: simulate = optarg; break;
      case 'h': fputs(devices_help, stdout); return CLI_EXIT_OK;
      default: return cli_bad_option("devices", c, argv);
    }
  }
  if (optind != argc) return cli_usage_error("devices", "unexpected argument '%s'", argv[optind]);

  weft_runtime_options o;
  weft_runtime_options_init(&o);
  /* The default pool (a worker a hardware thread): the topology line says whether a default
   * runtime binds its workers. */
  o.flags |= WEFT_RUNTIME_QUIET;
  o.simulate = simulate;
  weft_runtime *rt = NULL;
  if (weft_runtime_create(&o, &rt) != WEFT_OK)
    return cli_error(simulate != NULL ? CLI_EXIT_USAGE : CLI_EXIT_FAILED,
                     "cannot start the runtime: %s", weft_last_error());
  weft__strbuf b;
  weft__strbuf_init(&b);
  int code = cli_devices_write(rt, json, &b);
  if (b.data != NULL) fputs(b.data, stdout);
  if (b.failed) code = cli_error(CLI_EXIT_FAILED, "out of memory");
  weft__strbuf_fini(&b);
  weft_runtime_destroy(rt);
  return code;
}
