/* cache.c: the paged KV cache and the forward that runs a block over it.
 * The cache owns a pool of blocks (block_tokens rows of K and of V each)
 * with reference counts, a block table per sequence, and the scratch of
 * its forwards. A forward checks everything first, then reserves blocks
 * (copying a shared partial block on write), then runs the kernel table:
 * token-phase steps once over the whole batch, a barrier after each; the
 * sequence-phase steps of one schedule (schedule()): a sequence with more
 * than a thread's share of the work by every thread, a barrier after each
 * step, then the others whole on one thread each, balanced by their cost,
 * with one barrier at the end. Where the kernels take shared-prefix calls
 * (attn_kernels.h), sequences of the batch holding the same first blocks
 * attend to them together first (group()).
 *
 * A cross-attention block's sequences hold their memory's K/V instead:
 * attn_seq_set_memory runs the memory-phase steps once over its rows
 * into the sequence's blocks, and forwards read them (n_past = the
 * memory rows) without appending; len then only counts tokens. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_expr.h"
#include "block.h"
#include "prefix.h"

/* A sequence of a batch and the cost of its attention (schedule()). */
typedef struct sched_item {
    double cost;
    int32_t q;
} sched_item;

/* A token input of a sequence: values by position, 0 where none is set
 * (attn_token_input, bound as the kernels read it: view.n = positions
 * covered); a sequence input: value (bound by its address), view.n 1
 * once set. */
typedef struct seq_input {
    int32_t *v;   /* owned [cap] */
    uint8_t *set; /* owned [cap]: 1 where a value was set */
    int64_t cap;
    attn_token_input view;
    int32_t value; /* a sequence input's */
} seq_input;

typedef struct seq {
    bool live;
    seq_input in[ATTN_EXPR_MAX_INPUTS];
    int64_t len;
    int64_t released; /* leading logical blocks given back (sliding window) */
    int64_t mem;      /* cross-attention: memory rows in the blocks, 0 = none yet */
    int32_t *table;   /* owned: [max_blocks] physical block per logical block, -1 none */
    /* a draft tree (attn_forward_tree) awaiting attn_seq_accept: its
     * tokens' K/V in rows len..len+draft-1, their parents (-1: a root) */
    int32_t draft;
    int8_t parent[ATTN_TREE_MAX];
} seq;

struct attn_cache {
    attn_block *b; /* borrowed */
    attn_config cfg;
    attn_inputs inputs;  /* the config's: the expressions read each one */
    int64_t bt;          /* tokens per block */
    int64_t n_blocks;    /* in the pool */
    int64_t max_blocks;  /* per sequence: ceil(max_tokens / bt) */
    size_t row_bytes[2]; /* one token's K and V: attn_cache_columns * dtype */
    void *k, *v;         /* owned pools [n_blocks * bt rows] */
    int32_t *refs;       /* owned [n_blocks] */
    int32_t *free_list;  /* owned stack of free blocks */
    int64_t n_free;
    prefix_index pub; /* published blocks (attn_cache_publish); empty until the first */
    seq *seqs;        /* owned, n_seqs slots (dead ones reused) */
    int32_t n_seqs;
    /* forward scratch, grown to the largest batch so far */
    void *scratch;
    size_t scratch_bytes;
    int64_t *pos, *slot; /* [cap_tokens] */
    int64_t cap_tokens;
    attn_kernel_args *args; /* [cap_batch + 1]: per sequence, then the batch */
    int cap_batch;
    /* the sequence phase's schedule (schedule()): order[0..n_team) the
     * sequences every thread runs, then order[n_team..n_run) those run
     * whole by thread owner[k] alone (its scratch: solo_bytes each) */
    int32_t *order, *owner; /* [cap_batch] */
    sched_item *items;      /* [cap_batch] */
    double *load;           /* [cap_threads] */
    int n_team, n_run, cap_threads;
    size_t solo_bytes[ATTN_MAX_BUFFERS];
    /* shared-prefix calls (group()): the table's ATTN_BUF_CASCADE buffer
     * (-1: none, or ATTN_CASCADE=0); this forward's prefix calls, each
     * over the batch's sequences first[k]..end[k]-1 and keys[k] keys;
     * each sequence's keys a prefix call covers (0: none) */
    int cascade;
    int n_pre;
    attn_kernel_args *pre;        /* [cap_batch] */
    int32_t *pre_first, *pre_end; /* [cap_batch] */
    int64_t *pre_keys, *shared;   /* [cap_batch] */
    uint64_t tree[ATTN_TREE_MAX]; /* a tree forward's attn_kernel_args.tree */
    double *step_seconds;         /* owned [n_steps] while profiling, else NULL */
    attn_msg error;               /* the last failure */
};

attn_status attn_cache_profile(attn_cache *c, bool on) {
    if (!c)
        return ATTN_E_INVALID;
    free(c->step_seconds);
    c->step_seconds = NULL;
    if (on && !(c->step_seconds = calloc(c->b->k->n_steps + 1, sizeof *c->step_seconds)))
        return rt_fail(&c->error, ATTN_E_NOMEM, "out of memory for step times");
    return ATTN_OK;
}

const double *attn_cache_step_seconds(const attn_cache *c, uint32_t *n) {
    if (n)
        *n = c && c->step_seconds ? c->b->k->n_steps : 0;
    return c ? c->step_seconds : NULL;
}

/* Runs step i on thread ith of nth, then waits for all; thread 0 adds the
 * time to the profile. */
static void run_step(attn_cache *c, uint32_t i, const attn_kernel_args *a, uint32_t ith,
                     uint32_t nth) {
    double t0 = c->step_seconds && ith == 0 ? omp_get_wtime() : 0;
    c->b->k->steps[i].fn(a, ith, nth);
#pragma omp barrier
    if (c->step_seconds && ith == 0)
        c->step_seconds[i] += omp_get_wtime() - t0;
}

const char *attn_cache_error(const attn_cache *c) {
    return c ? c->error.text : "no cache";
}

attn_status attn_cache_new(attn_block *b, int64_t capacity_tokens, attn_cache **out) {
    if (!b || !out || capacity_tokens < 1 || capacity_tokens > (INT64_C(1) << 40))
        return ATTN_E_INVALID;
    attn_cache *c = calloc(1, sizeof *c);
    if (!c)
        return ATTN_E_NOMEM;
    c->b = b;
    c->cfg = b->cfg;
    c->bt = c->cfg.kv_block_tokens;
    c->n_blocks = (capacity_tokens + c->bt - 1) / c->bt;
    c->max_blocks = (c->cfg.kv_max_tokens + c->bt - 1) / c->bt;
    /* q8_0: a block is its bt * kvd int8 values, then their f16 scales
     * (codegen cg_cache_scale), 34 bytes per 32 values either way */
    for (int i = 0; i < 2; i++)
        c->row_bytes[i] = attn_dtype_bytes(c->cfg.kv_dtype, attn_cache_columns(&c->cfg, i));
    size_t pool = (size_t)(c->n_blocks * c->bt) * c->row_bytes[0];
    if (c->n_blocks > INT32_MAX || pool / c->row_bytes[0] / (size_t)c->bt != (size_t)c->n_blocks) {
        free(c);
        return ATTN_E_INVALID;
    }
    c->k = rt_alloc_large(pool);
    /* MLA has no V pool: a byte keeps the pointer non-NULL */
    c->v = rt_alloc_large(c->row_bytes[1] ? (size_t)(c->n_blocks * c->bt) * c->row_bytes[1] : 1);
    c->refs = calloc((size_t)c->n_blocks, sizeof *c->refs);
    c->free_list = malloc((size_t)c->n_blocks * sizeof *c->free_list);
    if (!c->k || !c->v || !c->refs || !c->free_list) {
        attn_cache_free(c);
        return ATTN_E_NOMEM;
    }
    for (int64_t i = 0; i < c->n_blocks; i++) /* hand out low blocks first */
        c->free_list[i] = (int32_t)(c->n_blocks - 1 - i);
    c->n_free = c->n_blocks;
    c->pub = (prefix_index){.head = -1, .tail = -1};
    attn_inputs_parse(c->cfg.inputs, &c->inputs, NULL); /* the block's config was checked */
    c->cascade = -1;
    const char *cascade = getenv("ATTN_CASCADE"); /* "0": every sequence reads its own keys */
    for (uint32_t i = 0; i < b->k->n_buffers && !(cascade && strcmp(cascade, "0") == 0); i++)
        if (b->k->buffers[i].role == ATTN_BUF_CASCADE)
            c->cascade = (int)i;
    *out = c;
    return ATTN_OK;
}

