// Off-CPU (blocked) time by stack from sched:sched_switch, per time slot (profiler bcc backend,
// collectors/bcc/offcpu.py). No kprobe on finish_task_switch: the tracepoint fires in the
// context of the thread switching out, so its user and kernel stacks can be taken there.
//
// On switch-out of a target thread: remember when, why (prev_state) and its two stack ids.
// On switch-in of a remembered thread: add the time it was off the CPU to
// blocked[slot, back, tgid, tid, state, user stack, kernel stack], `slot` the switch-in's time
// slot and `back` how many slots earlier it left; with back > 0, head_ns keeps the part spent
// in the slot it left, so the collector can give every slot between its exact share.
// Stack ids that failed are kept as the negative error so that lost stacks are counted, not
// dropped: -EFAULT means no user stack (kernel threads), -EEXIST a hash-bucket collision in a
// full-ish stack map, -ENOMEM no room.
// Stacks cost most: the ORC unwinder took about 1.6 us a switch here for a kernel stack, and a
// user stack is a frame-pointer walk through user memory hashed into the stack map. So both are
// walked for a random one in cfg.stack_every switch-outs (counter 9); the time of every
// switch-out is kept exactly, per thread and state, and the collector shares the unsampled
// ones' out among the stacks sampled from that thread in that state (collectors/bcc/offcpu.py).
// Map sizes (MAX_THREADS, BLOCKED_ENTRIES, USER_STACKS, KERNEL_STACKS) are set when the maps
// are created; the rest is in cfg (common.h).
//
// Built twice (collectors/bcc/objects.py): with PF_RAW the program attaches to the raw
// sched_switch tracepoint (arguments: preempt, prev, next, prev_state; prev_state there since
// Linux 5.18). It reads no task field: the task leaving is the current one (its ids and name
// from the helpers), and a switch-out is remembered under the task's address, which is what
// the raw tracepoint gives of the task coming back. A raw tracepoint program only keeps itself
// from nesting (a classic one keeps every classic BPF program, block-io's included, off the CPU
// while it runs), and skips copying the event into a perf record first. Without PF_RAW: the
// classic tracepoint, keyed by thread id.

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

struct off_t {
    u64 key;  // the task this entry holds: its address (raw) or its thread id (classic)
    u64 ts;   // 0: none off the CPU here
    s64 state;
    s32 ustack;
    s32 kstack;
    u32 tgid;
    u32 tid;
    char comm[16];
};

struct blocked_key {
    u32 slot;  // the switch-in's slot
    u32 back;  // slots between the switch-out's slot and the switch-in's (0: the same)
    u32 tgid;
    u32 tid;
    s32 ustack;
    s32 kstack;
    u32 state;  // 0 runnable (preempted), 1 S, 2 D, 3 other
    u32 pad;
};

// One thread's entries are only ever updated by its own switch-ins, which do not run side by
// side: plain adds, no atomics.
struct blocked_val {
    u64 total_ns;
    u64 count;
    u64 head_ns;  // back > 0: the time spent in the slot the thread left
    char comm[16];  // the thread's name when the entry was made
};

BPF_HASH(targets, u32, u8, 1024);
// The target threads off the CPU, in an array indexed by a hash of the task (cfg.mask + 1
// entries, a power of two): no hash map to update at every switch-out and look up at every
// switch-in of the host. A switch-out whose entry holds another task still off the CPU takes it
// over, and that task's wait is lost and counted (counter 2).
BPF_ARRAY(offstart, struct off_t, MAX_THREADS);
BPF_HASH(blocked, struct blocked_key, struct blocked_val, BLOCKED_ENTRIES);

BPF_STACK_TRACE(ustacks, USER_STACKS);
BPF_STACK_TRACE(kstacks, KERNEL_STACKS);
// counters: 0 switch-outs recorded, 1 switch-ins paired, 2 waits lost to a shared entry, 3 blocked full,
// 4 user stack lost (EEXIST collision), 5 user stack lost (other error, not EFAULT),
// 6 kernel stack lost (EEXIST), 7 kernel stack lost (other), 8 no user stack (EFAULT),
// 9 switch-outs whose stacks were sampled (walked)
BPF_PERCPU_ARRAY(counters, u64, 12);  // per CPU: no shared cache line on hot paths

#define HAVE_TARGETS
#include "common.h"


static __always_inline u32 state_class(s64 st)
{
    // TASK_RUNNING 0 (preempted), TASK_INTERRUPTIBLE 1, TASK_UNINTERRUPTIBLE 2;
    // TASK_IDLE is D|NOLOAD (0x402) and counts as sleeping, not IO.
    s64 s = st & 0xff;
    if (st == 0)
        return 0;
    if ((st & 0x400) && (s & 2))
        return 1;
    if (s & 1)
        return 1;
    if (s & 2)
        return 2;
    return 3;
}

