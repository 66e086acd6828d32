// Futex waits by user stack and lock address (profiler bcc backend, collectors/bcc/futex.py).
//
// syscalls:sys_enter_futex stamps a target thread entering a waiting futex operation
// (FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_LOCK_PI, FUTEX_LOCK_PI2, FUTEX_WAIT_REQUEUE_PI) with
// the lock address and its user stack; syscalls:sys_exit_futex adds the time it waited to
// waits[slot, back, tgid, tid, stack] (`slot` the return's time slot, `back` how many slots
// earlier the wait began, head_ns the part spent in that first slot) and to
// locks[tgid, uaddr] (whole capture). Calls that returned at once (EAGAIN: the value had
// already changed) count as attempts without a wait; ETIMEDOUT ends a timed wait (idle
// pools) and is counted apart. Map sizes (MAX_THREADS, WAIT_ENTRIES, LOCK_ENTRIES,
// USER_STACKS) are set when the maps are created; the rest is in cfg (common.h).


#define FUTEX_CMD_MASK 0x7f  // ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)

// errno values (asm-generic, the same on every architecture we run on)
#ifndef EAGAIN
#define EAGAIN 11
#endif
#ifndef EFAULT
#define EFAULT 14
#endif
#ifndef EEXIST
#define EEXIST 17
#endif
#ifndef ETIMEDOUT
#define ETIMEDOUT 110
#endif

// Every program returns PASS (1): a tracepoint BPF program that returns 0 makes the kernel drop
// the event for every perf user of that tracepoint (perf stat/record, other tools) while it is
// attached. Measured here: perf stat counted 0 raw_syscalls:sys_enter beside a returning-0 program.
#define PASS 1

struct fstart_t {
    u64 ts;    // 0: no wait of this entry's thread in progress
    u64 uaddr;
    s32 ustack;
    u32 tgid;
    u32 tid;   // the thread this entry holds (threads whose ids collide share it)
    u32 pad;
};

struct wait_key {
    u32 slot;
    u32 back;
    u32 tgid;
    u32 tid;
    s32 ustack;
    u32 pad;
};

struct wait_val {
    u64 total_ns;
    u64 count;     // waits that slept (returned 0 or were woken/interrupted)
    u64 timeouts;  // ETIMEDOUT
    u64 eagain;    // returned at once
    u64 max_ns;
    u64 head_ns;   // back > 0: the time spent in the slot the wait began in
    char comm[16]; // the thread's name when the entry was made
};

struct lock_key {
    u32 tgid;
    u32 pad;
    u64 uaddr;
};

struct lock_val {
    u64 total_ns;
    u64 count;
    u64 max_ns;
};

BPF_HASH(targets, u32, u8, 1024);
// The wait in progress per thread, in an array indexed by the thread id (cfg.mask + 1 entries,
// a power of two): a wait whose entry another thread's wait took over is not timed, and counted
// (counter 2).
BPF_ARRAY(fstart, struct fstart_t, MAX_THREADS);
BPF_HASH(waits, struct wait_key, struct wait_val, WAIT_ENTRIES);
// Per CPU: waiters of one hot lock return on every CPU at once, and a shared entry updated with
// atomics bounced its cache line between them on every wait; the helper adds up the CPUs' values.
BPF_PERCPU_HASH(locks, struct lock_key, struct lock_val, LOCK_ENTRIES);
BPF_STACK_TRACE(ustacks, USER_STACKS);
// counters: 0 waits entered, 1 waits paired, 2 waits lost to a shared entry, 3 waits full, 4 locks full,
// 5 user stack lost (EEXIST collision), 6 user stack lost (other), 7 waits whose stack was sampled
BPF_PERCPU_ARRAY(counters, u64, 8);  // per CPU: no shared cache line on hot paths

#define HAVE_TARGETS
#include "common.h"


