// Helpers shared by the bcc programs. bcc_common.program_source() inlines this file where a
// program includes it (the common.h include line), after the program has declared its maps:
//   counters  a BPF_PERCPU_ARRAY of u64 (every program), bumped by bump(index);
//   targets   a BPF_HASH of u32 tgid, read by is_target() (programs that #define HAVE_TARGETS).

static __always_inline void bump(u32 idx)
{
    u64 *v = counters.lookup(&idx);
    if (v)
        (*v)++;
}

#ifdef HAVE_TARGETS
// Is this process a target? A compare chain when the collector passes TARGET_TEST (a few
// targets: about 80 ns cheaper per event than a hash lookup), else the `targets` hash.
static __always_inline int is_target(u32 tgid)
{
#ifdef TARGET_TEST
    return TARGET_TEST(tgid);
#else
    return targets.lookup(&tgid) != 0;
#endif
}
#endif
