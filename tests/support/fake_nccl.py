"""A FAKE libnccl + libcudart, compiled at test time with the system C compiler.

This is not NVIDIA code and talks to no GPU. It exports the C functions lltui calls through
ctypes (``ncclGetVersion``, ``ncclCommInitAll``, ``ncclAllReduce``, ..., ``cudaMalloc``,
``cudaMemcpy``, ``cudaStreamCreate``, ``cudaEventRecord``, ...) with NCCL's and CUDA's C
signatures, so lltui's real argument marshalling and result handling run against it.
"Device" memory is host memory tagged with the device it was allocated on; collectives
compute their results for real (sum, prod, max, min, avg over 8/32/64-bit types) once every
rank of a communicator has issued its call, and check what real NCCL checks: buffers that
belong to the rank's device and are big enough, matching counts and types across ranks.

The same shared library stands in for both libnccl.so.2 and libcudart.so. Environment
variables steer it (read at each call): FAKE_CUDA_DEVICES (2), FAKE_CUDA_ERROR (a cudaError
returned by cudaGetDeviceCount), FAKE_CUDA_DRIVER (12040; 0 = no driver), FAKE_CUDA_MEM_MIB
(16384), FAKE_CUDA_P2P (1), FAKE_CUDA_HANG (streams never finish), FAKE_NCCL_VERSION (21805),
FAKE_NCCL_FAIL_INIT (an ncclResult_t for ncclCommInitAll), FAKE_NCCL_CORRUPT (all-reduce
results on rank 1 come back off by one).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

FAKE_SOURCE = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ALLOCS 1024
#define MAX_RANKS 64
#define MAX_PENDING 4096

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : def;
}

/* ---- fake CUDA runtime ---- */

typedef struct { char *p; size_t n; int dev; } alloc_t;
static alloc_t allocs[MAX_ALLOCS];
static int live_allocs = 0;
static int cur_dev = 0;

typedef struct { int magic; int dev; } stream_t;
typedef struct { int magic; int dev; int recorded; double t; } event_t;
static int live_streams = 0, live_events = 0;
#define STREAM_MAGIC 0x5757
#define EVENT_MAGIC 0x6e6e

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int n_devices(void) { return env_int("FAKE_CUDA_DEVICES", 2); }

/* The allocation holding [p, p+n), or NULL. */
static alloc_t *find_alloc(const void *p, size_t n) {
    const char *c = (const char *)p;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        alloc_t *a = &allocs[i];
        if (a->p && c >= a->p && c + n <= a->p + a->n) return a;
    }
    return NULL;
}

int cudaGetDeviceCount(int *n) {
    int err = env_int("FAKE_CUDA_ERROR", 0);
    if (err) return err;
    *n = n_devices();
    return 0;
}
int cudaSetDevice(int d) {
    if (d < 0 || d >= n_devices()) return 101; /* cudaErrorInvalidDevice */
    cur_dev = d;
    return 0;
}
int cudaGetDevice(int *d) { *d = cur_dev; return 0; }
int cudaMalloc(void **p, size_t n) {
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (!allocs[i].p) {
            char *q = malloc(n ? n : 1);
            if (!q) return 2; /* cudaErrorMemoryAllocation */
            allocs[i].p = q; allocs[i].n = n; allocs[i].dev = cur_dev;
            live_allocs++;
            *p = q;
            return 0;
        }
    }
    return 2;
}
int cudaFree(void *p) {
    if (!p) return 0;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].p == p) {
            free(allocs[i].p);
            allocs[i].p = NULL;
            live_allocs--;
            return 0;
        }
    }
    return 1; /* cudaErrorInvalidValue */
}
int cudaMemset(void *p, int v, size_t n) {
    if (!find_alloc(p, n)) return 1;
    memset(p, v, n);
    return 0;
}
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    if (kind == 1 && !find_alloc(dst, n)) return 1;  /* host to device */
    if (kind == 2 && !find_alloc(src, n)) return 1;  /* device to host */
    memmove(dst, src, n);
    return 0;
}
int cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    size_t total = (size_t)env_int("FAKE_CUDA_MEM_MIB", 16384) << 20, used = 0;
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].p && allocs[i].dev == cur_dev) used += allocs[i].n;
    *total_b = total;
    *free_b = used < total ? total - used : 0;
    return 0;
}
int cudaStreamCreate(void **s) {
    stream_t *st = malloc(sizeof *st);
    st->magic = STREAM_MAGIC; st->dev = cur_dev;
    live_streams++;
    *s = st;
    return 0;
}
static int bad_stream(void *s) { return s && ((stream_t *)s)->magic != STREAM_MAGIC; }
int cudaStreamDestroy(void *s) {
    if (!s || bad_stream(s)) return 400; /* cudaErrorInvalidResourceHandle */
    ((stream_t *)s)->magic = 0; free(s); live_streams--;
    return 0;
}
int cudaStreamSynchronize(void *s) { return bad_stream(s) ? 400 : 0; }
int cudaStreamQuery(void *s) {
    if (bad_stream(s)) return 400;
    return env_int("FAKE_CUDA_HANG", 0) ? 600 : 0; /* cudaErrorNotReady */
}
int cudaEventCreate(void **e) {
    event_t *ev = calloc(1, sizeof *ev);
    ev->magic = EVENT_MAGIC; ev->dev = cur_dev;
    live_events++;
    *e = ev;
    return 0;
}
int cudaEventRecord(void *e, void *s) {
    event_t *ev = e;
    if (!ev || ev->magic != EVENT_MAGIC || bad_stream(s)) return 400;
    if (s && ((stream_t *)s)->dev != ev->dev) return 400;
    ev->recorded = 1; ev->t = now_s();
    return 0;
}
int cudaEventSynchronize(void *e) { return (e && ((event_t *)e)->magic == EVENT_MAGIC) ? 0 : 400; }
int cudaEventElapsedTime(float *ms, void *a, void *b) {
    event_t *ea = a, *eb = b;
    if (!ea || !eb || ea->magic != EVENT_MAGIC || eb->magic != EVENT_MAGIC) return 400;
    if (!ea->recorded || !eb->recorded) return 400;
    *ms = (float)((eb->t - ea->t) * 1e3);
    return 0;
}
int cudaEventDestroy(void *e) {
    event_t *ev = e;
    if (!ev || ev->magic != EVENT_MAGIC) return 400;
    ev->magic = 0; free(ev); live_events--;
    return 0;
}
int cudaDeviceCanAccessPeer(int *ok, int a, int b) {
    if (a < 0 || b < 0 || a >= n_devices() || b >= n_devices()) return 101;
    *ok = a != b && env_int("FAKE_CUDA_P2P", 1);
    return 0;
}
int cudaDeviceSynchronize(void) { return 0; }
int cudaDeviceGetPCIBusId(char *buf, int len, int dev) {
    if (dev < 0 || dev >= n_devices()) return 101;
    snprintf(buf, (size_t)len, "0000:%02X:00.0", 0x10 + dev);
    return 0;
}
const char *cudaGetErrorString(int e) {
    switch (e) {
    case 0: return "no error";
    case 1: return "invalid argument";
    case 2: return "out of memory";
    case 35: return "CUDA driver version is insufficient for CUDA runtime version";
    case 100: return "no CUDA-capable device is detected";
    case 101: return "invalid device ordinal";
    case 400: return "invalid resource handle";
    case 600: return "device not ready";
    default: return "unknown error";
    }
}
const char *cudaGetErrorName(int e) { (void)e; return "cudaErrorFake"; }
int cudaRuntimeGetVersion(int *v) { *v = 12040; return 0; }
int cudaDriverGetVersion(int *v) { *v = env_int("FAKE_CUDA_DRIVER", 12040); return 0; }

/* ---- fake NCCL ---- */

enum { ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER };
typedef struct clique clique_t;
typedef struct { int magic; int rank; int dev; clique_t *clique; } comm_t;
struct clique { int nranks; int refs; comm_t *comms[MAX_RANKS]; };
typedef struct {
    int kind; comm_t *comm; const void *send; void *recv; size_t count;
    int dtype; int op; int root; void *stream;
} op_t;
#define COMM_MAGIC 0xcafe

static op_t pending[MAX_PENDING];
static int npending = 0;
static int group_depth = 0;
static int live_comms = 0;
static long collectives_run = 0;
static char last_error[512] = "";

static int fail(int code, const char *msg) {
    snprintf(last_error, sizeof last_error, "%s", msg);
    return code;
}

int ncclGetVersion(int *v) { *v = env_int("FAKE_NCCL_VERSION", 21805); return 0; }
const char *ncclGetErrorString(int r) {
    switch (r) {
    case 0: return "no error";
    case 1: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case 2: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case 3: return "internal error - please report this issue to the NCCL developers";
    case 4: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case 5: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case 6: return "remote process exited or there was a network error";
    case 7: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}
const char *ncclGetLastError(void *comm) { (void)comm; return last_error; }

int ncclCommInitAll(void **comms, int n, const int *devlist) {
    int forced = env_int("FAKE_NCCL_FAIL_INIT", 0);
    if (forced) return fail(forced, "fake: ncclCommInitAll told to fail");
    if (n < 1 || n > MAX_RANKS) return fail(4, "fake: bad number of devices");
    for (int i = 0; i < n; i++) {
        int d = devlist ? devlist[i] : i;
        if (d < 0 || d >= n_devices()) return fail(1, "fake: invalid device ordinal");
        for (int j = 0; j < i; j++)
            if ((devlist ? devlist[j] : j) == d) return fail(5, "fake: duplicate device");
    }
    clique_t *c = calloc(1, sizeof *c);
    c->nranks = n; c->refs = n;
    for (int i = 0; i < n; i++) {
        comm_t *cm = calloc(1, sizeof *cm);
        cm->magic = COMM_MAGIC; cm->rank = i; cm->dev = devlist ? devlist[i] : i; cm->clique = c;
        c->comms[i] = cm;
        comms[i] = cm;
        live_comms++;
    }
    return 0;
}
static int bad_comm(void *comm) { return !comm || ((comm_t *)comm)->magic != COMM_MAGIC; }
int ncclCommDestroy(void *comm) {
    if (bad_comm(comm)) return fail(4, "fake: invalid communicator");
    comm_t *cm = comm;
    clique_t *c = cm->clique;
    c->comms[cm->rank] = NULL;
    cm->magic = 0; free(cm); live_comms--;
    if (--c->refs == 0) free(c);
    return 0;
}
int ncclCommAbort(void *comm) { return ncclCommDestroy(comm); }
int ncclCommCount(void *comm, int *n) {
    if (bad_comm(comm)) return 4;
    *n = ((comm_t *)comm)->clique->nranks; return 0;
}
int ncclCommCuDevice(void *comm, int *d) {
    if (bad_comm(comm)) return 4;
    *d = ((comm_t *)comm)->dev; return 0;
}
int ncclCommUserRank(void *comm, int *r) {
    if (bad_comm(comm)) return 4;
    *r = ((comm_t *)comm)->rank; return 0;
}
int ncclCommGetAsyncError(void *comm, int *e) {
    if (bad_comm(comm)) return 4;
    *e = 0; return 0;
}

static size_t type_size(int t) {
    switch (t) {
    case 0: case 1: return 1;
    case 2: case 3: case 7: return 4;
    case 4: case 5: case 8: return 8;
    default: return 0; /* 16-bit floats: not computed by the fake */
    }
}

#define REDUCE_AS(T) do { \
    T *a = (T *)acc; const T *b = (const T *)src; \
    for (size_t i = 0; i < count; i++) { \
        if (op == 0 || op == 4) a[i] = a[i] + b[i]; \
        else if (op == 1) a[i] = a[i] * b[i]; \
        else if (op == 2) a[i] = a[i] > b[i] ? a[i] : b[i]; \
        else a[i] = a[i] < b[i] ? a[i] : b[i]; \
    } } while (0)
#define DIVIDE_AS(T) do { \
    T *a = (T *)acc; \
    for (size_t i = 0; i < count; i++) a[i] = a[i] / (T)n; \
    } while (0)

static void reduce_into(void *acc, const void *src, size_t count, int dtype, int op) {
    switch (dtype) {
    case 0: REDUCE_AS(int8_t); break;
    case 1: REDUCE_AS(uint8_t); break;
    case 2: REDUCE_AS(int32_t); break;
    case 3: REDUCE_AS(uint32_t); break;
    case 4: REDUCE_AS(int64_t); break;
    case 5: REDUCE_AS(uint64_t); break;
    case 7: REDUCE_AS(float); break;
    case 8: REDUCE_AS(double); break;
    }
}
static void divide(void *acc, size_t count, int dtype, int n) {
    switch (dtype) {
    case 0: DIVIDE_AS(int8_t); break;
    case 1: DIVIDE_AS(uint8_t); break;
    case 2: DIVIDE_AS(int32_t); break;
    case 3: DIVIDE_AS(uint32_t); break;
    case 4: DIVIDE_AS(int64_t); break;
    case 5: DIVIDE_AS(uint64_t); break;
    case 7: DIVIDE_AS(float); break;
    case 8: DIVIDE_AS(double); break;
    }
}

/* Check one rank's call the way NCCL's argument checks do. */
static int check_op(const op_t *o) {
    comm_t *cm = o->comm;
    int n = cm->clique->nranks;
    size_t es = type_size(o->dtype);
    char msg[256];
    if (o->dtype < 0 || o->dtype > 9) return fail(4, "fake: invalid data type");
    if (o->op < 0 || o->op > 4) return fail(4, "fake: invalid reduction operation");
    if (es == 0) return fail(4, "fake: 16-bit float types are not computed by this fake");
    size_t send_n = o->count * es, recv_n = o->count * es;
    if (o->kind == ALLGATHER) recv_n *= (size_t)n;
    if (o->kind == REDUCESCATTER) send_n *= (size_t)n;
    int needs_send = !(o->kind == BROADCAST && cm->rank != o->root);
    int needs_recv = !(o->kind == REDUCE && cm->rank != o->root);
    if ((o->kind == BROADCAST || o->kind == REDUCE) && (o->root < 0 || o->root >= n))
        return fail(4, "fake: root out of range");
    alloc_t *a;
    if (needs_send && o->count) {
        a = find_alloc(o->send, send_n);
        if (!a || a->dev != cm->dev) {
            snprintf(msg, sizeof msg, "fake: rank %d sendbuff is not %zu bytes on device %d",
                     cm->rank, send_n, cm->dev);
            return fail(4, msg);
        }
    }
    if (needs_recv && o->count) {
        a = find_alloc(o->recv, recv_n);
        if (!a || a->dev != cm->dev) {
            snprintf(msg, sizeof msg, "fake: rank %d recvbuff is not %zu bytes on device %d",
                     cm->rank, recv_n, cm->dev);
            return fail(4, msg);
        }
    }
    if (o->stream && (bad_stream(o->stream) || ((stream_t *)o->stream)->dev != cm->dev)) {
        snprintf(msg, sizeof msg, "fake: rank %d stream is not a stream of device %d",
                 cm->rank, cm->dev);
        return fail(4, msg);
    }
    return 0;
}

/* Run one collective whose calls from every rank are in ops[0..n). */
static int execute(op_t **ops, int n) {
    const op_t *o0 = ops[0];
    for (int r = 1; r < n; r++) {
        if (ops[r]->kind != o0->kind || ops[r]->count != o0->count ||
            ops[r]->dtype != o0->dtype || ops[r]->op != o0->op || ops[r]->root != o0->root)
            return fail(5, "fake: ranks issued mismatched collectives");
    }
    size_t es = type_size(o0->dtype), count = o0->count, bytes = count * es;
    int op = o0->op, root = o0->root;
    char *acc;
    switch (o0->kind) {
    case ALLREDUCE:
    case REDUCE:
        acc = malloc(bytes ? bytes : 1);
        memcpy(acc, ops[0]->send, bytes);
        for (int r = 1; r < n; r++) reduce_into(acc, ops[r]->send, count, o0->dtype, op);
        if (op == 4) divide(acc, count, o0->dtype, n);
        for (int r = 0; r < n; r++) {
            if (o0->kind == REDUCE && r != root) continue;
            memcpy(ops[r]->recv, acc, bytes);
        }
        if (o0->kind == ALLREDUCE && env_int("FAKE_NCCL_CORRUPT", 0) && n > 1 && count &&
            o0->dtype == 7)
            ((float *)ops[1]->recv)[0] += 1.0f;
        free(acc);
        break;
    case BROADCAST:
        acc = malloc(bytes ? bytes : 1);
        memcpy(acc, ops[root]->send, bytes);
        for (int r = 0; r < n; r++) memcpy(ops[r]->recv, acc, bytes);
        free(acc);
        break;
    case ALLGATHER:
        acc = malloc((bytes * n) ? (bytes * n) : 1);
        for (int r = 0; r < n; r++) memcpy(acc + r * bytes, ops[r]->send, bytes);
        for (int r = 0; r < n; r++) memcpy(ops[r]->recv, acc, bytes * n);
        free(acc);
        break;
    case REDUCESCATTER:
        acc = malloc((bytes * n) ? (bytes * n) : 1);
        memcpy(acc, ops[0]->send, bytes * n);
        for (int r = 1; r < n; r++) reduce_into(acc, ops[r]->send, count * n, o0->dtype, op);
        if (op == 4) divide(acc, count * n, o0->dtype, n);
        for (int r = 0; r < n; r++) memcpy(ops[r]->recv, acc + r * bytes, bytes);
        free(acc);
        break;
    }
    collectives_run++;
    return 0;
}

/* Execute every collective for which each rank of its communicator has a call queued. */
static int progress(void) {
    int result = 0, again = 1;
    while (again) {
        again = 0;
        for (int i = 0; i < npending; i++) {
            clique_t *c = pending[i].comm->clique;
            op_t *ops[MAX_RANKS] = {0};
            int idx[MAX_RANKS], have = 0;
            for (int j = 0; j < npending && have < c->nranks; j++) {
                comm_t *cm = pending[j].comm;
                if (cm->clique == c && !ops[cm->rank]) {
                    ops[cm->rank] = &pending[j]; idx[cm->rank] = j; have++;
                }
            }
            if (have < c->nranks) continue;
            int rc = execute(ops, c->nranks);
            if (rc && !result) result = rc;
            /* drop the executed calls, keeping the queue's order */
            int keep = 0;
            for (int j = 0; j < npending; j++) {
                int used = 0;
                for (int r = 0; r < c->nranks; r++) if (idx[r] == j) used = 1;
                if (!used) pending[keep++] = pending[j];
            }
            npending = keep;
            again = 1;
            break;
        }
    }
    return result;
}

/* Like NCCL, a failed call inside a group fails the whole group: ncclGroupEnd drops the
   group's calls and returns the first error. */
static int group_error = 0, group_first = 0;

static int enqueue(op_t o) {
    int rc = bad_comm(o.comm) ? fail(4, "fake: invalid communicator") : check_op(&o);
    if (!rc && npending >= MAX_PENDING) rc = fail(3, "fake: too many calls queued");
    if (rc) {
        if (group_depth && !group_error) group_error = rc;
        return rc;
    }
    pending[npending++] = o;
    return group_depth ? 0 : progress();
}

int ncclGroupStart(void) {
    if (group_depth++ == 0) { group_error = 0; group_first = npending; }
    return 0;
}
int ncclGroupEnd(void) {
    if (group_depth <= 0) return fail(5, "fake: ncclGroupEnd without ncclGroupStart");
    if (--group_depth) return 0;
    if (group_error) {
        int rc = group_error;
        group_error = 0;
        npending = group_first;
        return rc;
    }
    return progress();
}

int ncclAllReduce(const void *s, void *r, size_t n, int t, int op, void *comm, void *st) {
    op_t o = {ALLREDUCE, comm, s, r, n, t, op, -1, st};
    return enqueue(o);
}
int ncclBroadcast(const void *s, void *r, size_t n, int t, int root, void *comm, void *st) {
    op_t o = {BROADCAST, comm, s, r, n, t, 0, root, st};
    return enqueue(o);
}
int ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, void *comm, void *st) {
    op_t o = {REDUCE, comm, s, r, n, t, op, root, st};
    return enqueue(o);
}
int ncclAllGather(const void *s, void *r, size_t n, int t, void *comm, void *st) {
    op_t o = {ALLGATHER, comm, s, r, n, t, 0, -1, st};
    return enqueue(o);
}
int ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, void *comm, void *st) {
    op_t o = {REDUCESCATTER, comm, s, r, n, t, op, -1, st};
    return enqueue(o);
}

/* ---- introspection for tests ---- */
int fake_live_comms(void) { return live_comms; }
int fake_live_allocations(void) { return live_allocs; }
int fake_live_streams(void) { return live_streams; }
int fake_live_events(void) { return live_events; }
int fake_pending_calls(void) { return npending; }
int fake_group_depth(void) { return group_depth; }
long fake_collectives_run(void) { return collectives_run; }
void fake_clear_pending(void) { npending = 0; group_depth = 0; group_error = 0; }
"""