// Both stacks of a switch-out, for a random one in cfg.stack_every of them (common.h:
// sampled); the others are marked UNSAMPLED and their time is shared out by the collector among
// the stacks sampled from the same thread in the same state, in proportion to their time.
static __always_inline void stacks(void *ctx, struct pf_cfg *c, s32 *us, s32 *ks, int first)
{
    if (!first && !sampled(c)) {
        *us = UNSAMPLED;
        *ks = UNSAMPLED;
        return;
    }
    bump(9);
    *us = ustacks.get_stackid(ctx, BPF_F_USER_STACK);
    *ks = kstacks.get_stackid(ctx, 0);
}

static __always_inline u32 index_of(struct pf_cfg *c, u64 key)
{
    return (u32)(key ^ (key >> 7) ^ (key >> 21)) & c->mask;
}

// A task that is exiting switches out for the last time: nothing comes back to pair it
#define TASK_DEAD 0x80

static __always_inline int on_switch(void *ctx, struct pf_cfg *c, u64 out_key, s64 prev_state, u64 in_key)
{
    // the clock is read only where a target thread leaves or comes back: most switches of a
    // busy host are other processes' (and the idle task's), and pay for the target tests alone
    u64 now = 0;
    u64 id = bpf_get_current_pid_tgid();
    u32 tid = (u32)id;
    u32 tgid = id >> 32;
    // switch-out: the current task is the one leaving (out_key 0: it is not)
    if (out_key != 0 && tid != 0 && !(prev_state & TASK_DEAD) && is_target(c, tgid)) {
        now = bpf_ktime_get_ns();
        u32 idx = index_of(c, out_key);
        struct off_t *o = offstart.lookup(&idx);
        if (o) {
            if (o->ts && o->key != out_key)
                bump(2);  // another thread still off the CPU held this entry: its wait is lost
            // a thread's first switch-out here: its name is read, and its stacks always walked (a
            // thread that blocks rarely, for long, would otherwise keep all its time unsampled)
            int first = o->key != out_key || o->tid != tid;
            if (first) {
                o->key = out_key;
                o->tgid = tgid;
                o->tid = tid;
                bpf_get_current_comm(&o->comm, sizeof(o->comm));
            }
            o->ts = now;
            o->state = prev_state;
            stacks(ctx, c, &o->ustack, &o->kstack, first);
            if (o->ustack == -EEXIST) bump(4);
            else if (o->ustack == -EFAULT) bump(8);
            else if (o->ustack < 0 && o->ustack != UNSAMPLED) bump(5);
            if (o->kstack == -EEXIST) bump(6);
            else if (o->kstack < 0 && o->kstack != UNSAMPLED) bump(7);
            bump(0);
        }
    }
    // switch-in: the task coming back
    if (in_key == 0)
        return PASS;
    u32 in_idx = index_of(c, in_key);
    struct off_t *o = offstart.lookup(&in_idx);
    if (!o || !o->ts || o->key != in_key)
        return PASS;
    if (!now)
        now = bpf_ktime_get_ns();
    u32 s1 = slot_of(c, now);
    u32 s0 = slot_of(c, o->ts);
    struct blocked_key key = {
        .slot = s1,
        .back = s1 > s0 ? s1 - s0 : 0,
        .tgid = o->tgid,
        .tid = o->tid,
        .ustack = o->ustack,
        .kstack = o->kstack,
        .state = state_class(o->state),
    };
    u64 delta = now > o->ts ? now - o->ts : 0;
    u64 head = 0;
    if (key.back) {
        u64 left_end = c->t0 + (u64)(s0 + 1) * c->slot_ns;
        head = left_end > o->ts ? left_end - o->ts : 0;
    }
    o->ts = 0;  // consumed
    struct blocked_val *v = blocked.lookup(&key);
    if (!v) {
        struct blocked_val zv = {};
        __builtin_memcpy(&zv.comm, o->comm, sizeof(zv.comm));
        blocked.update(&key, &zv);
        v = blocked.lookup(&key);
        if (!v) {
            bump(3);
            return PASS;
        }
    }
    v->total_ns += delta;
    v->count += 1;
    v->head_ns += head;
    bump(1);
    return PASS;
}

#ifdef PF_RAW
int pf_sched_switch(struct bpf_raw_tracepoint_args *ctx)
{
    struct pf_cfg *c = config();
    if (!c || c->t0 == 0)
        return PASS;
    // TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
    return on_switch(ctx, c, (u64)ctx->args[1], (s64)(u32)ctx->args[3], (u64)ctx->args[2]);
}
#else
int pf_sched_switch(struct tracepoint__sched__sched_switch *args)
{
    struct pf_cfg *c = config();
    if (!c || c->t0 == 0)
        return PASS;
    u32 prev = args->prev_pid;
    u64 out = ((u32)bpf_get_current_pid_tgid() == prev) ? prev : 0;
    return on_switch(args, c, out, args->prev_state, (u64)(u32)args->next_pid);
}
#endif
