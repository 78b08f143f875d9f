/*
 * The backend registry: which backend serves each device in this build and
 * process (see backend.h).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

const s4d_backend *s4d_backend_get(s4d_device device)
{
    switch (device) {
    case S4D_DEVICE_CPU: return s4d_backend_cpu();
    case S4D_DEVICE_CUDA: {
        const char *t = getenv("S4D_TEST_BACKEND");
        if (t && strcmp(t, "guarded") == 0)
            return s4d_backend_guarded();
#if defined(S4D_HAVE_CUDA_BACKEND)
        return s4d_backend_cuda();
#else
        return NULL;
#endif
    }
    }
    return NULL;
}

const char *s4d_device_name(s4d_device device)
{
    switch (device) {
    case S4D_DEVICE_CPU: return "cpu";
    case S4D_DEVICE_CUDA: return "cuda";
    }
    return "unknown device";
}