/* Releases s's input values. */
static void drop_inputs(seq *s) {
    for (int i = 0; i < ATTN_EXPR_MAX_INPUTS; i++) {
        free(s->in[i].v);
        free(s->in[i].set);
        s->in[i] = (seq_input){0};
    }
}

void attn_cache_free(attn_cache *c) {
    if (!c)
        return;
    for (int32_t i = 0; i < c->n_seqs; i++) {
        rt_free_large(c->seqs[i].table);
        drop_inputs(&c->seqs[i]);
    }
    free(c->seqs);
    rt_free_large(c->k);
    rt_free_large(c->v);
    free(c->refs);
    free(c->free_list);
    prefix_fini(&c->pub);
    rt_free_large(c->scratch);
    free(c->pos);
    free(c->slot);
    free(c->args);
    free(c->order);
    free(c->owner);
    free(c->items);
    free(c->pre);
    free(c->pre_first);
    free(c->pre_end);
    free(c->pre_keys);
    free(c->shared);
    free(c->load);
    free(c->step_seconds);
    free(c);
}

attn_cache_stats attn_cache_get_stats(const attn_cache *c) {
    attn_cache_stats st = {0};
    if (!c)
        return st;
    st.blocks_total = c->n_blocks;
    st.blocks_free = c->n_free + c->pub.idle;
    st.blocks_used = c->n_blocks - st.blocks_free;
    st.block_tokens = c->bt;
    st.published_blocks = c->pub.published;
    st.evicted_blocks = c->pub.evicted;
    for (int32_t i = 0; i < c->n_seqs; i++)
        st.sequences += c->seqs[i].live;
    return st;
}

static seq *find(const attn_cache *c, int32_t id) {
    return c && id >= 0 && id < c->n_seqs && c->seqs[id].live ? &c->seqs[id] : NULL;
}

int64_t attn_seq_len(const attn_cache *c, int32_t id) {
    const seq *s = find(c, id);
    return s ? s->len : -1;
}

/* Rows the sequence's blocks hold, which are also the keys before its
 * new tokens: its tokens' K/V, or (cross-attention) its memory's. */
static int64_t held(const attn_cache *c, const seq *s) {
    return c->cfg.memory_dim > 0 ? s->mem : s->len;
}

/* Blocks a sequence may take: the free ones, then the published ones no
 * sequence holds, least recently used first. */
static int64_t available(const attn_cache *c) {
    return c->n_free + c->pub.idle;
}

/* Rows the sequence's blocks hold: held() and its draft tokens. */
static int64_t rows(const attn_cache *c, const seq *s) {
    return held(c, s) + s->draft;
}

/* Callers have checked available() (attn_forward counts blocks first). */
static int32_t take_block(attn_cache *c) {
    int32_t blk = c->n_free > 0 ? c->free_list[--c->n_free] : prefix_evict(&c->pub);
    c->refs[blk] = 1;
    return blk;
}

static void put_block(attn_cache *c, int32_t blk) {
    if (blk < 0 || --c->refs[blk] > 0)
        return;
    if (prefix_has(&c->pub, blk))
        prefix_rest(&c->pub, blk); /* kept until a block is needed */
    else
        c->free_list[c->n_free++] = blk;
}

/* Whether appending to blk must copy it first: another sequence holds it,
 * or it is published (its key names the content it has now). */
static bool is_shared(const attn_cache *c, int32_t blk) {
    return c->refs[blk] > 1 || prefix_has(&c->pub, blk);
}

/* The cache row (block * block_tokens + offset) of s's token p. */
static int64_t cache_row(const attn_cache *c, const seq *s, int64_t p) {
    return (int64_t)s->table[p / c->bt] * c->bt + p % c->bt;
}

/* Logical blocks holding tokens [0, n). */
static int64_t blocks_for(const attn_cache *c, int64_t n) {
    return (n + c->bt - 1) / c->bt;
}

/* Gives back logical blocks [from, to) of s, the last first: published
 * ones become idle in that order, so a chain's tail is evicted before
 * the blocks it follows. */
static void release(attn_cache *c, seq *s, int64_t from, int64_t to) {
    for (int64_t i = to - 1; i >= from; i--) {
        put_block(c, s->table[i]);
        s->table[i] = -1;
    }
}

/* A fresh slot for a sequence (reusing a dead one); NULL when out of memory. */
static seq *new_slot(attn_cache *c, int32_t *id) {
    int32_t i = 0;
    while (i < c->n_seqs && c->seqs[i].live)
        i++;
    if (i == c->n_seqs) {
        if (c->n_seqs == INT32_MAX)
            return NULL;
        seq *grown = realloc(c->seqs, ((size_t)c->n_seqs + 1) * sizeof *grown);
        if (!grown)
            return NULL;
        c->seqs = grown;
        c->seqs[c->n_seqs++] = (seq){0};
    }
    seq *s = &c->seqs[i];
    if (!s->table && !(s->table = rt_alloc_large((size_t)c->max_blocks * sizeof *s->table)))
        return NULL;
    for (int64_t b = 0; b < c->max_blocks; b++)
        s->table[b] = -1;
    s->len = s->released = s->mem = 0;
    s->draft = 0;
    *id = i;
    return s;
}

attn_status attn_seq_new(attn_cache *c, int32_t *id) {
    if (!c || !id)
        return ATTN_E_INVALID;
    seq *s = new_slot(c, id);
    if (!s)
        return rt_fail(&c->error, ATTN_E_NOMEM, "out of memory for a sequence");
    s->live = true;
    return ATTN_OK;
}

attn_status attn_seq_fork(attn_cache *c, int32_t src, int32_t *dst) {
    if (!c || !dst || !find(c, src))
        return c ? rt_fail(&c->error, ATTN_E_INVALID, "fork: unknown sequence %d", src)
                 : ATTN_E_INVALID;
    if (c->seqs[src].draft > 0)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "fork: sequence %d has %d draft tokens; attn_seq_accept them (or none) "
                       "first",
                       src, c->seqs[src].draft);
    int32_t id;
    seq *d = new_slot(c, &id);
    if (!d)
        return rt_fail(&c->error, ATTN_E_NOMEM, "out of memory for a sequence");
    const seq *s = &c->seqs[src]; /* after new_slot: the array may have moved */
    for (int i = 0; i < c->inputs.n; i++) {
        const seq_input *from = &s->in[i];
        seq_input *to = &d->in[i];
        *to = (seq_input){.cap = from->cap, .view.n = from->view.n, .value = from->value};
        if (from->cap && (!(to->v = malloc((size_t)from->cap * sizeof *to->v)) ||
                          !(to->set = malloc((size_t)from->cap)))) {
            drop_inputs(d);
            return rt_fail(&c->error, ATTN_E_NOMEM, "fork: out of memory for its inputs");
        }
        if (from->cap) {
            memcpy(to->v, from->v, (size_t)from->cap * sizeof *to->v);
            memcpy(to->set, from->set, (size_t)from->cap);
        }
        to->view.v = to->v;
    }
    memcpy(d->table, s->table, (size_t)c->max_blocks * sizeof *d->table);
    for (int64_t b = 0; b < blocks_for(c, held(c, s)); b++)
        if (d->table[b] >= 0)
            c->refs[d->table[b]]++;
    d->len = s->len;
    d->released = s->released;
    d->mem = s->mem; /* the memory's blocks are shared, never written again */
    d->live = true;
    *dst = id;
    return ATTN_OK;
}

