/* A shared library that is not a plugin library: no entry point. */
#include "common.h"

S4D_TEST_EXPORT int s4d_test_not_a_plugin(void) { return 42; }