static __always_inline int futex_enter(void *ctx, u64 uaddr, int op)
{
    struct pf_cfg *c = config();
    if (!c || c->t0 == 0)
        return PASS;
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (!is_target(c, tgid))
        return PASS;
    int cmd = op & FUTEX_CMD_MASK;
    // 0 WAIT, 6 LOCK_PI, 9 WAIT_BITSET, 11 WAIT_REQUEUE_PI, 13 LOCK_PI2
    if (cmd != 0 && cmd != 6 && cmd != 9 && cmd != 11 && cmd != 13)
        return PASS;
    u32 tid = (u32)id;
    u32 idx = tid & c->mask;
    struct fstart_t *st = fstart.lookup(&idx);
    if (!st)
        return PASS;
    if (st->ts && st->tid != tid)
        bump(2);  // another thread's wait held this entry: it will not be timed
    // a thread's first wait here always has its stack walked: a thread that waits rarely, for
    // long (readers queued seconds behind a table lock), would otherwise keep all its time unsampled
    int first = st->tid != tid;
    st->ts = bpf_ktime_get_ns();
    st->uaddr = uaddr;
    st->tgid = tgid;
    st->tid = tid;
    if (first || sampled(c)) {
        st->ustack = ustacks.get_stackid(ctx, BPF_F_USER_STACK);
        bump(7);
    } else {
        st->ustack = UNSAMPLED;
    }
    if (st->ustack == -EEXIST) bump(5);
    else if (st->ustack < 0 && st->ustack != UNSAMPLED) bump(6);
    bump(0);
    return PASS;
}


int pf_futex_enter(struct tracepoint__syscalls__sys_enter_futex *args)
{
    return futex_enter(args, (u64)args->uaddr, args->op);
}

int pf_futex_exit(struct tracepoint__syscalls__sys_exit_futex *args)
{
    struct pf_cfg *c = config();
    if (!c)
        return PASS;
    u64 id = bpf_get_current_pid_tgid();
    long ret = args->ret;
    u32 tid = (u32)id;
    u32 idx = tid & c->mask;
    struct fstart_t *st = fstart.lookup(&idx);
    if (!st || !st->ts || st->tid != tid)
        return PASS;
    u64 now = bpf_ktime_get_ns();
    u64 delta = now > st->ts ? now - st->ts : 0;
    u32 s1 = slot_of(c, now);
    u32 s0 = slot_of(c, st->ts);
    u64 head = 0;
    if (s1 > s0) {
        u64 begin_end = c->t0 + (u64)(s0 + 1) * c->slot_ns;
        head = begin_end > st->ts ? begin_end - st->ts : 0;
    }
    struct wait_key wk = {.slot = s1, .back = s1 > s0 ? s1 - s0 : 0, .tgid = st->tgid, .tid = tid,
                          .ustack = st->ustack};
    struct lock_key lk = {.tgid = st->tgid, .uaddr = st->uaddr};
    st->ts = 0;  // consumed
    bump(1);

    struct wait_val *w = waits.lookup(&wk);
    if (!w) {
        struct wait_val zw = {};
        bpf_get_current_comm(&zw.comm, sizeof(zw.comm));
        waits.update(&wk, &zw);
        w = waits.lookup(&wk);
        if (!w) {
            bump(3);
            return PASS;
        }
    }
    // the key holds the thread, whose waits end one at a time: plain adds
    if (ret == -EAGAIN) {
        w->eagain += 1;
        return PASS;
    }
    if (ret == -ETIMEDOUT)
        w->timeouts += 1;
    else
        w->count += 1;
    w->total_ns += delta;
    w->head_ns += head;
    if (delta > w->max_ns)
        w->max_ns = delta;

    struct lock_val zl = {};
    struct lock_val *l = locks.lookup_or_try_init(&lk, &zl);
    if (!l) {
        bump(4);
        return PASS;
    }
    // this CPU's value: tracepoint programs do not nest on a CPU, plain adds are enough
    l->total_ns += delta;
    l->count += 1;
    if (delta > l->max_ns)
        l->max_ns = delta;
    return PASS;
}