/* s's token input values at positions n and past dropped. */
static void truncate_inputs(attn_cache *c, seq *s, int64_t n) {
    for (int i = 0; i < c->inputs.n; i++) {
        seq_input *x = &s->in[i];
        if (c->inputs.in[i].per != ATTN_INPUT_TOKEN || x->view.n <= n)
            continue;
        memset(x->v + n, 0, (size_t)(x->view.n - n) * sizeof *x->v);
        memset(x->set + n, 0, (size_t)(x->view.n - n));
        x->view.n = n;
    }
}

attn_status attn_seq_set_input(attn_cache *c, int32_t id, const char *name, int64_t first,
                               int64_t n, const int32_t *values) {
    if (!c)
        return ATTN_E_INVALID;
    c->error.text[0] = 0;
    seq *s = find(c, id);
    if (!s)
        return rt_fail(&c->error, ATTN_E_INVALID, "set_input: unknown sequence %d", id);
    int k = name ? attn_inputs_find(&c->inputs, name) : -1;
    if (k < 0) {
        char list[ATTN_EXPR_TEXT_MAX] = "";
        for (int i = 0; i < c->inputs.n; i++)
            if (c->inputs.in[i].per != ATTN_INPUT_WEIGHT)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         list[0] ? ", " : "", c->inputs.name[i]);
        return rt_fail(&c->error, ATTN_E_INVALID, "set_input: block '%s' has no input '%s'%s%s",
                       c->cfg.name, name ? name : "(null)",
                       list[0] ? "; its inputs: " : " (its spec declares none)", list);
    }
    attn_input_per per = c->inputs.in[k].per;
    seq_input *x = &s->in[k];
    if (per == ATTN_INPUT_WEIGHT)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "set_input: '%s' is a weight input: it is loaded with the block's weights",
                       name);
    if (n > 0 && !values)
        return rt_fail(&c->error, ATTN_E_INVALID, "set_input: values is NULL");
    if (per == ATTN_INPUT_SEQUENCE) {
        if (first != 0 || n != 1)
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "set_input: '%s' is one value per sequence: first 0 and n 1, not "
                           "first %lld and n %lld",
                           name, (long long)first, (long long)n);
        x->value = values[0];
        x->view.n = 1; /* set */
        return ATTN_OK;
    }
    if (first < 0 || n < 0 || n > c->cfg.kv_max_tokens || first > c->cfg.kv_max_tokens - n)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "set_input: positions %lld..%lld of '%s' are not in 0..%lld "
                       "(kv_cache.max_tokens)",
                       (long long)first, (long long)(first + n - 1), name,
                       (long long)(c->cfg.kv_max_tokens - 1));
    int64_t end = first + n;
    if (end > x->cap) { /* grown geometrically, zeroed */
        int64_t cap = x->cap * 2 > end ? x->cap * 2 : end;
        cap = cap < c->cfg.kv_max_tokens ? cap : c->cfg.kv_max_tokens;
        int32_t *v = realloc(x->v, (size_t)cap * sizeof *v);
        if (v)
            x->v = v, x->view.v = v;
        uint8_t *set = v ? realloc(x->set, (size_t)cap) : NULL;
        if (!set)
            return rt_fail(&c->error, ATTN_E_NOMEM, "set_input: out of memory for %lld values",
                           (long long)cap);
        x->set = set;
        memset(x->v + x->cap, 0, (size_t)(cap - x->cap) * sizeof *x->v);
        memset(x->set + x->cap, 0, (size_t)(cap - x->cap));
        x->cap = cap;
    }
    if (n > 0) {
        memcpy(x->v + first, values, (size_t)n * sizeof *values);
        memset(x->set + first, 1, (size_t)n);
    }
    x->view.n = end > x->view.n ? end : x->view.n;
    return ATTN_OK;
}

/* ATTN_E_INVALID where a call of n new tokens of sequence id lacks a value
 * of an input (the expressions read every one). */
static attn_status check_inputs(attn_cache *c, int32_t id, int64_t n) {
    const seq *s = &c->seqs[id];
    for (int i = 0; i < c->inputs.n && n > 0; i++) {
        const seq_input *x = &s->in[i];
        const char *name = c->inputs.name[i];
        if (c->inputs.in[i].per == ATTN_INPUT_SEQUENCE && x->view.n == 0)
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "sequence %d has no value of input '%s' (attn_seq_set_input)", id, name);
        if (c->inputs.in[i].per != ATTN_INPUT_TOKEN)
            continue;
        int64_t p = s->len, end = s->len + n;
        while (p < end && p < x->view.n && x->set[p])
            p++;
        if (p < end) {
            int64_t q = p; /* the first run of positions without one */
            while (q + 1 < end && !(q + 1 < x->view.n && x->set[q + 1]))
                q++;
            char where[64];
            if (q > p)
                snprintf(where, sizeof where, "positions %lld..%lld", (long long)p, (long long)q);
            else
                snprintf(where, sizeof where, "position %lld", (long long)p);
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "sequence %d has no value of input '%s' at %s (its new tokens are "
                           "%lld..%lld; attn_seq_set_input)",
                           id, name, where, (long long)s->len, (long long)(end - 1));
        }
    }
    return ATTN_OK;
}

attn_status attn_seq_truncate(attn_cache *c, int32_t id, int64_t n_tokens) {
    seq *s = find(c, id);
    if (!s)
        return c ? rt_fail(&c->error, ATTN_E_INVALID, "truncate: unknown sequence %d", id)
                 : ATTN_E_INVALID;
    if (n_tokens < 0 || n_tokens > s->len)
        return rt_fail(&c->error, ATTN_E_INVALID, "truncate: %lld is not in 0..%lld",
                       (long long)n_tokens, (long long)s->len);
    if (c->cfg.memory_dim > 0) { /* the memory stays: tokens have no K/V here */
        truncate_inputs(c, s, n_tokens);
        s->len = n_tokens;
        return ATTN_OK;
    }
    int64_t first = attn_first_key(&c->cfg, n_tokens);
    if (s->released > 0 && first < s->released * c->bt)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "truncate: position %lld needs keys from %lld on, but the %s "
                       "released tokens below %lld",
                       (long long)n_tokens, (long long)first,
                       c->cfg.sliding_window > 0 ? "sliding window" : "attention chunk",
                       (long long)(s->released * c->bt));
    release(c, s, blocks_for(c, n_tokens), blocks_for(c, rows(c, s)));
    truncate_inputs(c, s, n_tokens);
    s->len = n_tokens;
    s->draft = 0; /* a draft tree goes too */
    return ATTN_OK;
}

attn_status attn_seq_free(attn_cache *c, int32_t id) {
    seq *s = find(c, id);
    if (!s)
        return c ? rt_fail(&c->error, ATTN_E_INVALID, "free: unknown sequence %d", id)
                 : ATTN_E_INVALID;
    release(c, s, 0, blocks_for(c, rows(c, s)));
    drop_inputs(s);
    s->live = false;
    s->draft = 0;
    s->len = s->mem = 0;
    return ATTN_OK;
}

/* ---- prefix cache ----------------------------------------------------------- */

/* The prefix cache needs a self-attention block: a cross-attention
 * sequence's blocks hold its memory, not its tokens. */
static attn_status refuse_cross(attn_cache *c, const char *what) {
    return rt_fail(&c->error, ATTN_E_INVALID,
                   "%s: block '%s' is cross-attention; its blocks hold a memory, not tokens, "
                   "and have no prefix to share",
                   what, c->cfg.name);
}

