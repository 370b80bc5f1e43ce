/* rt.h: helpers shared by the runtime's files (not installed). */
#ifndef ATTN_RT_H
#define ATTN_RT_H

#include "attn.h"

#define RT_HIDDEN __attribute__((visibility("hidden")))

/* Formats into m (if not NULL) and returns st, so failures read
 * `return rt_fail(msg, ATTN_E_FORMAT, "...", ...);`. */
RT_HIDDEN attn_status rt_fail(attn_msg *m, attn_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* IEEE binary16 and bfloat16 <-> binary32, round to nearest even; NaN stays
 * NaN, overflow becomes infinity. */
RT_HIDDEN uint16_t rt_f32_to_f16(float f);
RT_HIDDEN float rt_f16_to_f32(uint16_t h);
RT_HIDDEN uint16_t rt_f32_to_bf16(float f);
RT_HIDDEN float rt_bf16_to_f32(uint16_t h);
/* f rounded to dtype t and back to f32. */
RT_HIDDEN float rt_round(attn_dtype t, float f);

/* bytes (rounded up to 64) of 64-byte aligned memory, free()d as usual;
 * from 2 MB on, 2 MB aligned and advised to the kernel as huge pages:
 * streams through the KV cache and the packed weights then do not miss
 * the TLB every 4 KB, and hardware prefetchers run on. NULL if out of
 * memory. */
RT_HIDDEN void *rt_alloc_large(size_t bytes);

/* Field by field (structs may differ in padding). */
RT_HIDDEN bool rt_config_equal(const attn_config *a, const attn_config *b);

/* Number of elements of shape, or -1 if a dimension is negative or the
 * product overflows limit. */
RT_HIDDEN int64_t rt_numel(int ndim, const int64_t *shape, int64_t limit);

#endif
