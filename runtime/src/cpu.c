/* cpu.c: the features of the CPU this runs on, in the ATTN_CPU_* bits a
 * kernel table records (attn_kernels.h), and the check attn_block_new
 * makes of a table before running any of its code.
 *
 * x86-64: cpuid leaves 1, 7 (subleaves 0 and 1) and 0x80000001, as the
 * Intel SDM vol. 2A (CPUID) numbers their bits; AVX and AVX-512 count only
 * when the OS saves their registers (XGETBV: XCR0 bits 1-2, and 5-7 for
 * the opmask and upper ZMM state). AArch64: the kernel's hwcaps
 * (getauxval; asm/hwcap.h). */
#include <stdio.h>
#include <string.h>

#include "attn_kernels.h"
#include "rt.h"

/* what README suggests for objects that run on every machine of an ISA */
#if defined(__x86_64__)
#define PORTABLE_CPU "x86-64-v3"
#else
#define PORTABLE_CPU "generic"
#endif

#if defined(__x86_64__)
#include <cpuid.h>

static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

/* Where cpuid reports each feature, and which register state it needs
 * the OS to save (0 none, 1 AVX's YMM, 2 AVX-512's opmask and ZMM, 3
 * AMX's tile configuration and data). */
static const struct {
    uint32_t flag;
    unsigned leaf, sub, reg; /* reg: 0 eax, 1 ebx, 2 ecx, 3 edx */
    unsigned bit, state;
} cpuid_bits[] = {
    {ATTN_CPU_SSE4_1, 1, 0, 2, 19, 0},
    {ATTN_CPU_SSE4_2, 1, 0, 2, 20, 0},
    {ATTN_CPU_POPCNT, 1, 0, 2, 23, 0},
    {ATTN_CPU_MOVBE, 1, 0, 2, 22, 0},
    {ATTN_CPU_AVX, 1, 0, 2, 28, 1},
    {ATTN_CPU_FMA, 1, 0, 2, 12, 1},
    {ATTN_CPU_F16C, 1, 0, 2, 29, 1},
    {ATTN_CPU_AVX2, 7, 0, 1, 5, 1},
    {ATTN_CPU_BMI2, 7, 0, 1, 8, 0},
    {ATTN_CPU_AVX512F, 7, 0, 1, 16, 2},
    {ATTN_CPU_AVX512DQ, 7, 0, 1, 17, 2},
    {ATTN_CPU_AVX512BW, 7, 0, 1, 30, 2},
    {ATTN_CPU_AVX512VL, 7, 0, 1, 31, 2},
    {ATTN_CPU_AVX512VBMI, 7, 0, 2, 1, 2},
    {ATTN_CPU_AVX512FP16, 7, 0, 3, 23, 2},
    {ATTN_CPU_AVX512BF16, 7, 1, 0, 5, 2},
    {ATTN_CPU_AVX512VNNI, 7, 0, 2, 11, 2},
    {ATTN_CPU_AVXVNNI, 7, 1, 0, 4, 1},
    {ATTN_CPU_AMX_BF16, 7, 0, 3, 22, 3},
    {ATTN_CPU_AMX_TILE, 7, 0, 3, 24, 3},
    {ATTN_CPU_LZCNT, 0x80000001u, 0, 2, 5, 0}, /* ABM */
};

static uint32_t detect(void) {
    unsigned r[4];
    if (!__get_cpuid(1, &r[0], &r[1], &r[2], &r[3]))
        return 0;
    /* OSXSAVE, then XCR0: XMM and YMM state; opmask, ZMM_Hi256, Hi16_ZMM */
    uint64_t x = (r[2] & (1u << 27)) ? xcr0() : 0;
    bool state[4] = {true, (x & 0x6) == 0x6, (x & 0xe6) == 0xe6, (x & 0x60000) == 0x60000};
    uint32_t f = 0;
    for (size_t i = 0; i < sizeof cpuid_bits / sizeof cpuid_bits[0]; i++) {
        if (!__get_cpuid_count(cpuid_bits[i].leaf, cpuid_bits[i].sub, &r[0], &r[1], &r[2], &r[3]))
            continue; /* a leaf beyond the CPU's maximum */
        if (state[cpuid_bits[i].state] && (r[cpuid_bits[i].reg] >> cpuid_bits[i].bit & 1))
            f |= cpuid_bits[i].flag;
    }
    return f;
}
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