attn_status attn_cache_publish(attn_cache *c, int32_t id, int64_t n_blocks, const uint64_t *keys) {
    if (!c)
        return ATTN_E_INVALID;
    c->error.text[0] = 0;
    seq *s = find(c, id);
    if (c->cfg.memory_dim > 0)
        return refuse_cross(c, "publish");
    if (!s)
        return rt_fail(&c->error, ATTN_E_INVALID, "publish: unknown sequence %d", id);
    if (n_blocks < 0 || (n_blocks > 0 && !keys))
        return rt_fail(&c->error, ATTN_E_INVALID, "publish: %lld keys%s", (long long)n_blocks,
                       n_blocks < 0 ? " is negative" : " but keys is NULL");
    if (n_blocks > s->len / c->bt)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "publish: a chain of %lld keys is longer than sequence %d's %lld full "
                       "blocks (%lld tokens, %lld per block)",
                       (long long)n_blocks, id, (long long)(s->len / c->bt), (long long)s->len,
                       (long long)c->bt);
    for (int64_t i = 0; i < n_blocks; i++) {
        int32_t blk = s->table[i];
        if (blk < 0)
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "publish: block %lld of sequence %d was released (its tokens are "
                           "behind the %s)",
                           (long long)i, id,
                           c->cfg.sliding_window > 0 ? "sliding window" : "attention chunk");
        if (prefix_has(&c->pub, blk) && !prefix_known(&c->pub, keys[i]))
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "publish: block %lld of sequence %d is published already, under key "
                           "%#llx, not %#llx",
                           (long long)i, id, (unsigned long long)c->pub.key[blk],
                           (unsigned long long)keys[i]);
    }
    if (n_blocks > 0 && !c->pub.slots && !prefix_init(&c->pub, c->n_blocks))
        return rt_fail(&c->error, ATTN_E_NOMEM, "publish: out of memory for the prefix index");
    for (int64_t i = 0; i < n_blocks; i++)
        if (!prefix_known(&c->pub, keys[i]) && !prefix_has(&c->pub, s->table[i]))
            prefix_add(&c->pub, keys[i], i, s->table[i]);
    return ATTN_OK;
}

attn_status attn_seq_from_prefix(attn_cache *c, int64_t n_keys, const uint64_t *keys, int32_t *id,
                                 int64_t *n_tokens) {
    if (!c)
        return ATTN_E_INVALID;
    c->error.text[0] = 0;
    if (c->cfg.memory_dim > 0)
        return refuse_cross(c, "from_prefix");
    if (n_keys < 0 || (n_keys > 0 && !keys) || !id || !n_tokens)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "from_prefix: needs n_keys >= 0, its keys, and where to put the "
                       "sequence and its length");
    seq *s = new_slot(c, id);
    if (!s)
        return rt_fail(&c->error, ATTN_E_NOMEM, "out of memory for a sequence");
    int64_t n = 0;
    while (n < n_keys && n < c->max_blocks) { /* the longest chain published */
        int32_t blk = prefix_find(&c->pub, keys[n], n);
        if (blk < 0)
            break;
        if (c->refs[blk]++ == 0)
            prefix_wake(&c->pub, blk); /* idle no more */
        s->table[n++] = blk;
    }
    s->len = n * c->bt;
    s->live = true;
    *n_tokens = s->len;
    return ATTN_OK;
}

/* ---- forward ---------------------------------------------------------------- */

/* Keys a sequence-phase buffer holds: from the first one any new query of
 * the sequence can see (as the kernels' cg_first_key) to the last. */
static int64_t visible_keys(const attn_cache *c, int64_t P, int64_t S) {
    if (c->cfg.memory_dim > 0) /* the memory rows */
        return P;
    return P + S - attn_first_key(&c->cfg, P);
}

static size_t buf_bytes(const attn_buffer_desc *d, int64_t S, int64_t T) {
    return ((size_t)(d->c + d->s * S + d->t * T + d->st * S * T) * sizeof(float) + 63) &
           ~(size_t)63;
}

/* Grows the per-forward arrays and scratch; nothing else changes. */
static attn_status reserve(attn_cache *c, int n, int64_t total, size_t scratch) {
    if (total > c->cap_tokens) {
        int64_t *p = realloc(c->pos, (size_t)total * sizeof *p);
        if (p)
            c->pos = p;
        int64_t *q = p ? realloc(c->slot, (size_t)total * sizeof *q) : NULL;
        if (!q)
            return rt_fail(&c->error, ATTN_E_NOMEM, "out of memory for %lld tokens",
                           (long long)total);
        c->slot = q;
        c->cap_tokens = total;
    }
    if (n > c->cap_batch) {
        /* each array kept as it was where its realloc fails */
#define GROW(p, count)                                                                             \
    do {                                                                                           \
        void *grown = realloc((p), (size_t)(count) * sizeof *(p));                                 \
        if (!grown)                                                                                \
            return rt_fail(&c->error, ATTN_E_NOMEM, "out of memory for a batch of %d", n);         \
        (p) = grown;                                                                               \
    } while (0)
        GROW(c->args, n + 1);
        GROW(c->order, n);
        GROW(c->owner, n);
        GROW(c->items, n);
        GROW(c->pre, n);
        GROW(c->pre_first, n);
        GROW(c->pre_end, n);
        GROW(c->pre_keys, n);
        GROW(c->shared, n);
#undef GROW
        c->cap_batch = n;
    }
    if (c->b->n_threads > c->cap_threads) {
        double *l = realloc(c->load, (size_t)c->b->n_threads * sizeof *l);
        if (!l)
            return rt_fail(&c->error, ATTN_E_NOMEM, "out of memory for %d threads",
                           c->b->n_threads);
        c->load = l;
        c->cap_threads = c->b->n_threads;
    }
    if (scratch > c->scratch_bytes) {
        void *p = rt_alloc_large(scratch);
        if (!p)
            return rt_fail(&c->error, ATTN_E_NOMEM, "out of memory for %zu bytes of scratch",
                           scratch);
        rt_free_large(c->scratch);
        c->scratch = p;
        c->scratch_bytes = scratch;
    }
    return ATTN_OK;
}

/* Blocks sequence s needs to take n more tokens: new logical blocks, plus
 * one if its last partial block is shared (it gets copied). */
static int64_t blocks_needed(const attn_cache *c, const seq *s, int64_t n) {
    if (n == 0 || c->cfg.memory_dim > 0)
        return 0;
    int64_t more = blocks_for(c, s->len + n) - blocks_for(c, s->len);
    if (s->len % c->bt && is_shared(c, s->table[s->len / c->bt]))
        more++;
    return more;
}

/* Makes room for n tokens in s and writes their positions and cache rows. */
static void place(attn_cache *c, seq *s, int64_t n, int64_t *pos, int64_t *slot) {
    if (n == 0)
        return;
    if (c->cfg.memory_dim > 0) { /* nothing is appended */
        for (int64_t t = 0; t < n; t++)
            pos[t] = s->len + t, slot[t] = -1;
        return;
    }
    int64_t last = s->len / c->bt;
    if (s->len % c->bt && is_shared(c, s->table[last])) { /* copy on write */
        int32_t old = s->table[last], fresh = take_block(c);
        /* V's first rows; K's tokens are spread over the block (a column's
         * tokens side by side: attn_kernels.h), so all of it */
        size_t kb = (size_t)c->bt * c->row_bytes[0], vb = (size_t)c->bt * c->row_bytes[1];
        size_t bytes = (size_t)(s->len % c->bt) * c->row_bytes[1];
        if (attn_dtype_block(c->cfg.kv_dtype) > 1) /* V's scales follow all its rows */
            bytes = vb;
        memcpy((char *)c->k + (size_t)fresh * kb, (char *)c->k + (size_t)old * kb, kb);
        memcpy((char *)c->v + (size_t)fresh * vb, (char *)c->v + (size_t)old * vb, bytes);
        put_block(c, old);
        s->table[last] = fresh;
    }
    for (int64_t b = blocks_for(c, s->len); b < blocks_for(c, s->len + n); b++)
        s->table[b] = take_block(c);
    for (int64_t t = 0; t < n; t++) {
        int64_t p = s->len + t;
        pos[t] = p;
        slot[t] = cache_row(c, s, p);
    }
}

