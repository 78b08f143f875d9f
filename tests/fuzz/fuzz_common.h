/*
 * Shared by the fuzz targets: the plugin registry they build and load
 * against, and running an engine on generated inputs within a memory budget.
 *
 * A target's input is untrusted in every byte; the harness itself never
 * trusts what the library returns beyond its documented contract, and
 * aborts (a finding) only where that contract is broken.
 */
#ifndef S4D_TESTS_FUZZ_COMMON_H
#define S4D_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "s4d/engine.h"
#include "s4d/plugin.h"

/*
 * Engines whose activations, workspace, weights, inputs and outputs together
 * exceed this are built or loaded but not run: the budget keeps a run within
 * libFuzzer's memory limit and its time short. (The size bounds of the
 * loader and builder themselves are what the targets test.)
 */
#define FUZZ_RUN_BUDGET_BYTES ((size_t)64 << 20)

/* A registry holding the deformable aggregation creators (linked in, not dlopen'ed). */
s4d_plugin_registry *fuzz_registry(void);

/*
 * Runs the engine once on deterministic inputs (values in [-2, 2], integers
 * in [0, 4)) on one thread, and reads every output. A status from the
 * library is fine; a broken contract (an OK without outputs) aborts.
 */
void fuzz_run_engine(const s4d_engine *e);

/* Serializes the engine, loads the bytes again and checks the copy describes the same engine. */
void fuzz_roundtrip_engine(s4d_engine *e);

/* Fails loudly: prints the message and aborts, which libFuzzer reports as a crash. */
void fuzz_fail(const char *fmt, ...);

#endif
