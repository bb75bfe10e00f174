/* dlpack_capsule.c — the PyCapsule destructor CPython bindings attach to
 * exported DLPack tensors. It must be C: CPython calls capsule destructors
 * while a failing consumer's exception is pending (numpy.from_dlpack on a
 * dtype it lacks), and Python code cannot run then. The Python C-API
 * functions come from the binding (loom_dlpack_set_pycapsule_api), so
 * libloom never links against Python. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/struct_size.h"
#include "io/dlpack_abi.h"
#include "loom/io.h"

static loom_pycapsule_api g_api;
static atomic_bool g_api_set;

loom_status loom_dlpack_set_pycapsule_api(const loom_pycapsule_api *user) {
  loom_pycapsule_api api = {0};
  if (user) LOOM_TRY(LOOM_STRUCT_IN("loom_dlpack_set_pycapsule_api", loom_pycapsule_api, &api, user));
  if (!user || !api.is_valid || !api.get_pointer || !api.err_fetch || !api.err_restore)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "loom_dlpack_set_pycapsule_api: give all four functions (is_valid, get_pointer, "
                          "err_fetch, err_restore)");
  if (atomic_load(&g_api_set)) return LOOM_OK;  /* one Python per process: the same functions */
  g_api = api;
  atomic_store(&g_api_set, true);
  return LOOM_OK;
}

void loom_dlpack_pycapsule_destructor(void *capsule) {
  if (!capsule || !atomic_load(&g_api_set)) return;
  void *type = NULL, *value = NULL, *tb = NULL;
  g_api.err_fetch(&type, &value, &tb);
  if (g_api.is_valid(capsule, "dltensor")) {
    DLManagedTensor *m = g_api.get_pointer(capsule, "dltensor");
    if (m && m->deleter) m->deleter(m);
  } else if (g_api.is_valid(capsule, "dltensor_versioned")) {
    DLManagedTensorVersioned *m = g_api.get_pointer(capsule, "dltensor_versioned");
    if (m && m->deleter) m->deleter(m);
  }
  g_api.err_restore(type, value, tb);
}
