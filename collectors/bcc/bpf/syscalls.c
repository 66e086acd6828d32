// Syscall counts and time per thread per syscall, per time slot (profiler bcc backend,
// collectors/bcc/syscalls.py).
//
// raw_syscalls:sys_enter stamps the thread (target processes only: the `targets` set holds
// their tgids); raw_syscalls:sys_exit adds one call and its duration to
// counts[slot, tid, nr]. A call is counted in the slot where it returns; calls still in
// flight when the capture stops are added by the collector from the `start` map (time up to
// the stop), so a count equals the number of sys_enter events in the window, as perf counts
// them. A call that began before the capture is not counted (counter 4), as the perf backend
// does not count an exit without its enter.
// Map sizes (MAX_THREADS, COUNT_ENTRIES) are set when the maps are created; the rest is in cfg.
//
// Built twice (collectors/bcc/objects.py): with PF_RAW the two programs attach to the *raw*
// tracepoints (the syscall number is raw argument 1 of sys_enter; sys_exit takes it from the
// start entry). A raw tracepoint program only keeps itself from nesting, where a classic one
// keeps every other classic BPF program off the CPU while it runs: a block completion interrupt
// arriving during one of these (they run on every syscall of the host) was skipped by the
// block-io program, 1-2% of completions on a syscall-heavy host. Raw tracepoints also skip
// copying the event's fields into a perf record first.

// Every program returns PASS (1): a tracepoint BPF program that returns 0 makes the kernel drop
// the event for every perf user of that tracepoint (perf stat/record, other tools) while it is
// attached. Measured here: perf stat counted 0 raw_syscalls:sys_enter beside a returning-0 program.
#define PASS 1

struct start_t {
    u64 ts;   // 0: no call of this thread in flight
    u32 nr;
    u32 tid;  // the thread this entry holds (entries are shared by threads whose ids collide)
};

struct count_key {
    u32 slot;
    u32 tid;
    u32 nr;
    u32 tgid;
};

struct count_val {
    u64 count;
    u64 total_ns;
    char comm[16];
};

BPF_HASH(targets, u32, u8, 1024);
// The call in flight per thread, in an array indexed by the thread id (masked: cfg.mask + 1
// entries, a power of two), no hash to compute on the hottest path of the host. Two threads
// whose ids share an entry and are both inside a syscall: the second overwrites the first, and
// the first's exit finds another thread's id there, is not timed and is counted (counter 5).
BPF_ARRAY(start, struct start_t, MAX_THREADS);
BPF_HASH(counts, struct count_key, struct count_val, COUNT_ENTRIES);
// counters: 0 enters seen, 1 exits seen, 2 (unused), 3 counts map full,
// 4 exits without an enter (call began before the capture), 5 calls lost to a shared entry
BPF_PERCPU_ARRAY(counters, u64, 8);  // per CPU: no shared cache line on hot paths

#define HAVE_TARGETS
#include "common.h"


#ifdef PF_RAW
int pf_sys_enter(struct bpf_raw_tracepoint_args *ctx)
#else
int pf_sys_enter(struct tracepoint__raw_syscalls__sys_enter *args)
#endif
{
    struct pf_cfg *c = config();
    if (!c)
        return PASS;
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (!is_target(c, tgid))
        return PASS;
    u32 tid = (u32)id;
    u64 now = bpf_ktime_get_ns();
#ifdef PF_RAW
    u64 nr = (u64)ctx->args[1];
#else
    u64 nr = (u64)args->id;
#endif
    u32 idx = tid & c->mask;
    struct start_t *cur = start.lookup(&idx);
    if (!cur)
        return PASS;
    cur->ts = now;
    cur->nr = (u32)nr;
    cur->tid = tid;
    return PASS;
}

#ifdef PF_RAW
int pf_sys_exit(struct bpf_raw_tracepoint_args *ctx)
#else
int pf_sys_exit(struct tracepoint__raw_syscalls__sys_exit *args)
#endif
{
    struct pf_cfg *c = config();
    if (!c)
        return PASS;
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (!is_target(c, tgid))
        return PASS;
    u32 tid = (u32)id;
    u64 now = bpf_ktime_get_ns();
    if (c->t0 == 0 || now < c->t0)
        return PASS;  // not armed yet
    u32 idx = tid & c->mask;
    struct start_t *st = start.lookup(&idx);
    if (!st)
        return PASS;
    if (st->tid != tid || !st->ts) {
        // another thread's call took the entry, or the call began before the capture (not
        // counted, as the perf backend does not count an exit without its enter)
        bump(st->tid != tid && st->ts ? 5 : 4);
        return PASS;
    }
    u64 delta = now > st->ts ? now - st->ts : 0;
    u32 nr = st->nr;
    st->ts = 0;  // consumed
    struct count_key key = {
        .slot = slot_of(c, now),
        .tid = tid,
        .nr = nr,  // what the enter stamped (a raw sys_exit does not carry it)
        .tgid = tgid,
    };
    struct count_val zv = {};
    struct count_val *v = counts.lookup_or_try_init(&key, &zv);
    if (!v) {
        bump(3);
        return PASS;
    }
    if (v->count == 0 && v->total_ns == 0)
        bpf_get_current_comm(&v->comm, sizeof(v->comm));
    // the key holds the thread, which runs on one CPU at a time: no atomics needed
    v->count += 1;
    v->total_ns += delta;
    return PASS;
}
