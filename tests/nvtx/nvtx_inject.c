/* nvtx_inject.c — a minimal NVTX tool for tests: what Nsight Systems is to
 * NVTX, without a GPU. Loaded by NVTX itself from NVTX_INJECTION64_PATH, it
 * installs handlers for domain creation, category naming and range
 * push/pop, and keeps a log the test reads through
 * loom_test_nvtx_log() (found with dlsym). */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MAX_LOG 4096
static char g_log[MAX_LOG][96];
static int g_n = 0;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_domains[8][32];
static int g_ndomains = 0;

static void add(const char *entry) {
  pthread_mutex_lock(&g_mu);
  if (g_n < MAX_LOG) snprintf(g_log[g_n++], sizeof g_log[0], "%s", entry);
  pthread_mutex_unlock(&g_mu);
}

static const char *domain_name(nvtxDomainHandle_t d) {
  long i = (long)(intptr_t)d - 1;
  return i >= 0 && i < g_ndomains ? g_domains[i] : "?";
}

static nvtxDomainHandle_t create_a(const char *name) {
  pthread_mutex_lock(&g_mu);
  int i = g_ndomains < 8 ? g_ndomains++ : 7;
  snprintf(g_domains[i], sizeof g_domains[i], "%s", name);
  pthread_mutex_unlock(&g_mu);
  char buf[64];
  snprintf(buf, sizeof buf, "domain %s", name);
  add(buf);
  return (nvtxDomainHandle_t)(intptr_t)(i + 1);
}

static void name_category_a(nvtxDomainHandle_t d, uint32_t cat, const char *name) {
  char buf[96];
  snprintf(buf, sizeof buf, "category %s %s=%u", domain_name(d), name, (unsigned)cat);
  add(buf);
}

static int push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
  char buf[96];
  snprintf(buf, sizeof buf, "push %s %s cat=%u", domain_name(d),
           a && a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "(non-ascii)", a ? (unsigned)a->category : 0u);
  add(buf);
  return 0;
}

static int pop(nvtxDomainHandle_t d) {
  char buf[64];
  snprintf(buf, sizeof buf, "pop %s", domain_name(d));
  add(buf);
  return 0;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
  NvtxFunctionTable t = NULL;
  unsigned int size = 0;
  if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &size) || size < NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  *t[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)create_a;
  *t[NVTX_CBID_CORE2_DomainNameCategoryA] = (NvtxFunctionPointer)name_category_a;
  *t[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)push_ex;
  *t[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)pop;
  return 1;
}

/* For the test: the log so far (entries like "domain loom", "category loom op=1",
 * "push loom linear cat=1", "pop loom"). */
__attribute__((visibility("default"))) int loom_test_nvtx_log(const char *(*out)[MAX_LOG]);
int loom_test_nvtx_log(const char *(*out)[MAX_LOG]) {
  pthread_mutex_lock(&g_mu);
  int n = g_n;
  for (int i = 0; i < n; i++) (*out)[i] = g_log[i];
  pthread_mutex_unlock(&g_mu);
  return n;
}