/* Whether a sequence holding P tokens runs the steps of buffer d in a
 * call of S new tokens: all of them, but a buffer of prefills only
 * (prefill_min) in prefills of at least that many into no tokens. */
static bool runs(const attn_buffer_desc *d, int64_t S, int64_t P) {
    return d->prefill_min <= 0 || (S >= d->prefill_min && P == 0);
}

/* What one sequence's attention costs: its rows times the keys they see
 * (but the `shared` keys a prefix call covers). */
static double seq_cost(const attn_cache *c, int64_t P, int64_t S, int64_t shared) {
    return (double)S * (double)(visible_keys(c, P, S) - shared);
}

/* Keys a prefix call covers at least: a shorter prefix costs its rows
 * more in barriers than they save in reads. */
enum { CASCADE_MIN_KEYS = 64 };

/* Whether batch entry q may join a prefix call: 1 to `most` new tokens
 * (ATTN_BUF_CASCADE's weight), CASCADE_MIN_KEYS keys held in whole
 * blocks. */
static bool may_share(const attn_cache *c, const int32_t *seqs, const int32_t *n_tokens, int q) {
    int64_t most = c->b->k->buffers[c->cascade].weight, h = held(c, &c->seqs[seqs[q]]);
    return n_tokens[q] >= 1 && n_tokens[q] <= most && h / c->bt * c->bt >= CASCADE_MIN_KEYS;
}

/* The shared-prefix calls of a batch (attn_kernels.h): runs of
 * consecutive sequences of the batch whose block tables begin with the
 * same full blocks, CASCADE_MIN_KEYS keys or more, each sequence taking
 * 1 to `most` new tokens (its own call's split path) and the run at
 * most `run_most` in all (ATTN_BUF_CASCADE). A run of two or more makes
 * a prefix call over the blocks all of it shares; a sequence sharing
 * fewer with the run than the run's first two share starts the next
 * one. Depends on the batch alone: never on the thread count. */
static void group(attn_cache *c, int n, const int32_t *seqs, const int32_t *n_tokens) {
    c->n_pre = 0;
    for (int q = 0; q < n; q++)
        c->shared[q] = 0;
    if (c->cascade < 0)
        return;
    const attn_buffer_desc *d = &c->b->k->buffers[c->cascade];
    int64_t run_most = d->prefill_min > 0 ? d->prefill_min : INT64_MAX;
    for (int q = 0, end; q < n; q = end) {
        end = q + 1;
        if (!may_share(c, seqs, n_tokens, q))
            continue;
        const seq *a = &c->seqs[seqs[q]];
        int64_t blocks = held(c, a) / c->bt, tokens = n_tokens[q];
        for (; end < n && may_share(c, seqs, n_tokens, end) && tokens + n_tokens[end] <= run_most;
             end++) {
            const seq *s = &c->seqs[seqs[end]];
            int64_t common = 0, full = held(c, s) / c->bt;
            while (common < blocks && common < full && s->table[common] == a->table[common])
                common++;
            if (common * c->bt < CASCADE_MIN_KEYS || (end > q + 1 && common < blocks))
                break;
            blocks = common;
            tokens += n_tokens[end];
        }
        if (end - q < 2)
            continue;
        c->pre_first[c->n_pre] = q;
        c->pre_end[c->n_pre] = end;
        c->pre_keys[c->n_pre++] = blocks * c->bt;
        for (int i = q; i < end; i++)
            c->shared[i] = blocks * c->bt;
    }
}

/* The order in which attn_forward runs a batch so that group() finds its
 * shared prefixes: each entry that may share followed by the later ones
 * that may whose first block is its first block (forks of one sequence),
 * the rest in the caller's order. Fills order and says whether it
 * differs from the caller's. */
static bool sharers_together(const attn_cache *c, int n, const int32_t *seqs,
                             const int32_t *n_tokens, int *order, bool *placed) {
    bool moved = false;
    int at = 0;
    for (int q = 0; q < n; q++)
        placed[q] = false;
    for (int q = 0; q < n; q++) {
        if (placed[q])
            continue;
        placed[q] = true;
        order[at++] = q;
        if (!may_share(c, seqs, n_tokens, q))
            continue;
        const seq *a = &c->seqs[seqs[q]];
        for (int r = q + 1; r < n; r++) {
            const seq *s = &c->seqs[seqs[r]];
            if (!placed[r] && may_share(c, seqs, n_tokens, r) && s->table[0] == a->table[0]) {
                placed[r] = true;
                moved = moved || r != at;
                order[at++] = r;
            }
        }
    }
    return moved;
}

/* The sequence phase of a batch on T threads, without a barrier between
 * sequences where it can: a sequence costing more than a thread's share
 * of the batch runs on every thread (its steps split among them, a
 * barrier after each), as a batch of one does; the others run whole, each
 * on one thread, the costliest first onto the least loaded one (longest
 * processing time first), each thread its own copy of their per-sequence
 * scratch (solo_bytes). One thread keeps every sequence on the team.
 * The results are the same either way: a kernel's output does not depend
 * on its thread count. */
static int costlier_first(const void *a, const void *b) {
    const sched_item *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost < y->cost ? 1 : -1;
    return (x->q > y->q) - (x->q < y->q); /* ties in batch order */
}

static void schedule(attn_cache *c, int n, const int32_t *seqs, const int32_t *n_tokens, int T) {
    const attn_kernels *k = c->b->k;
    sched_item *it = c->items;
    double total = 0;
    for (int q = 0; q < n; q++) {
        it[q] = (sched_item){seq_cost(c, held(c, &c->seqs[seqs[q]]), n_tokens[q], c->shared[q]), q};
        total += it[q].cost;
    }
    int nt = 0, ns = 0; /* it[0..ns): the solo sequences, gathered in place */
    for (int q = 0; q < n; q++) {
        if (n_tokens[q] == 0)
            continue;
        if (T > 1 && it[q].cost * T <= total)
            it[ns++] = it[q];
        else
            c->order[nt++] = q;
    }
    qsort(it, (size_t)ns, sizeof *it, costlier_first);
    c->n_team = nt, c->n_run = nt + ns;
    for (int t = 0; t < T; t++)
        c->load[t] = 0;
    for (int i = 0; i < ns; i++) {
        int least = 0;
        for (int t = 1; t < T; t++)
            least = c->load[t] < c->load[least] ? t : least;
        c->order[nt + i] = it[i].q;
        c->owner[nt + i] = least;
        c->load[least] += it[i].cost;
    }
    for (uint32_t i = 0; i < k->n_buffers; i++) {
        const attn_buffer_desc *d = &k->buffers[i];
        c->solo_bytes[i] = 0;
        for (int j = nt; j < c->n_run && d->role == ATTN_BUF_SCRATCH && d->per_sequence; j++) {
            int q = c->order[j];
            int64_t S = n_tokens[q], P = held(c, &c->seqs[seqs[q]]);
            size_t sz = runs(d, S, P) ? buf_bytes(d, S, visible_keys(c, P, S)) : 0;
            c->solo_bytes[i] = sz > c->solo_bytes[i] ? sz : c->solo_bytes[i];
        }
    }
}