static uint32_t detect(void) {
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    uint32_t f = 0;
    if ((hw & (1ul << 9)) && (hw & (1ul << 10))) /* HWCAP_FPHP, HWCAP_ASIMDHP */
        f |= ATTN_CPU_ARM_FP16;
    if (hw2 & (1ul << 14)) /* HWCAP2_BF16 */
        f |= ATTN_CPU_ARM_BF16;
    if (hw2 & (1ul << 13)) /* HWCAP2_I8MM */
        f |= ATTN_CPU_ARM_I8MM;
    return f;
}
#else
static uint32_t detect(void) {
    return 0;
}
#endif

/* Linux gives a process the AMX tile data state only when asked
 * (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA: the kernel's
 * Documentation/arch/x86/xstate.rst); asked once, for every thread. */
#if defined(__x86_64__) && defined(__linux__)
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static bool amx_ok;
static char amx_error[64] = "not asked";

static void amx_ask(void) {
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    amx_ok = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    if (!amx_ok)
        snprintf(amx_error, sizeof amx_error, "%s", strerror(errno));
}

static bool amx_granted(void) {
    pthread_once(&amx_once, amx_ask);
    return amx_ok;
}
#else
static const char amx_error[] = "not Linux on x86-64";
static bool amx_granted(void) {
    return false;
}
#endif

uint32_t attn_cpu_features(void) {
    return detect();
}

static const struct {
    uint32_t bit;
    const char *name;
} names[] = {
    {ATTN_CPU_SSE4_1, "sse4.1"},
    {ATTN_CPU_SSE4_2, "sse4.2"},
    {ATTN_CPU_POPCNT, "popcnt"},
    {ATTN_CPU_AVX, "avx"},
    {ATTN_CPU_AVX2, "avx2"},
    {ATTN_CPU_FMA, "fma"},
    {ATTN_CPU_F16C, "f16c"},
    {ATTN_CPU_BMI2, "bmi2"},
    {ATTN_CPU_LZCNT, "lzcnt"},
    {ATTN_CPU_MOVBE, "movbe"},
    {ATTN_CPU_AVX512F, "avx512f"},
    {ATTN_CPU_AVX512BW, "avx512bw"},
    {ATTN_CPU_AVX512DQ, "avx512dq"},
    {ATTN_CPU_AVX512VL, "avx512vl"},
    {ATTN_CPU_AVX512BF16, "avx512bf16"},
    {ATTN_CPU_AVX512FP16, "avx512fp16"},
    {ATTN_CPU_AVX512VBMI, "avx512vbmi"},
    {ATTN_CPU_AVX512VNNI, "avx512vnni"},
    {ATTN_CPU_AVXVNNI, "avxvnni"},
    {ATTN_CPU_AMX_TILE, "amx-tile"},
    {ATTN_CPU_AMX_BF16, "amx-bf16"},
    {ATTN_CPU_ARM_FP16, "fp16"},
    {ATTN_CPU_ARM_BF16, "bf16"},
    {ATTN_CPU_ARM_I8MM, "i8mm"},
};

int attn_cpu_feature_names(uint32_t bits, char *buf, size_t size) {
    int len = 0;
    if (size)
        buf[0] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(bits & names[i].bit))
            continue;
        size_t at = (size_t)len < size ? (size_t)len : size;
        len += snprintf(buf ? buf + at : NULL, size - at, "%s%s", len ? ", " : "", names[i].name);
        bits &= ~names[i].bit;
    }
    for (int b = 0; b < 32; b++) /* bits no name is known for (a newer compiler's) */
        if (bits & (1u << b)) {
            size_t at = (size_t)len < size ? (size_t)len : size;
            len += snprintf(buf ? buf + at : NULL, size - at, "%sbit %d", len ? ", " : "", b);
        }
    return len;
}