LIBRARY_NAME = "libfake_nccl_cudart.so"


def compiler() -> str | None:
    """The system C compiler, or None when there is none."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def build_fake_library(directory: Path) -> Path:
    """Compile the fake into ``directory`` and return the shared library's path."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc) to build the fake NCCL library")
    src = directory / "fake_nccl_cudart.c"
    out = directory / LIBRARY_NAME
    src.write_text(FAKE_SOURCE)
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(out), str(src)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


class FakeCounters:
    """Reads the fake's bookkeeping: live communicators, allocations, queued calls."""

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path))  # same handle lltui gets: one copy of the state
        for name in (
            "fake_live_comms",
            "fake_live_allocations",
            "fake_live_streams",
            "fake_live_events",
            "fake_pending_calls",
            "fake_group_depth",
        ):
            getattr(self.lib, name).restype = ctypes.c_int
        self.lib.fake_collectives_run.restype = ctypes.c_long

    def snapshot(self) -> dict[str, int]:
        return {
            "comms": self.lib.fake_live_comms(),
            "allocations": self.lib.fake_live_allocations(),
            "streams": self.lib.fake_live_streams(),
            "events": self.lib.fake_live_events(),
            "pending": self.lib.fake_pending_calls(),
            "group_depth": self.lib.fake_group_depth(),
        }

    def collectives_run(self) -> int:
        return int(self.lib.fake_collectives_run())

    def clear_pending(self) -> None:
        self.lib.fake_clear_pending()
