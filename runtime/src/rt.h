/* rt.h: helpers shared by the runtime's files (not installed). */
#ifndef ATTN_RT_H
#define ATTN_RT_H

#include <stdarg.h>

#include "attn.h"

#define RT_HIDDEN __attribute__((visibility("hidden")))

/* Formats into m (if not NULL) and returns st, so failures read
 * `return rt_fail(msg, ATTN_E_FORMAT, "...", ...);`. */
RT_HIDDEN attn_status rt_fail(attn_msg *m, attn_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* rt_fail with the arguments as a va_list. */
RT_HIDDEN attn_status rt_vfail(attn_msg *m, attn_status st, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* IEEE binary16 and bfloat16 <-> binary32, round to nearest even; NaN stays
 * NaN, overflow becomes infinity. */
RT_HIDDEN uint16_t rt_f32_to_f16(float f);
RT_HIDDEN float rt_f16_to_f32(uint16_t h);
RT_HIDDEN uint16_t rt_f32_to_bf16(float f);
RT_HIDDEN float rt_bf16_to_f32(uint16_t h);
/* f rounded to dtype t and back to f32; f itself for the block formats,
 * which round whole blocks (rt_quant_row). */
RT_HIDDEN float rt_round(attn_dtype t, float f);

/* ---- block formats (quant.c) --------------------------------------------- */

/* x[0..n) rounded to dtype t in place: element by element, or (block
 * formats, n a multiple of RT_QK) through blocks of the reference
 * quantizer; values no block holds leave their block as it is. */
RT_HIDDEN void rt_round_row(attn_dtype t, float *x, int64_t n);

#define RT_QK 32 /* values per block of Q8_0 and Q4_0 */
/* Bytes per block of t; 0 if t is not a block format (dtype.c). */
RT_HIDDEN size_t rt_quant_block_bytes(attn_dtype t);
/* n values (a multiple of RT_QK) of x as blocks of t at dst, with ggml's
 * reference quantizers. -1, or the first index that is NaN or infinite,
 * or the first of a block whose scale overflows f16 (dst then partly
 * written). */
RT_HIDDEN int64_t rt_quant_row(attn_dtype t, const float *x, unsigned char *dst, int64_t n);
/* The same, except that a block whose values some block of t holds
 * exactly (one the reference quantizer would not write: another scale) is
 * stored as that block, so values from any Q8_0/Q4_0 file come back
 * unchanged. */
RT_HIDDEN int64_t rt_quant_row_exact(attn_dtype t, const float *x, unsigned char *dst, int64_t n);
/* n values of blocks of t at src, exactly, into y. */
RT_HIDDEN void rt_dequant_row(attn_dtype t, const unsigned char *src, float *y, int64_t n);
/* n values stored as dtype t at src (little-endian f32, f16, bf16, or
 * blocks of a block format) as f32 into y, exactly. */
RT_HIDDEN void rt_to_f32(attn_dtype t, const unsigned char *src, float *y, int64_t n);
/* Why value v cannot be stored in a block format: "NaN", "infinity", or
 * (a finite v that rt_quant_row refused) its block's scale overflow. */
RT_HIDDEN const char *rt_unstorable(float v);

/* bytes (rounded up to 64) of 64-byte aligned memory, freed by
 * rt_free_large; from 2 MB on, 2 MB aligned and advised to the kernel as
 * huge pages: streams through the KV cache and the packed weights then
 * do not miss the TLB every 4 KB, and hardware prefetchers run on. NULL
 * if out of memory. With $ATTN_GUARD_PAGES=front or back (tests:
 * docs/development.md), a mapping of its own whose first byte follows,
 * or whose last precedes, a page nothing may touch: a kernel's read
 * outside it faults instead of reading a neighbour. */
RT_HIDDEN void *rt_alloc_large(size_t bytes);

/* Frees what rt_alloc_large returned (or malloc: then free). */
RT_HIDDEN void rt_free_large(void *p);

/* rt_alloc_large never guarded: memory its owner may free() (the public
 * attn_weights' arrays, which the kernels never read). */
RT_HIDDEN void *rt_alloc_heap(size_t bytes);

/* Field by field (structs may differ in padding; config.c). */
RT_HIDDEN bool rt_config_equal(const attn_config *a, const attn_config *b);
/* activations q8_0 over a q8_0 cache (not MLA): each head's q quantized
 * to Q8_0 blocks for q.k, in the reference as in the kernels (the
 * compiler's ir_cfg_q8_query). */
RT_HIDDEN bool rt_q8_query(const attn_config *c);

/* Maps the regular file at path read-only and privately: *map (NULL for
 * an empty file; munmap it with *size) and *size. ATTN_E_IO with the
 * reason (cannot open, not a regular file, cannot map). */
RT_HIDDEN attn_status rt_map_file(const char *path, const unsigned char **map, size_t *size,
                                  attn_msg *m);

/* "[2, 3]": shape as messages print it, into buf. */
RT_HIDDEN void rt_shape_str(char *buf, size_t n, int ndim, const int64_t *shape);

/* Number of elements of shape, or -1 if a dimension is negative or the
 * product overflows limit. */
RT_HIDDEN int64_t rt_numel(int ndim, const int64_t *shape, int64_t limit);

/* ---- checkpoints (source.c) ---------------------------------------------- */

/* A tensor of a checkpoint, shape outermost first (a Linear weight is
 * [out, in] whatever the file's convention). */
typedef struct rt_tensor {
    const char *name, *file, *type; /* type as the file names it: "BF16", "Q8_0" */
    attn_dtype dtype;               /* how it loads; ATTN_DTYPE_COUNT: it does not */
    int ndim;
    int64_t shape[ATTN_ST_MAX_DIMS];
    const unsigned char *data;
    size_t nbytes;
} rt_tensor;

typedef struct rt_src rt_src;

/* A .safetensors file, a model.safetensors.index.json (shards opened when
 * first needed) or a GGUF file (told by its magic). */
RT_HIDDEN attn_status rt_src_open(const char *path, rt_src **out, attn_msg *m);
RT_HIDDEN void rt_src_close(rt_src *s);
RT_HIDDEN bool rt_path_is_gguf(const char *path);
RT_HIDDEN bool rt_src_is_gguf(const rt_src *s);
RT_HIDDEN const char *rt_src_path(const rt_src *s);
/* ATTN_OK and *t; ATTN_E_FORMAT without a message when there is no such
 * tensor; another status with a message when its shard cannot be read. */
RT_HIDDEN attn_status rt_src_find(rt_src *s, const char *name, rt_tensor *t, attn_msg *m);
/* Drops t's pages from memory once they have been copied. */
RT_HIDDEN void rt_src_release(const rt_tensor *t);
/* Where a tensor named local exists under another prefix: that prefix in
 * buf (one of the layer in prefix's first number, if any). */
RT_HIDDEN bool rt_src_suggest(const rt_src *s, const char *prefix, const char *local, char *buf,
                              size_t size);
RT_HIDDEN int rt_src_count(const rt_src *s);
RT_HIDDEN const char *rt_src_name(const rt_src *s, int i);

/* ---- weights (weights.c) ------------------------------------------------- */

/* The element type the kernels take weight id (attn_weight_id) in: the
 * config's dtype for the projection matrices, f32 for the rest. */
RT_HIDDEN attn_dtype rt_weight_dtype(const attn_config *c, int id);
/* Elements of weight id for c. */
RT_HIDDEN size_t rt_weight_numel(const attn_config *c, int id);
/* Fills dst (rt_weight_numel elements of rt_weight_dtype) with weight id
 * from checkpoint s under prefix, mapped from c's layout; values that the
 * dtype cannot hold are rounded to nearest even. check_finite: refuse NaN
 * and infinity. */
RT_HIDDEN attn_status rt_weight_gather(rt_src *s, const attn_config *c, const char *prefix, int id,
                                       bool check_finite, void *dst, attn_msg *m);
/* The same from f32 weights w, for config c: w's own, or (c a shard)
 * the whole block's, sliced; ATTN_E_FORMAT for a value a block format
 * cannot take (NaN, infinity, or a block scale beyond f16). */
RT_HIDDEN attn_status rt_weight_from(const attn_weights *w, const attn_config *c, int id, void *dst,
                                     attn_msg *m);
/* The whole block a shard config c belongs to (c itself if whole). */
RT_HIDDEN attn_config rt_config_whole(const attn_config *c);

#endif
