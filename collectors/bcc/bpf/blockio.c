// Block IO latency, aggregated in the kernel (profiler bcc backend, collectors/bcc/blockio.py).
//
// block:block_rq_issue stamps each request (keyed by device and start sector);
// block:block_rq_complete looks the stamp up and adds the issue-to-completion latency to
//   - hist:    per time slot, device and op, a log-linear histogram of latency in ns
//              (16 linear sub-buckets per power of two; exact below 16 ns);
//   - totals:  per time slot, device and op: count, bytes, latency sum and max;
//   - tasks:   per device, op and issuing thread: count, bytes, latency sum (who issued the IO).
// Tracepoint arguments and BPF helpers only: no kernel struct is read, so headers of another
// kernel version compile it. Map sizes (MAX_INFLIGHT, HIST_ENTRIES, TASK_ENTRIES) are set when
// the maps are created; the capture start and slot length are in cfg (common.h).

#define SUB_BITS 4
#define SUB (1 << SUB_BITS)
#define MAX_EXP 40  // 2^40 ns ~ 18 minutes: everything longer lands in the last bucket

enum op_class { OP_READ = 1, OP_WRITE = 2, OP_DISCARD = 3, OP_FLUSH = 4, OP_OTHER = 5 };

// Requests are paired by device and start sector. A pure flush carries no data and its
// sector is not meaningful (the flush request is reused and may show a stale one), so
// flushes are paired by device alone (kind = 1): one flush per device is in flight at a time.
// Every program returns PASS (1): a tracepoint BPF program that returns 0 makes the kernel drop
// the event for every perf user of that tracepoint (perf stat/record, other tools) while it is
// attached. Measured here: perf stat counted 0 raw_syscalls:sys_enter beside a returning-0 program.
#define PASS 1

struct rq_key {
    u32 dev;
    u32 kind;
    u64 sector;
};

struct rq_start {
    u64 ts;
    u32 tid;
    u32 tgid;
    u32 bytes;
    u32 pad;
    char comm[16];
};

struct hist_key {
    u32 slot;
    u32 dev;
    u32 op;
    u32 bucket;
};

struct total_key {
    u32 slot;
    u32 dev;
    u32 op;
    u32 pad;
};

struct total_val {
    u64 count;
    u64 bytes;
    u64 sum_ns;
    u64 max_ns;
};

struct task_key {
    u32 dev;
    u32 op;
    u32 tid;
    u32 tgid;
    char comm[16];
};

struct task_val {
    u64 count;
    u64 bytes;
    u64 sum_ns;
};

BPF_HASH(inflight, struct rq_key, struct rq_start, MAX_INFLIGHT);
BPF_HASH(hist, struct hist_key, u64, HIST_ENTRIES);
BPF_HASH(totals, struct total_key, struct total_val, HIST_ENTRIES);
BPF_HASH(tasks, struct task_key, struct task_val, TASK_ENTRIES);
// counters: 0 issued, 1 completed+paired, 2 completed without an issue stamp,
// 3 inflight map full, 4 hist/totals map full, 5 tasks map full, 6 issue re-stamped (requeue),
// 7 completion of a preflush-only request (never issued itself, not an IO)
BPF_PERCPU_ARRAY(counters, u64, 8);  // per CPU: no shared cache line on hot paths

#include "common.h"

// floor(log2(v)) for v > 0, without loops (the verifier likes straight lines)
static __always_inline u32 ilog2_u64(u64 v)
{
    u32 r = 0;
    if (v >> 32) { v >>= 32; r += 32; }
    if (v >> 16) { v >>= 16; r += 16; }
    if (v >> 8) { v >>= 8; r += 8; }
    if (v >> 4) { v >>= 4; r += 4; }
    if (v >> 2) { v >>= 2; r += 2; }
    if (v >> 1) { r += 1; }
    return r;
}