/* Scratch bytes[i] of each buffer of a step over total rows: batch
 * buffers for all of them; per-sequence ones for the largest of the n
 * sequences, since sequences take their turns; a buffer of prefills only
 * (prefill_min) none unless one of the sequences holds no tokens and
 * prefills at least that many. Returns the sum. */
static size_t scratch_bytes(const attn_cache *c, int64_t total, int n, const int32_t *seqs,
                            const int32_t *n_tokens, size_t *bytes) {
    const attn_kernels *k = c->b->k;
    size_t sum = 0;
    for (uint32_t i = 0; i < k->n_buffers; i++) {
        const attn_buffer_desc *d = &k->buffers[i];
        bytes[i] = 0;
        if (d->role == ATTN_BUF_CASCADE) /* where this call makes prefix calls (group()) */
            bytes[i] = c->n_pre ? buf_bytes(d, total, 0) : 0;
        sum += bytes[i];
        if (d->role != ATTN_BUF_SCRATCH)
            continue;
        bool used = d->prefill_min <= 0;
        for (int q = 0; q < n && !used; q++)
            used = runs(d, n_tokens[q], held(c, &c->seqs[seqs[q]]));
        if (!used)
            continue;
        bytes[i] = d->per_sequence ? 0 : buf_bytes(d, total, 0);
        for (int q = 0; q < n && d->per_sequence; q++) {
            int64_t S = n_tokens[q], P = held(c, &c->seqs[seqs[q]]);
            if (!runs(d, S, P))
                continue; /* not this sequence's call */
            size_t sz = buf_bytes(d, S, visible_keys(c, P, S));
            bytes[i] = sz > bytes[i] ? sz : bytes[i];
        }
        sum += bytes[i];
    }
    return sum;
}

/* The args of a step over total rows: every buffer bound (scratch laid
 * out by bytes), positions and cache rows in c->pos and c->slot. */
static void bind(attn_cache *c, attn_kernel_args *a, int64_t total, const float *x, float *y,
                 const float *memory, const size_t *bytes) {
    const attn_kernels *k = c->b->k;
    *a = (attn_kernel_args){
        .abi_version = ATTN_KERNELS_ABI, .n_tokens = total, .pos = c->pos, .slot = c->slot};
    size_t at = 0;
    for (uint32_t i = 0; i < k->n_buffers; i++) {
        const attn_buffer_desc *d = &k->buffers[i];
        switch ((attn_buf_role)d->role) {
        case ATTN_BUF_INPUT: a->buf[i] = (void *)x; break;
        case ATTN_BUF_OUTPUT: a->buf[i] = y; break;
        case ATTN_BUF_WEIGHT: a->buf[i] = c->b->weight[d->weight]; break;
        case ATTN_BUF_MEMORY: a->buf[i] = (void *)memory; break;
        case ATTN_BUF_PACKED: a->buf[i] = c->b->packed[i]; break;
        case ATTN_BUF_CACHE_K: a->buf[i] = c->k; break;
        case ATTN_BUF_CACHE_V: a->buf[i] = c->v; break;
        case ATTN_BUF_SCRATCH: a->buf[i] = (char *)c->scratch + at; break;
        case ATTN_BUF_CASCADE: a->buf[i] = bytes[i] ? (char *)c->scratch + at : NULL; break;
        case ATTN_BUF_TOKEN_INPUT: /* a sequence's (run()) */
        case ATTN_BUF_SEQ_INPUT:
        case ATTN_BUF_ROLE_COUNT: a->buf[i] = NULL; break;
        }
        at += bytes[i];
    }
}

attn_status attn_seq_set_memory(attn_cache *c, int32_t id, int64_t n_rows, const float *memory) {
    if (!c)
        return ATTN_E_INVALID;
    c->error.text[0] = 0;
    const attn_config *cfg = &c->cfg;
    attn_block *b = c->b;
    seq *s = find(c, id);
    if (cfg->memory_dim == 0)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "set_memory: block '%s' is self-attention (its spec has no cross_attention)",
                       cfg->name);
    if (!s)
        return rt_fail(&c->error, ATTN_E_INVALID, "set_memory: unknown sequence %d", id);
    if (!b->loaded)
        return rt_fail(&c->error, ATTN_E_INVALID, "the block has no weights");
    if (n_rows < 1 || n_rows > cfg->kv_max_tokens)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "set_memory: %lld rows; a memory has 1 to kv_cache.max_tokens (%lld)",
                       (long long)n_rows, (long long)cfg->kv_max_tokens);
    if (!memory)
        return rt_fail(&c->error, ATTN_E_INVALID, "set_memory: memory is NULL");
    if (s->mem > 0 && s->len > 0)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "set_memory: sequence %d already attends to a memory of %lld rows over "
                       "%lld tokens; a memory can be replaced only before the first forward "
                       "(truncate the sequence to 0 tokens, or start a new one)",
                       id, (long long)s->mem, (long long)s->len);
    /* its old memory's blocks come back unless another sequence shares them */
    int64_t need = blocks_for(c, n_rows), back = 0;
    for (int64_t i = 0; i < blocks_for(c, s->mem); i++)
        back += c->refs[s->table[i]] == 1;
    if (need > available(c) + back)
        return rt_fail(&c->error, ATTN_E_CAPACITY,
                       "set_memory: %lld rows need %lld blocks, %lld are free", (long long)n_rows,
                       (long long)need, (long long)(available(c) + back));
    size_t bytes[ATTN_MAX_BUFFERS];
    attn_status st = reserve(c, 1, n_rows, scratch_bytes(c, n_rows, 0, NULL, NULL, bytes));
    if (st)
        return st;

    /* nothing can fail from here on */
    release(c, s, 0, blocks_for(c, s->mem));
    for (int64_t i = 0; i < need; i++)
        s->table[i] = take_block(c);
    for (int64_t t = 0; t < n_rows; t++) {
        c->pos[t] = t;
        c->slot[t] = cache_row(c, s, t);
    }
    attn_kernel_args *a = &c->args[0];
    bind(c, a, n_rows, NULL, NULL, memory, bytes);
    a->block_table = s->table;
    const attn_kernels *k = b->k;
#pragma omp parallel num_threads(b->n_threads)
    {
        uint32_t ith = (uint32_t)omp_get_thread_num(), nth = (uint32_t)omp_get_num_threads();
        for (uint32_t i = 0; i < k->n_steps; i++)
            if (k->steps[i].phase == ATTN_PHASE_MEMORY)
                run_step(c, i, a, ith, nth);
    }
    s->mem = n_rows;
    return ATTN_OK;
}

/* The checks every forward starts with. */
static attn_status check_call(attn_block *b, attn_cache *c) {
    if (!c)
        return ATTN_E_INVALID;
    c->error.text[0] = 0;
    if (!b || b != c->b)
        return rt_fail(&c->error, ATTN_E_INVALID, "the cache belongs to another block");
    if (!b->loaded)
        return rt_fail(&c->error, ATTN_E_INVALID, "the block has no weights");
    return ATTN_OK;
}

/* The forward of checked arguments (total tokens; a draft tree's depths,
 * or NULL): scratch, schedule, blocks, kernels. Fails only before any
 * sequence changed; advances no length. */
