/*
 * src/runtime/schedule.h - spreading an engine's layers over several streams
 * (internal).
 *
 * A plan runs its layers in one order; a CUDA graph need not. Two layers
 * conflict when one writes bytes the other reads or writes (the memory plan
 * reuses buffers, so this covers data flow and reuse alike). A schedule puts
 * each layer on one of a few streams and lists, per layer, the layers on
 * other streams it must wait for, so that every conflicting pair keeps the
 * plan's order while independent branches (an encoder's parallel heads, the
 * branches of a refinement head) may overlap. Layers of one stream run in
 * the plan's order. The schedule depends only on the layers' byte ranges.
 */
#ifndef S4D_RUNTIME_SCHEDULE_H
#define S4D_RUNTIME_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "s4d/types.h"

#define S4D_SCHED_MAX_STREAMS 8

/* Bytes [lo, hi) of one device's memory. */
typedef struct s4d_sched_range {
    uintptr_t lo, hi;
} s4d_sched_range;

typedef struct s4d_sched_layer {
    int skip; /* runs nothing (a view): neither scheduled nor waited for */
    int num_reads, num_writes;
    const s4d_sched_range *reads, *writes;
} s4d_sched_layer;

typedef struct s4d_schedule {
    int num_layers;
    int num_streams;        /* streams used (1 .. the number asked for) */
    int *stream;            /* per layer: its stream, -1 for a skipped layer */
    int *wait_off;          /* per layer, and one past: into waits */
    int *waits;             /* layers whose completion the layer's stream waits for */
    unsigned char *record;  /* per layer: some layer waits for it */
    int tail[S4D_SCHED_MAX_STREAMS]; /* per stream: its last layer, -1 when unused */
} s4d_schedule;

/*
 * Makes the schedule of n layers over at most num_streams streams (1 ..
 * S4D_SCHED_MAX_STREAMS). S4D_ERR_NO_MEMORY or S4D_ERR_INVALID_ARG with the
 * reason in err; *out is then empty.
 */
s4d_status s4d_schedule_make(const s4d_sched_layer *layers, int n, int num_streams,
                             s4d_schedule *out, char *err, size_t errsz);

void s4d_schedule_free(s4d_schedule *s);

/*
 * Checks, independently of how the schedule was made, that every pair of
 * conflicting layers is ordered: the later one's stream has, through stream
 * order and waits, seen the earlier one finish. S4D_OK, or
 * S4D_ERR_INTERNAL naming the first unordered pair.
 */
s4d_status s4d_schedule_verify(const s4d_sched_layer *layers, int n, const s4d_schedule *s,
                               char *err, size_t errsz);

#endif /* S4D_RUNTIME_SCHEDULE_H */
