// On-CPU samples by time slot, thread and stack (profiler bcc backend, the live view's sampler:
// collectors/bcc/oncpu.py). A perf_event program on a cpu-clock software event of every CPU,
// sampled at the frequency the collector asks (49 Hz by default): each sample of a target
// thread adds one to counts[slot, tgid, tid, user stack, kernel stack] with the thread's comm.
// The live view names the stacks and shows each thread pool's top functions; nothing of it is
// written to the bundle (the report's on-CPU evidence is cpu-stacks', perf's).
// Map sizes (COUNT_ENTRIES, USER_STACKS, KERNEL_STACKS) are set when the maps are created; the
// rest is in cfg (common.h).

#include <uapi/linux/bpf_perf_event.h>

struct sample_key {
    u32 slot;
    u32 tgid;
    u32 tid;
    s32 ustack;
    s32 kstack;
    u32 pad;
    char comm[16];
};

BPF_HASH(targets, u32, u8, 1024);
BPF_HASH(counts, struct sample_key, u64, COUNT_ENTRIES);
BPF_STACK_TRACE(ustacks, USER_STACKS);
BPF_STACK_TRACE(kstacks, KERNEL_STACKS);
// counters: 0 samples of targets, 1 counts map full, 2 user stack lost, 3 kernel stack lost
BPF_PERCPU_ARRAY(counters, u64, 8);

#define HAVE_TARGETS
#include "common.h"

int pf_oncpu(struct bpf_perf_event_data *ctx)
{
    struct pf_cfg *c = config();
    if (!c || c->t0 == 0)
        return 0;
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if ((u32)id == 0 || !is_target(c, tgid))
        return 0;
    struct sample_key k = {.slot = slot_of(c, bpf_ktime_get_ns()), .tgid = tgid, .tid = (u32)id};
    k.ustack = ustacks.get_stackid(ctx, BPF_F_USER_STACK);
    k.kstack = kstacks.get_stackid(ctx, 0);
    if (k.ustack < 0 && k.ustack != -14)  // -EFAULT: no user stack (a kernel thread)
        bump(2);
    if (k.kstack < 0 && k.kstack != -14)
        bump(3);
    bpf_get_current_comm(&k.comm, sizeof(k.comm));
    u64 zero = 0;
    u64 *n = counts.lookup_or_try_init(&k, &zero);
    if (n)
        __sync_fetch_and_add(n, 1);
    else
        bump(1);
    bump(0);
    return 0;  // no sample record: nobody reads this event's ring buffer
}