static attn_status run(attn_cache *c, int n, const int32_t *seqs, const int32_t *n_tokens,
                       int64_t total, const float *x, float *y, const int8_t *depth) {
    attn_block *b = c->b;
    const attn_kernels *k = b->k;
    attn_status st = reserve(c, n, total, 0); /* the schedule's arrays */
    if (st)
        return st;
    group(c, n, seqs, n_tokens);
    size_t bytes[ATTN_MAX_BUFFERS], shared = scratch_bytes(c, total, n, seqs, n_tokens, bytes);
    int T = b->n_threads;
    schedule(c, n, seqs, n_tokens, T);
    size_t solo = 0; /* each thread's copy of its solo sequences' scratch */
    for (uint32_t i = 0; i < k->n_buffers; i++)
        solo += c->solo_bytes[i];
    if ((st = reserve(c, n, total, shared + (size_t)T * solo)))
        return st;

    /* nothing can fail from here on */
    attn_kernel_args *batch = &c->args[n];
    bind(c, batch, total, x, y, NULL, bytes);
    int64_t row = 0;
    for (int q = 0; q < n; q++) {
        seq *s = &c->seqs[seqs[q]];
        c->args[q] = *batch;
        c->args[q].n_tokens = n_tokens[q];
        c->args[q].n_past = held(c, s);
        c->args[q].tok0 = row;
        c->args[q].block_table = s->table;
        place(c, s, n_tokens[q], c->pos + row, c->slot + row);
        for (int64_t t = 0; depth && t < n_tokens[q]; t++) /* RoPE at len + depth */
            c->pos[row + t] = s->len + depth[t];
        c->args[q].tree = depth ? c->tree : NULL;
        c->args[q].n_shared = c->shared[q];
        for (uint32_t i = 0; i < k->n_buffers; i++) { /* the expressions' inputs: its own */
            const attn_buffer_desc *d = &k->buffers[i];
            if (d->role == ATTN_BUF_TOKEN_INPUT)
                c->args[q].buf[i] = &s->in[d->weight].view;
            else if (d->role == ATTN_BUF_SEQ_INPUT)
                c->args[q].buf[i] = &s->in[d->weight].value;
        }
        row += n_tokens[q];
    }
    for (int i = 0; i < c->n_pre; i++) { /* the team's scratch; place() kept the first blocks */
        const attn_kernel_args *last = &c->args[c->pre_end[i] - 1];
        attn_kernel_args *a = &c->pre[i];
        *a = c->args[c->pre_first[i]];
        a->flags = ATTN_ARGS_PREFIX;
        a->n_past = c->pre_keys[i];
        a->n_shared = 0;
        a->n_tokens = last->tok0 + last->n_tokens - a->tok0;
    }

    for (int j = c->n_team; j < c->n_run; j++) { /* a solo sequence: its thread's scratch */
        size_t at = shared + (size_t)c->owner[j] * solo;
        for (uint32_t i = 0; i < k->n_buffers; i++) {
            if (c->solo_bytes[i])
                c->args[c->order[j]].buf[i] = (char *)c->scratch + at;
            at += c->solo_bytes[i];
        }
    }

#pragma omp parallel num_threads(b->n_threads)
    {
        uint32_t ith = (uint32_t)omp_get_thread_num(), nth = (uint32_t)omp_get_num_threads();
        for (uint32_t i = 0; i < k->n_steps;) {
            if (k->steps[i].phase == ATTN_PHASE_LOAD ||   /* ran when the weights were set */
                k->steps[i].phase == ATTN_PHASE_MEMORY) { /* ran by attn_seq_set_memory */
                i++;
                continue;
            }
            if (k->steps[i].phase == ATTN_PHASE_TOKENS) {
                run_step(c, i++, batch, ith, nth);
                continue;
            }
            uint32_t end = i;
            while (end < k->n_steps && k->steps[end].phase == ATTN_PHASE_SEQUENCE)
                end++;
            for (int p = 0; p < c->n_pre; p++) /* shared prefixes first, by every thread */
                for (uint32_t j = i; j < end; j++)
                    if (k->steps[j].flags & ATTN_STEP_PREFIX)
                        run_step(c, j, &c->pre[p], ith, nth);
            for (int t = 0; t < c->n_team; t++)
                for (uint32_t j = i; j < end; j++)
                    run_step(c, j, &c->args[c->order[t]], ith, nth);
            double t0 = c->step_seconds && ith == 0 ? omp_get_wtime() : 0;
            for (int t = c->n_team; t < c->n_run; t++) /* fewer threads than asked: shared out */
                for (uint32_t j = i; j < end && (uint32_t)c->owner[t] % nth == ith; j++)
                    k->steps[j].fn(&c->args[c->order[t]], 0, 1);
            if (c->n_run > c->n_team) {
#pragma omp barrier
                if (c->step_seconds && ith == 0) /* side by side: the span, on the first step */
                    c->step_seconds[i] += omp_get_wtime() - t0;
            }
            i = end;
        }
    }

    return ATTN_OK;
}

/* run() with the batch in `order`: x's rows gathered into that order, y's
 * scattered back. */
static attn_status run_in_order(attn_cache *c, int n, const int32_t *seqs, const int32_t *n_tokens,
                                int64_t total, const float *x, float *y, const int *order) {
    int64_t D = c->cfg.d_model;
    int32_t *s2 = malloc((size_t)n * 2 * sizeof *s2);
    int64_t *row = malloc((size_t)n * sizeof *row);
    float *x2 = malloc((size_t)(total * D) * sizeof *x2),
          *y2 = malloc((size_t)(total * D) * sizeof *y2);
    attn_status st = ATTN_E_NOMEM;
    if (s2 && row && x2 && y2) {
        int32_t *n2 = s2 + n;
        int64_t r = 0;
        for (int q = 0; q < n; r += n_tokens[q++])
            row[q] = r;
        r = 0;
        for (int i = 0; i < n; r += n_tokens[order[i++]]) {
            s2[i] = seqs[order[i]];
            n2[i] = n_tokens[order[i]];
            memcpy(x2 + r * D, x + row[order[i]] * D, (size_t)(n2[i] * D) * sizeof *x2);
        }
        st = run(c, n, s2, n2, total, x2, y2, NULL);
        r = 0;
        for (int i = 0; st == ATTN_OK && i < n; r += n2[i++])
            memcpy(y + row[order[i]] * D, y2 + r * D, (size_t)(n2[i] * D) * sizeof *y);
    } else {
        rt_fail(&c->error, st, "out of memory for the batch's order (%lld rows)", (long long)total);
    }
    free(s2), free(row), free(x2), free(y2);
    return st;
}

attn_status attn_forward(attn_block *b, attn_cache *c, int n, const int32_t *seqs,
                         const int32_t *n_tokens, const float *x, float *y) {
    attn_status st = check_call(b, c);
    if (st)
        return st;
    if (n < 1 || !seqs || !n_tokens)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "a batch needs n >= 1 sequences and their token counts");
    const attn_config *cfg = &c->cfg;
    int64_t total = 0, need = 0;
    for (int i = 0; i < n; i++) {
        const seq *s = find(c, seqs[i]);
        if (!s)
            return rt_fail(&c->error, ATTN_E_INVALID, "sequence %d is unknown or freed", seqs[i]);
        for (int j = 0; j < i; j++)
            if (seqs[j] == seqs[i])
                return rt_fail(&c->error, ATTN_E_INVALID, "sequence %d appears twice in the batch",
                               seqs[i]);
        if (n_tokens[i] < 0)
            return rt_fail(&c->error, ATTN_E_INVALID, "n_tokens[%d] is negative", i);
        if (cfg->memory_dim > 0 && s->mem == 0)
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "sequence %d has no memory: a cross-attention block attends to the "
                           "memory attn_seq_set_memory gives it",
                           seqs[i]);
        if (s->draft > 0 && n_tokens[i] > 0)
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "sequence %d has %d draft tokens; attn_seq_accept them (or none) "
                           "first",
                           seqs[i], s->draft);
        if ((st = check_inputs(c, seqs[i], n_tokens[i])))
            return st;
        if (cfg->memory_dim == 0 && s->len + n_tokens[i] > cfg->kv_max_tokens)
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "sequence %d would reach position %lld; kv_cache.max_tokens is %lld",
                           seqs[i], (long long)(s->len + n_tokens[i] - 1),
                           (long long)cfg->kv_max_tokens);
        total += n_tokens[i];
        need += blocks_needed(c, s, n_tokens[i]);
    }
    if (need > available(c))
        return rt_fail(&c->error, ATTN_E_CAPACITY,
                       "the batch needs %lld more blocks, %lld are free", (long long)need,
                       (long long)available(c));
    if (total == 0)
        return ATTN_OK;
    if (!x || !y)
        return rt_fail(&c->error, ATTN_E_INVALID, "x and y are required");
    /* sequences sharing a prefix run side by side (group() takes runs) */
    int *order = NULL;
    if (c->cascade >= 0 && n > 2) {
        order = malloc((size_t)n * (sizeof *order + sizeof(bool)));
        if (!order)
            return rt_fail(&c->error, ATTN_E_NOMEM, "out of memory for a batch of %d", n);
        if (!sharers_together(c, n, seqs, n_tokens, order, (bool *)(order + n))) {
            free(order);
            order = NULL;
        }
    }
    st = order ? run_in_order(c, n, seqs, n_tokens, total, x, y, order)
               : run(c, n, seqs, n_tokens, total, x, y, NULL);
    free(order);
    if (st)
        return st;
    for (int q = 0; q < n; q++) {
        seq *s = &c->seqs[seqs[q]];
        s->len += n_tokens[q];
        /* future queries see keys from the window's or chunk's first on */
        if (cfg->sliding_window > 0 || cfg->chunk > 0) {
            int64_t keep_from = attn_first_key(cfg, s->len) / c->bt;
            if (keep_from > s->released) {
                release(c, s, s->released, keep_from);
                s->released = keep_from;
            }
        }
    }
    return ATTN_OK;
}

