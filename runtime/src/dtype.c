/* dtype.c: the dtypes' names and sizes, block formats included. Calls
 * nothing else of the runtime: quant.c, the loaders and the config rules
 * build on it. */
#include <stddef.h>

#include "rt.h"

const char *attn_dtype_name(attn_dtype t) {
    switch (t) {
    case ATTN_DTYPE_F32: return "f32";
    case ATTN_DTYPE_F16: return "f16";
    case ATTN_DTYPE_BF16: return "bf16";
    case ATTN_DTYPE_Q8_0: return "q8_0";
    case ATTN_DTYPE_Q4_0: return "q4_0";
    case ATTN_DTYPE_COUNT: break;
    }
    return NULL;
}

size_t attn_dtype_size(attn_dtype t) {
    return t == ATTN_DTYPE_F32 ? 4 : t == ATTN_DTYPE_F16 || t == ATTN_DTYPE_BF16 ? 2 : 0;
}

size_t rt_quant_block_bytes(attn_dtype t) {
    return t == ATTN_DTYPE_Q8_0 ? 34 : t == ATTN_DTYPE_Q4_0 ? 18 : 0;
}

int64_t attn_dtype_block(attn_dtype t) {
    return rt_quant_block_bytes(t) ? RT_QK : 1;
}

size_t attn_dtype_bytes(attn_dtype t, int64_t n) {
    size_t bb = rt_quant_block_bytes(t);
    return bb ? (size_t)(n / RT_QK) * bb : (size_t)n * attn_dtype_size(t);
}