// bucket index: v < SUB -> v; else SUB + (e - SUB_BITS) * SUB + sub, e = floor(log2 v)
static __always_inline u32 bucket_of(u64 v)
{
    if (v < SUB)
        return (u32)v;
    u32 e = ilog2_u64(v);
    if (e > MAX_EXP) {
        e = MAX_EXP;
        v = (2ULL << MAX_EXP) - 1;
    }
    u32 sub = (u32)(v >> (e - SUB_BITS)) - SUB;
    return SUB + (e - SUB_BITS) * SUB + sub;
}

static __always_inline u32 op_of(char c)
{
    switch (c) {
    case 'R': return OP_READ;
    case 'W': return OP_WRITE;
    case 'D': return OP_DISCARD;
    case 'F': return OP_FLUSH;
    default: return OP_OTHER;
    }
}

static __always_inline void rq_key_of(struct rq_key *key, u32 dev, u64 sector, char op, u32 nr_sector)
{
    key->dev = dev;
    if (op == 'F' && nr_sector == 0) {
        key->kind = 1;
        key->sector = 0;
    } else {
        key->kind = 0;
        key->sector = sector;
    }
}

int pf_rq_issue(struct tracepoint__block__block_rq_issue *args)
{
    struct rq_key key = {};
    rq_key_of(&key, args->dev, args->sector, args->rwbs[0], args->nr_sector);
    struct rq_start st = {};
    u64 id = bpf_get_current_pid_tgid();
    st.ts = bpf_ktime_get_ns();
    st.tid = (u32)id;
    st.tgid = id >> 32;
    st.bytes = args->bytes;
    bpf_get_current_comm(&st.comm, sizeof(st.comm));
    bump(0);
    if (inflight.lookup(&key))
        bump(6);
    if (inflight.update(&key, &st) != 0)
        bump(3);
    return PASS;
}

int pf_rq_complete(struct tracepoint__block__block_rq_complete *args)
{
    struct rq_key key = {};
    rq_key_of(&key, args->dev, args->sector, args->rwbs[0], args->nr_sector);
    struct rq_start *st = inflight.lookup(&key);
    if (!st) {
        // A request that carried only a preflush is never issued itself (the flush request
        // is) but completes with its flush flag cleared: "WS", no sectors. Not an IO.
        if (args->nr_sector == 0 && args->rwbs[0] != 'F')
            bump(7);
        else
            bump(2);
        return PASS;
    }
    struct pf_cfg *c = config();
    if (!c)
        return PASS;
    u64 now = bpf_ktime_get_ns();
    u64 delta = now > st->ts ? now - st->ts : 0;
    u32 slot = slot_of(c, now);
    u32 op = op_of(args->rwbs[0]);
    // rwbs is "FWS" for a flush before a write: the first letter wins, which is what we want
    u32 bytes = st->bytes;

    struct hist_key hk = {.slot = slot, .dev = key.dev, .op = op, .bucket = bucket_of(delta)};
    u64 one = 0;
    u64 *cnt = hist.lookup_or_try_init(&hk, &one);
    if (cnt)
        __sync_fetch_and_add(cnt, 1);
    else
        bump(4);

    struct total_key tk = {.slot = slot, .dev = key.dev, .op = op};
    struct total_val zt = {};
    struct total_val *tv = totals.lookup_or_try_init(&tk, &zt);
    if (tv) {
        __sync_fetch_and_add(&tv->count, 1);
        __sync_fetch_and_add(&tv->bytes, bytes);
        __sync_fetch_and_add(&tv->sum_ns, delta);
        if (delta > tv->max_ns)
            tv->max_ns = delta;
    } else {
        bump(4);
    }

    struct task_key ak = {.dev = key.dev, .op = op, .tid = st->tid, .tgid = st->tgid};
    __builtin_memcpy(&ak.comm, st->comm, sizeof(ak.comm));
    struct task_val za = {};
    struct task_val *av = tasks.lookup_or_try_init(&ak, &za);
    if (av) {
        __sync_fetch_and_add(&av->count, 1);
        __sync_fetch_and_add(&av->bytes, bytes);
        __sync_fetch_and_add(&av->sum_ns, delta);
    } else {
        bump(5);
    }
    inflight.delete(&key);
    bump(1);
    return PASS;
}