/* ---- draft trees (speculative decoding) ------------------------------------- */

attn_status attn_forward_tree(attn_block *b, attn_cache *c, int32_t id, int32_t n,
                              const int32_t *parent, const float *x, float *y) {
    attn_status st = check_call(b, c);
    if (st)
        return st;
    const char *why = attn_tree_unsupported(&c->cfg);
    if (why)
        return rt_fail(&c->error, ATTN_E_INVALID, "forward_tree: block '%s': %s", c->cfg.name, why);
    seq *s = find(c, id);
    if (!s)
        return rt_fail(&c->error, ATTN_E_INVALID, "forward_tree: unknown sequence %d", id);
    if (n < 1 || n > ATTN_TREE_MAX || !parent || !x || !y)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "forward_tree: needs 1 to %d tokens (got %d), their parents, x and y",
                       ATTN_TREE_MAX, n);
    if (s->draft > 0)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "forward_tree: sequence %d has %d draft tokens already; attn_seq_accept "
                       "them (or none) first",
                       id, s->draft);
    if (s->len + n > c->cfg.kv_max_tokens)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "forward_tree: sequence %d's %d draft tokens would need cache rows up to "
                       "%lld; kv_cache.max_tokens is %lld",
                       id, n, (long long)(s->len + n - 1), (long long)c->cfg.kv_max_tokens);
    int8_t depth[ATTN_TREE_MAX];
    for (int32_t i = 0; i < n; i++) {
        if (parent[i] < -1 || parent[i] >= i)
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "forward_tree: parent[%d] is %d; a token's parent is -1 (the "
                           "sequence's last token) or an earlier token of the call (0..%d)",
                           i, parent[i], i - 1);
        /* token i sees itself and its ancestors' keys */
        c->tree[i] = (UINT64_C(1) << i) | (parent[i] < 0 ? 0 : c->tree[parent[i]]);
        depth[i] = (int8_t)(parent[i] < 0 ? 0 : depth[parent[i]] + 1);
    }
    int64_t need = blocks_needed(c, s, n);
    if (need > available(c))
        return rt_fail(&c->error, ATTN_E_CAPACITY,
                       "forward_tree: %d draft tokens need %lld more blocks, %lld are free", n,
                       (long long)need, (long long)available(c));
    if ((st = run(c, 1, &id, &n, n, x, y, depth)))
        return st;
    s->draft = n;
    for (int32_t i = 0; i < n; i++)
        s->parent[i] = (int8_t)parent[i];
    return ATTN_OK;
}

/* Copies the K (which 0) or V (1) values of cache row `from` to row `to`
 * (rows: block * block_tokens + offset), in the pool's layout
 * (attn_kernels.h): K's columns each hold a block's tokens side by side,
 * V's tokens are rows; a q8_0 block ends in the f16 scales of its groups
 * of 32 columns, at (column / 32) * block_tokens + token. */
static void move_row(attn_cache *c, int which, int64_t from, int64_t to) {
    int64_t cols = attn_cache_columns(&c->cfg, which), bt = c->bt;
    if (cols == 0)
        return;
    bool q8 = c->cfg.kv_dtype == ATTN_DTYPE_Q8_0;
    size_t es = q8 ? 1 : attn_dtype_bytes(c->cfg.kv_dtype, 1);
    size_t block = (size_t)bt * c->row_bytes[which];
    char *pool = which ? c->v : c->k;
    char *src = pool + (size_t)(from / bt) * block, *dst = pool + (size_t)(to / bt) * block;
    int64_t fo = from % bt, tof = to % bt;
    if (which)
        memcpy(dst + (size_t)(tof * cols) * es, src + (size_t)(fo * cols) * es, (size_t)cols * es);
    else
        for (int64_t col = 0; col < cols; col++)
            memcpy(dst + (size_t)(col * bt + tof) * es, src + (size_t)(col * bt + fo) * es, es);
    for (int64_t g = 0; q8 && g < cols / 32; g++) {
        size_t scales = (size_t)(bt * cols); /* bytes of q before them */
        memcpy(dst + scales + (size_t)(g * bt + tof) * 2, src + scales + (size_t)(g * bt + fo) * 2,
               2);
    }
}

attn_status attn_seq_accept(attn_cache *c, int32_t id, int32_t n_keep, const int32_t *keep) {
    if (!c)
        return ATTN_E_INVALID;
    c->error.text[0] = 0;
    seq *s = find(c, id);
    if (!s)
        return rt_fail(&c->error, ATTN_E_INVALID, "accept: unknown sequence %d", id);
    if (s->draft == 0)
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "accept: sequence %d has no draft tokens (attn_forward_tree makes them)",
                       id);
    if (n_keep < 0 || n_keep > s->draft || (n_keep > 0 && !keep))
        return rt_fail(&c->error, ATTN_E_INVALID,
                       "accept: keeps 0 to %d of sequence %d's draft tokens (got %d%s)", s->draft,
                       id, n_keep, n_keep > 0 && !keep ? ", keep NULL" : "");
    for (int32_t j = 0; j < n_keep; j++) {
        int32_t want = j ? keep[j - 1] : -1;
        if (keep[j] < 0 || keep[j] >= s->draft)
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "accept: keep[%d] is %d; the draft tokens are 0..%d", j, keep[j],
                           s->draft - 1);
        if (s->parent[keep[j]] != want)
            return rt_fail(&c->error, ATTN_E_INVALID,
                           "accept: keep is not a path from a root: keep[%d] = %d has parent %d, "
                           "not %d",
                           j, keep[j], s->parent[keep[j]], want);
    }
    /* the kept tokens move down to rows len..: a path's j-th token is at
     * draft index keep[j] >= j, so no row is overwritten before it moves.
     * The rows past len are the sequence's own (a draft cannot be forked,
     * and only full blocks below len are published). */
    for (int32_t j = 0; j < n_keep; j++) {
        if (keep[j] == j)
            continue;
        for (int which = 0; which < 2; which++)
            move_row(c, which, cache_row(c, s, s->len + keep[j]), cache_row(c, s, s->len + j));
    }
    int64_t end = blocks_for(c, rows(c, s));
    s->len += n_keep;
    s->draft = 0;
    release(c, s, blocks_for(c, s->len), end);
    return ATTN_OK;
}
