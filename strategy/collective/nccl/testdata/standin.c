/* A stand-in for libnccl.so.2 and libcudart with the same C signatures, for
 * tests on machines without GPUs. "Device" memory is host memory, streams
 * are ignored and every collective completes synchronously; ranks are
 * threads of one process that meet in a registry keyed by the unique id. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef int ncclResult_t;

#define MAXR 64
struct group {
  char id[128];
  int n, joined;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned long gen;
  int arrived;
  const void *send[MAXR];
  struct group *next;
};
struct comm { struct group *g; int rank; };
typedef struct comm *ncclComm_t;

static struct group *groups;
static pthread_mutex_t glock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long idctr;

static void barrier(struct group *g) {
  pthread_mutex_lock(&g->mu);
  unsigned long gen = g->gen;
  if (++g->arrived == g->n) {
    g->arrived = 0;
    g->gen++;
    pthread_cond_broadcast(&g->cv);
  } else {
    while (gen == g->gen) pthread_cond_wait(&g->cv, &g->mu);
  }
  pthread_mutex_unlock(&g->mu);
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  pthread_mutex_lock(&glock);
  snprintf(id->internal, sizeof id->internal, "standin-%d-%lu", (int)getpid(), ++idctr);
  pthread_mutex_unlock(&glock);
  return 0;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (nranks < 1 || nranks > MAXR || rank < 0 || rank >= nranks) return 4; /* ncclInvalidArgument */
  pthread_mutex_lock(&glock);
  struct group *g = groups;
  while (g && memcmp(g->id, id.internal, 128) != 0) g = g->next;
  if (!g) {
    g = calloc(1, sizeof *g);
    memcpy(g->id, id.internal, 128);
    g->n = nranks;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->next = groups;
    groups = g;
  }
  pthread_mutex_unlock(&glock);
  if (g->n != nranks) return 4;
  struct comm *c = calloc(1, sizeof *c);
  c->g = g;
  c->rank = rank;
  *comm = c;
  barrier(g); /* NCCL's init blocks until every rank has joined */
  return 0;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) { free(c); return 0; }
ncclResult_t ncclCommAbort(ncclComm_t c) { free(c); return 0; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) { (void)c; *e = 0; return 0; }
const char *ncclGetErrorString(ncclResult_t r) { return r ? "stand-in error" : "no error"; }

static size_t esize(int dt) { return dt == 7 ? 4 : 8; } /* ncclFloat32 = 7; ncclFloat64 = 8, ncclInt64 = 4 */

static void combine(void *acc, const void *src, size_t i, int dt, int op) {
  if (dt == 7) {
    float *a = acc; const float *s = src;
    if (op == 0) a[i] += s[i]; else if (op == 2) { if (s[i] > a[i]) a[i] = s[i]; } else if (op == 3) { if (s[i] < a[i]) a[i] = s[i]; }
  } else if (dt == 8) {
    double *a = acc; const double *s = src;
    if (op == 0) a[i] += s[i]; else if (op == 2) { if (s[i] > a[i]) a[i] = s[i]; } else if (op == 3) { if (s[i] < a[i]) a[i] = s[i]; }
  } else {
    int64_t *a = acc; const int64_t *s = src;
    if (op == 0) a[i] += s[i]; else if (op == 2) { if (s[i] > a[i]) a[i] = s[i]; } else if (op == 3) { if (s[i] < a[i]) a[i] = s[i]; }
  }
}

/* reduce elements [lo, lo+count) of every rank's send into out, rank order */
static void reduce(struct group *g, size_t lo, size_t count, int dt, int op, void *out) {
  size_t es = esize(dt);
  memcpy(out, (const char *)g->send[0] + lo * es, count * es);
  for (int q = 1; q < g->n; q++)
    for (size_t i = 0; i < count; i++) combine(out, (const char *)g->send[q] + lo * es, i, dt, op);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int dt, int op, ncclComm_t c, void *stream) {
  (void)stream;
  struct group *g = c->g;
  void *tmp = malloc(count * esize(dt) + 1);
  g->send[c->rank] = send;
  barrier(g);
  reduce(g, 0, count, dt, op, tmp);
  barrier(g);
  memcpy(recv, tmp, count * esize(dt));
  free(tmp);
  return 0;
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, int dt, int op, ncclComm_t c, void *stream) {
  (void)stream;
  struct group *g = c->g;
  void *tmp = malloc(recvcount * esize(dt) + 1);
  g->send[c->rank] = send;
  barrier(g);
  reduce(g, (size_t)c->rank * recvcount, recvcount, dt, op, tmp);
  barrier(g);
  memcpy(recv, tmp, recvcount * esize(dt));
  free(tmp);
  return 0;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, int dt, int root, ncclComm_t c, void *stream) {
  (void)stream;
  struct group *g = c->g;
  g->send[c->rank] = send;
  barrier(g);
  if (recv != g->send[root]) memcpy(recv, g->send[root], count * esize(dt));
  barrier(g);
  return 0;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, int dt, ncclComm_t c, void *stream) {
  (void)stream;
  struct group *g = c->g;
  size_t b = sendcount * esize(dt);
  g->send[c->rank] = send;
  barrier(g);
  for (int q = 0; q < g->n; q++) memcpy((char *)recv + q * b, g->send[q], b);
  barrier(g);
  return 0;
}

/* libcudart */
#define STANDIN_DEVICES 8
int cudaGetDeviceCount(int *n) { *n = STANDIN_DEVICES; return 0; }
int cudaSetDevice(int d) { return d >= 0 && d < STANDIN_DEVICES ? 0 : 101; /* cudaErrorInvalidDevice */ }
int cudaStreamCreate(void **s) { *s = malloc(1); return 0; }
int cudaStreamDestroy(void *s) { free(s); return 0; }
int cudaStreamSynchronize(void *s) { (void)s; return 0; }
int cudaStreamQuery(void *s) { (void)s; return 0; }
int cudaMalloc(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
int cudaFree(void *p) { free(p); return 0; }
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) { (void)kind; memmove(dst, src, n); return 0; }
int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *s) { (void)kind; (void)s; memmove(dst, src, n); return 0; }
const char *cudaGetErrorString(int e) {
  return e == 101 ? "invalid device ordinal" : e ? "stand-in cuda error" : "no error";
}
