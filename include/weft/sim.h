/* sim.h — the simulated machine: run graphs in virtual time on GPUs you do not have, and
 * measure the profile of the machine you do have.
 *
 * A runtime created with weft_runtime_options.simulate set to a machine profile (a JSON file,
 * or a shipped name: "h100", "h200x2", "h200x4", or a family with a GPU count such as
 * "h200x8") has virtual devices: the scheduler plans and dispatches the graph unchanged, and
 * each run is replayed in virtual time by a model of the machine (GEMM rates by size, memory
 * and link bandwidths, launch, event and notification costs, streams and copy engines, CPU
 * cores). The run's timing records (weft/report.h) then hold virtual times, so its
 * statistics, trace and timeline are those of the simulated machine. docs/simulator.md
 * describes the model, the profile format and its limits.
 *
 * By default a simulated machine computes no data (planning for 64 GPUs must not compute on
 * this CPU what they would); WEFT_RUNTIME_SIM_COMPUTE (or WEFT_SIM_COMPUTE=1) also computes
 * every node on the CPU so that results can be read and checked.
 *
 * Profiles of real machines are measured by `weft calibrate`, a tool built beside the command
 * (src/tools/calibrate), not part of this library. */
#ifndef WEFT_SIM_H
#define WEFT_SIM_H

#include <stdint.h>

#include "weft/weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns 1 if the runtime simulates a machine, else 0. Thread-safe: yes. */
WEFT_API int weft_sim_active(const weft_runtime *rt);

/* Returns 1 if the runtime simulates a machine and also computes results (compute mode), so
 * that tensors can be read after a run; 0 otherwise. A front end that prints results (weft
 * run) prints the simulated statistics instead when this is 0. Thread-safe: yes. */
WEFT_API int weft_sim_computes(const weft_runtime *rt);

/* The virtual-time figures of a finished simulated run. */
typedef struct weft_sim_summary {
  double makespan_s;           /* from the launch to the caller's return from weft_run_wait */
  double critical_path_s;      /* longest chain of dependent nodes, by modelled cost */
  double copy_s;               /* summed duration of copy nodes */
  double hidden_copy_s;        /* the part of copy_s during which a compute node ran on a
                                  device the copy touches (weft/report.h's definition) */
  double hidden_copy_fraction; /* hidden_copy_s / copy_s; -1 when no copy ran */
  size_t nodes_run;            /* nodes that ran (not skipped or cancelled) */
  int replayed;                /* 1: modelled as a replay of an unchanged all-GPU graph */
} weft_sim_summary;

/* Fills *out for `run`, a finished run of a simulated runtime. Fails with WEFT_EINVAL for a
 * NULL argument or a runtime that does not simulate, WEFT_EAGAIN while the run is in flight,
 * WEFT_ESTATE when its graph was launched again (or re-planned) since. Thread-safe: yes, with
 * respect to other graphs. */
WEFT_NODISCARD WEFT_API int weft_sim_run_summary(const weft_run *run, weft_sim_summary *out);

/* Stores in *out the peak memory of GPU `device` during `run` (its resident tensors plus the
 * temporaries live at once, in virtual time). Same failures as weft_sim_run_summary, and
 * WEFT_EDEVICE for a device that is not a simulated GPU. */
WEFT_NODISCARD WEFT_API int weft_sim_peak_bytes(const weft_run *run, weft_device device,
                                                uint64_t *out);

/* Stores node `node_id`'s virtual interval of `run` in *start_s and *end_s (seconds from the
 * launch); a node that did not run gets NaN for both. Same failures as weft_sim_run_summary,
 * and WEFT_EINVAL for a node id out of range. */
WEFT_NODISCARD WEFT_API int weft_sim_node_interval(const weft_run *run, size_t node_id,
                                                   double *start_s, double *end_s);

/* Writes the profile the runtime simulates (after any scaling to N GPUs) as JSON to `path`.
 * WEFT_EINVAL if the runtime does not simulate, WEFT_EIO if the file cannot be written. */
WEFT_NODISCARD WEFT_API int weft_sim_profile_save(const weft_runtime *rt, const char *path);

/* Checks that `spec` names a readable, valid profile (what weft_runtime_create would load),
 * without creating a runtime. Returns WEFT_OK or the error (message set) the runtime would
 * give. Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_sim_profile_check(const char *spec);

/* Stores up to `cap` names of the shipped profiles in out and returns how many there are. */
WEFT_API size_t weft_sim_profile_names(const char **out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_SIM_H */
