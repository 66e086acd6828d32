// Helpers shared by the bcc programs. objects.program_source() inlines this file where a
// program includes it (the common.h include line), after the program has declared its maps:
//   counters  a BPF_PERCPU_ARRAY of u64 (every program), bumped by bump(index);
//   targets   a BPF_HASH of u32 tgid, read by is_target() past PF_INLINE_TARGETS targets
//             (programs that #define HAVE_TARGETS).
// Everything that changes from one capture to the next (its start, the slot length, the
// targets) is in the `cfg` array, written by the collector before it attaches: the compiled
// program is the same for every capture, so it can be built once and loaded as it is
// (collectors/bcc/objects.py). Map sizes are set when the maps are created, not here.

#define PF_INLINE_TARGETS 16

struct pf_cfg {
    u64 t0;            // capture start (ns, CLOCK_MONOTONIC): slots count from it; 0 = not armed
    u64 slot_ns;       // slot length (--interval), ns
    u32 stack_every;   // offcpu, futex: walk a full stack every Nth time a call site is seen (below)
    u32 ntargets;      // targets below; more than PF_INLINE_TARGETS: the `targets` hash decides
    u32 tgid[PF_INLINE_TARGETS];
    u32 mask;          // syscalls: the per-thread array's size - 1 (a power of two)
    u32 pad;
};

BPF_ARRAY(cfg, struct pf_cfg, 1);

static __always_inline void bump(u32 idx)
{
    u64 *v = counters.lookup(&idx);
    if (v)
        (*v)++;
}

// The capture's settings (an array lookup: the verifier turns it into a pointer add).
static __always_inline struct pf_cfg *config(void)
{
    u32 zero = 0;
    return cfg.lookup(&zero);
}

static __always_inline u32 slot_of(struct pf_cfg *c, u64 now)
{
    if (now <= c->t0 || c->slot_ns == 0)
        return 0;
    return (u32)((now - c->t0) / c->slot_ns);
}

#ifdef HAVE_TARGETS
// Is this process a target? A compare chain over the few targets in cfg (about 80 ns cheaper
// per event than a hash lookup), else the `targets` hash.
static __always_inline int is_target(struct pf_cfg *c, u32 tgid)
{
    u32 n = c->ntargets;
    if (n > PF_INLINE_TARGETS)
        return targets.lookup(&tgid) != 0;
#pragma unroll
    for (int i = 0; i < PF_INLINE_TARGETS; i++) {
        if (i >= n)
            return 0;
        if (c->tgid[i] == tgid)
            return 1;
    }
    return 0;
}
#endif

// Stacks, cheaply: walking a whole user stack (frame pointers, each frame read from user memory)
// and a kernel one (the unwinder), then hashing them into a stack map, is most of what a
// switch-out or a futex wait costs the target. They are walked for a random one in
// cfg.stack_every events; the others carry UNSAMPLED instead of a stack id and their time is
// shared out, by the collector, among the stacks sampled from the same thread (in the same
// state): every event's time is kept, the split by stack is an estimate (unbiased: the sample
// is random, not every Nth, so no pattern of waits can line up with it).
#define UNSAMPLED (-1000)

static __always_inline int sampled(struct pf_cfg *c)
{
    u32 every = c->stack_every;
    return every <= 1 || bpf_get_prandom_u32() % every == 0;
}