attn_status attn_kernels_check(const attn_kernels *k, attn_msg *msg) {
    if (!k)
        return rt_fail(msg, ATTN_E_INVALID, "no kernel table");
    if (k->abi_version != ATTN_KERNELS_ABI)
        return rt_fail(msg, ATTN_E_INVALID,
                       "kernel table of ABI version %u; this runtime runs version %d (compile the "
                       "spec again with the attnc that matches it)",
                       k->abi_version, ATTN_KERNELS_ABI);
    if (k->n_buffers > ATTN_MAX_BUFFERS || k->n_buffers < 2 || (k->n_steps && !k->steps) ||
        !k->buffers)
        return rt_fail(msg, ATTN_E_INVALID,
                       "kernel table with %u buffers and %u steps is malformed", k->n_buffers,
                       k->n_steps);
    attn_status st = attn_config_check(&k->config, msg);
    if (st != ATTN_OK)
        return st;
    uint32_t n_load = 0, n_packed = 0, n_memory = 0;
    for (uint32_t i = 0; i < k->n_steps; i++) {
        if (!k->steps[i].fn || k->steps[i].phase >= ATTN_PHASE_COUNT)
            return rt_fail(msg, ATTN_E_INVALID, "kernel table step %u is malformed", i);
        n_load += k->steps[i].phase == ATTN_PHASE_LOAD;
        n_memory += k->steps[i].phase == ATTN_PHASE_MEMORY;
    }
    if ((n_memory > 0) != (k->config.memory_dim > 0))
        return rt_fail(msg, ATTN_E_INVALID, "kernel table has %u memory steps for memory_dim %lld",
                       n_memory, (long long)k->config.memory_dim);
    for (uint32_t i = 0; i < k->n_buffers; i++) {
        const attn_buffer_desc *d = &k->buffers[i];
        if (d->role >= ATTN_BUF_ROLE_COUNT ||
            ((d->role == ATTN_BUF_WEIGHT || d->role == ATTN_BUF_PACKED) &&
             d->weight >= ATTN_WEIGHT_COUNT) ||
            ((d->role == ATTN_BUF_TOKEN_INPUT || d->role == ATTN_BUF_SEQ_INPUT) &&
             d->weight >= ATTN_EXPR_MAX_INPUTS) ||
            (d->role == ATTN_BUF_CASCADE &&
             (d->weight < 1 || d->s < 1 || d->c || d->t || d->st || d->prefill_min < 0)))
            return rt_fail(msg, ATTN_E_INVALID, "kernel table buffer %u is malformed", i);
        n_packed += d->role == ATTN_BUF_PACKED;
    }
    if (n_load != n_packed) /* the i-th load step packs the i-th packed buffer */
        return rt_fail(msg, ATTN_E_INVALID, "kernel table has %u load steps for %u packed buffers",
                       n_load, n_packed);
    uint32_t missing = k->cpu_features & ~attn_cpu_features();
    if (missing) {
        char list[256];
        attn_cpu_feature_names(missing, list, sizeof list);
        return rt_fail(msg, ATTN_E_CPU,
                       "the kernels of '%s' were compiled for CPU features this CPU lacks: %s "
                       "(compile them on this machine, or for a CPU every target has: attnc "
                       "compile --cpu %s)",
                       k->config.name, list, PORTABLE_CPU);
    }
    if ((k->cpu_features & ATTN_CPU_AMX_TILE) && !amx_granted())
        return rt_fail(msg, ATTN_E_CPU,
                       "the kernels of '%s' use AMX tiles, and Linux refused this process their "
                       "state (arch_prctl ARCH_REQ_XCOMP_PERM: %s); compile them for a CPU without "
                       "AMX (attnc compile --cpu icelake-server) or allow it",
                       k->config.name, amx_error);
    return ATTN_OK;
}

attn_status attn_cpu_request_amx(attn_msg *msg) {
    uint32_t amx = ATTN_CPU_AMX_TILE | ATTN_CPU_AMX_BF16;
    if ((attn_cpu_features() & amx) != amx)
        return rt_fail(msg, ATTN_E_CPU, "this CPU has no AMX (amx-tile, amx-bf16)");
    if (!amx_granted())
        return rt_fail(msg, ATTN_E_CPU,
                       "Linux refused this process the AMX tile state (arch_prctl "
                       "ARCH_REQ_XCOMP_PERM: %s)",
                       amx_error);
    return ATTN_OK;
}
