"""attnc from Python: compile an attention spec with the JIT, load weights,
run prefill and decode through the paged KV cache.

ctypes over the two C libraries (libattnc.so, the compiler, and libattn.so,
the runtime); no compiled extension. The libraries are found in
$ATTNC_LIB_DIR, else the source tree's build/ (when this package is run from
it, or was installed with pip from it), else pkg-config's libdir of attnc,
else the dynamic loader's paths.
Kernels run with the GIL released (ctypes drops it around every C call).

    import numpy as np, attnc
    k = attnc.compile("specs/seed.yaml")          # a path or YAML text
    block = attnc.Block(k, "w.safetensors")       # or a dict of numpy arrays
    cache = block.cache(256)
    s = cache.new_seq()
    y = block.forward(cache, s, x)                # x [tokens, d_model]
    t = s.fork()                                  # shares s's blocks
    ys = block.forward(cache, [s, t], [x1, x2])   # one call, two sequences
"""

import ctypes
import os
import subprocess
import tempfile
from ctypes import (POINTER, Structure, byref, c_char, c_char_p, c_double, c_int, c_int32,
                    c_int64, c_void_p)
from pathlib import Path

import numpy as np

__all__ = ["Error", "Kernels", "Block", "Cache", "Seq", "compile", "import_spec", "library_dir",
           "load_tensors", "save_tensors"]

_ST_MAX_DIMS = 8
_MSG_MAX = 512
_LOAD_CHECK_FINITE = 1


class Error(Exception):
    """A failure reported by attnc; the message is the library's own."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


# ---- the libraries -----------------------------------------------------------


def _candidate_dirs():
    """(libattnc.so's directory, libattn.so's) pairs to try, in order."""
    env = os.environ.get("ATTNC_LIB_DIR")
    if env:  # an install's lib, or a build tree's compiler/ (the runtime beside it)
        d = Path(env)
        yield d, d
        yield d, d.parent / "runtime"
        return
    roots = [Path(__file__).resolve().parent.parent.parent]
    try:  # a pip-installed copy: the tree it was built from (setup.py)
        from ._origin import SOURCE_TREE
        roots.append(Path(SOURCE_TREE))
    except ImportError:
        pass
    for root in roots:
        yield root / "build" / "compiler", root / "build" / "runtime"
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "attnc"], capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            d = Path(out.stdout.strip())
            yield d, d
    except (OSError, subprocess.SubprocessError):
        pass


def _load():
    for cdir, rdir in _candidate_dirs():
        if (cdir / "libattnc.so").exists() and (rdir / "libattn.so").exists():
            # the runtime first: libattnc.so needs it
            return (ctypes.CDLL(str(rdir / "libattn.so")),
                    ctypes.CDLL(str(cdir / "libattnc.so")), cdir)
    try:
        return ctypes.CDLL("libattn.so"), ctypes.CDLL("libattnc.so.0"), None
    except OSError as e:
        raise ImportError(
            "attnc: libattnc.so and libattn.so not found in %s: set ATTNC_LIB_DIR to the "
            "directory holding libattnc.so (a build tree's build/compiler, or an install's lib), "
            "build the source tree with scripts/build, or install attnc where pkg-config finds "
            "it (%s)" % (", ".join(str(c) for c, _ in _candidate_dirs()) or "no directory", e)
        ) from None


_rt, _cc, _libdir = _load()
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [c_void_p]
_libc.free.restype = None


def library_dir():
    """The directory the libraries were loaded from (None: the loader's paths)."""
    return _libdir


class _Msg(Structure):
    _fields_ = [("text", c_char * _MSG_MAX)]


class _Options(Structure):  # attnc_options
    _fields_ = [("disabled_passes", POINTER(c_char_p)), ("n_disabled_passes", c_int),
                ("target", c_char_p), ("cpu", c_char_p), ("features", c_char_p),
                ("emit_llvm", c_char_p), ("emit_asm", c_char_p), ("cache_dir", c_char_p),
                ("no_cache", c_int), ("threads", c_int), ("shard_index", c_int64),
                ("shard_count", c_int64)]


class _Timings(Structure):  # attnc_timings
    _fields_ = [(n, c_double) for n in ("spec_ms", "ir_ms", "passes_ms", "llvm_ms", "optimize_ms",
                                        "codegen_ms", "objects_ms", "cache_ms", "jit_ms",
                                        "total_ms")] + [("threads", c_int), ("cache", c_int)]


_CONFIG_AT = 16  # attn_kernels: 4 x u32, then its attn_config (attn_kernels.h asserts it)


class _ConfigField(Structure):  # attn_config_field (attn.h)
    _fields_ = [("name", c_char_p), ("key", c_char_p), ("kind", c_int),
                ("offset", ctypes.c_size_t), ("size", ctypes.c_size_t), ("plain", ctypes.c_bool),
                ("default", c_double), ("lo", c_double), ("hi", c_double)]


class _BlockOptions(Structure):  # attn_block_options
    _fields_ = [("n_threads", c_int), ("shard_index", c_int64), ("shard_count", c_int64)]


class _StTensor(Structure):  # attn_st_tensor
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_int64 * _ST_MAX_DIMS), ("data", c_void_p)]


class _StInfo(Structure):  # attn_st_info
    _fields_ = [("name", c_char_p), ("dtype", c_char_p), ("ndim", c_int),
                ("shape", c_int64 * _ST_MAX_DIMS), ("nbytes", ctypes.c_size_t), ("data", c_void_p)]


class _CacheStats(Structure):  # attn_cache_stats
    _fields_ = [("blocks_total", c_int64), ("blocks_used", c_int64), ("blocks_free", c_int64),
                ("block_tokens", c_int64), ("sequences", c_int32),
                ("published_blocks", c_int64), ("evicted_blocks", c_int64)]


def _fn(lib, name, res, *args):
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


_ctx_new = _fn(_cc, "attnc_ctx_new", c_void_p)
_ctx_free = _fn(_cc, "attnc_ctx_free", None, c_void_p)
_diag_text = _fn(_cc, "attnc_diag_text", c_int, c_void_p, c_char_p, ctypes.c_size_t)
_jit_compile = _fn(_cc, "attnc_jit_compile_file", c_int, c_void_p, c_char_p, POINTER(_Options),
                   POINTER(c_void_p))
_jit_kernels = _fn(_cc, "attnc_jit_kernels", c_void_p, c_void_p)
_jit_timings = _fn(_cc, "attnc_jit_timings", _Timings, c_void_p)
_jit_free = _fn(_cc, "attnc_jit_free", None, c_void_p)
class _ImportOptions(Structure):  # attnc_import_options
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("max_tokens", c_int64)]


_import = _fn(_cc, "attnc_import", c_int, c_void_p, c_char_p, c_int64, POINTER(_ImportOptions),
              POINTER(c_void_p))
_config_fields_fn = _fn(_rt, "attn_config_fields", POINTER(_ConfigField), POINTER(ctypes.c_size_t))
_status_str = _fn(_rt, "attn_status_str", c_char_p, c_int)
_block_options_default = _fn(_rt, "attn_block_options_default", _BlockOptions)
_block_new = _fn(_rt, "attn_block_new", c_int, c_void_p, POINTER(_BlockOptions), POINTER(c_void_p))
_block_free = _fn(_rt, "attn_block_free", None, c_void_p)
_kernels_check = _fn(_rt, "attn_kernels_check", c_int, c_void_p, POINTER(_Msg))
_block_error = _fn(_rt, "attn_block_error", c_char_p, c_void_p)
_block_load = _fn(_rt, "attn_block_load", c_int, c_void_p, c_char_p, c_char_p, ctypes.c_uint)
_st_write = _fn(_rt, "attn_st_write", c_int, c_char_p, POINTER(_StTensor), c_int, POINTER(_Msg))
_st_open = _fn(_rt, "attn_st_open", c_int, c_char_p, POINTER(c_void_p), POINTER(_Msg))
_st_close = _fn(_rt, "attn_st_close", None, c_void_p)
_st_count = _fn(_rt, "attn_st_count", c_int, c_void_p)
_st_get = _fn(_rt, "attn_st_get", POINTER(_StInfo), c_void_p, c_int)
_st_format = _fn(_rt, "attn_st_format", c_int, c_void_p, POINTER(_StInfo), POINTER(c_int64))
_st_read_f32 = _fn(_rt, "attn_st_read_f32", c_int, c_void_p, c_char_p, c_int, POINTER(c_int64),
                   c_void_p, POINTER(_Msg))
_cache_new = _fn(_rt, "attn_cache_new", c_int, c_void_p, c_int64, POINTER(c_void_p))
_cache_free = _fn(_rt, "attn_cache_free", None, c_void_p)
_cache_error = _fn(_rt, "attn_cache_error", c_char_p, c_void_p)
_cache_stats = _fn(_rt, "attn_cache_get_stats", _CacheStats, c_void_p)
_seq_new = _fn(_rt, "attn_seq_new", c_int, c_void_p, POINTER(c_int32))
_seq_fork = _fn(_rt, "attn_seq_fork", c_int, c_void_p, c_int32, POINTER(c_int32))
_seq_truncate = _fn(_rt, "attn_seq_truncate", c_int, c_void_p, c_int32, c_int64)
_seq_free = _fn(_rt, "attn_seq_free", c_int, c_void_p, c_int32)
_seq_len = _fn(_rt, "attn_seq_len", c_int64, c_void_p, c_int32)
_cache_publish = _fn(_rt, "attn_cache_publish", c_int, c_void_p, c_int32, c_int64,
                     POINTER(ctypes.c_uint64))
_seq_from_prefix = _fn(_rt, "attn_seq_from_prefix", c_int, c_void_p, c_int64,
                       POINTER(ctypes.c_uint64), POINTER(c_int32), POINTER(c_int64))
_seq_set_memory = _fn(_rt, "attn_seq_set_memory", c_int, c_void_p, c_int32, c_int64, c_void_p)
_seq_set_input = _fn(_rt, "attn_seq_set_input", c_int, c_void_p, c_int32, c_char_p, c_int64,
                     c_int64, c_void_p)
_forward_tree = _fn(_rt, "attn_forward_tree", c_int, c_void_p, c_void_p, c_int32, c_int32,
                   POINTER(c_int32), c_void_p, c_void_p)
_seq_accept = _fn(_rt, "attn_seq_accept", c_int, c_void_p, c_int32, c_int32, POINTER(c_int32))
_forward = _fn(_rt, "attn_forward", c_int, c_void_p, c_void_p, c_int, POINTER(c_int32),
               POINTER(c_int32), c_void_p, c_void_p)


def _raise(status, message):
    name = _status_str(status).decode()
    raise Error(message if message else name, status)


# ---- compiling ---------------------------------------------------------------


# attn_field_kind (attn.h): NAME, I64, I32, F64, BOOL, the enums (ints), EXPR
# (None: read as strings)
_KIND_CTYPE = [None, c_int64, c_int32, c_double, ctypes.c_bool] + [c_int] * 5 + [None]


def _fields():
    n = ctypes.c_size_t()
    f = _config_fields_fn(byref(n))
    return [(f[i].name.decode(), _KIND_CTYPE[f[i].kind], f[i].offset) for i in range(n.value)]


_FIELDS = _fields()  # attn_config's fields as the runtime lists them (attn_config.def)


def _config(addr):
    """The attn_config at addr as a dict of every field by its C name
    (enums as their int values): no mirror of its layout here."""
    return {name: ctypes.string_at(addr + off).decode() if ctype is None
            else ctype.from_address(addr + off).value for name, ctype, off in _FIELDS}


class Kernels:
    """Compiled kernels of one spec, living in this process until freed."""

    def __init__(self, jit, label):
        self._jit = jit
        self._label = label
        self.config = _config(_jit_kernels(jit) + _CONFIG_AT)  # every attn_config field
        c = self.config
        self.name, self.heads, self.kv_groups = c["name"], c["heads"], c["kv_groups"]
        self.head_dim, self.d_model, self.memory_dim = c["head_dim"], c["d_model"], c["memory_dim"]
        self.shard = None  # (i, n) for shard i of n of the heads

    @property
    def _table(self):
        if not self._jit:
            raise Error("attnc: these kernels were freed")
        return _jit_kernels(self._jit)

    def timings(self):
        """Stage times of the compile (ms) and whether the kernel cache hit."""
        t = _jit_timings(self._jit)
        out = {n: getattr(t, n) for n, _ in _Timings._fields_}
        out["cache"] = ("off", "miss", "hit")[t.cache]
        return out

    def free(self):
        """Frees the machine code (blocks made from it must be gone)."""
        if self._jit:
            _jit_free(self._jit)
            self._jit = None

    def __del__(self):
        self.free()

    def __repr__(self):
        return "<attnc.Kernels %s: %d heads, %d kv groups, head_dim %d, d_model %d>" % (
            self.name, self.heads, self.kv_groups, self.head_dim, self.d_model)


def _is_yaml_text(spec):
    return isinstance(spec, str) and ("\n" in spec or ":" in spec) and not os.path.exists(spec)


def compile(spec, *, cpu=None, disable_passes=(), cache=True, threads=0, shard=None):
    """JIT-compiles a spec (a path, or YAML text) into Kernels for this CPU.

    cpu: an LLVM CPU name to compile for instead of this host's (the code
    must still run here); disable_passes: pass names to skip; cache=False:
    neither read nor write the kernel cache; threads: compile threads (0 =
    one per CPU); shard=(i, n): shard i of n of the heads (tensor
    parallelism: a Block of it loads the whole block's weights, keeps its
    slices, and gives a partial output; the n shards' outputs sum to the
    block's). Raises Error with every diagnostic of the spec."""
    tmp = None
    if _is_yaml_text(spec):
        tmp = tempfile.TemporaryDirectory(prefix="attnc-")
        path = os.path.join(tmp.name, "spec.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(spec)
        label = "<yaml>"
    else:
        path = os.fspath(spec)
        label = path
    opt = _Options()
    passes = [p.encode() for p in disable_passes]
    arr = (c_char_p * max(1, len(passes)))(*passes)
    opt.disabled_passes = ctypes.cast(arr, POINTER(c_char_p))
    opt.n_disabled_passes = len(passes)
    opt.cpu = cpu.encode() if cpu else None
    opt.no_cache = 0 if cache else 1
    opt.threads = int(threads)
    if shard is not None:
        try:
            i, n = (int(v) for v in shard)
        except (TypeError, ValueError):
            raise Error("attnc: shard expects a pair (i, n), not %r" % (shard,)) from None
        if not 0 <= i < n:
            raise Error("attnc: shard (%d, %d): expected 0 <= i < n" % (i, n))
        opt.shard_index, opt.shard_count = i, n
    jit, ctx = c_void_p(), _ctx_new()
    try:
        st = _jit_compile(ctx, path.encode(), byref(opt), byref(jit))
        text = _diags(ctx)
    finally:
        _ctx_free(ctx)
        if tmp:
            tmp.cleanup()
    if tmp:
        text = text.replace(path, label)
    if st != 0:
        raise Error(text.strip() or "attnc: compiling %s failed" % label, st)
    kernels = Kernels(jit.value, label)
    kernels.shard = (opt.shard_index, opt.shard_count) if opt.shard_count > 1 else None
    return kernels


def _diags(ctx):
    n = _diag_text(ctx, None, 0)
    buf = ctypes.create_string_buffer(max(n, 0) + 1)
    _diag_text(ctx, buf, len(buf))
    return buf.value.decode(errors="replace")


def import_spec(path, layer=0, *, name=None, dtype=None, max_tokens=0):
    """The spec (YAML text) of layer's attention from a Hugging Face
    config.json or a GGUF file, as `attnc import` writes it; pass it to
    compile(). name: the spec's name (default MODELTYPE_layerN); dtype:
    the weights' dtype ("f32", "bf16", "q8_0", ...; default the
    checkpoint's); max_tokens: kv_cache.max_tokens (0: the model's
    context, at most 8192). Raises Error naming a field attnc cannot
    express."""
    if dtype is not None and dtype not in _DTYPES:
        raise Error("attnc: dtype '%s': expected one of %s" % (dtype, ", ".join(_DTYPES)))
    opt = _ImportOptions(name.encode() if name else None,
                         _DTYPES[dtype] if dtype is not None else -1, int(max_tokens))
    out, ctx = c_void_p(), _ctx_new()
    try:
        st = _import(ctx, os.fspath(path).encode(), int(layer), byref(opt), byref(out))
        text = _diags(ctx)
    finally:
        _ctx_free(ctx)
    if st != 0:
        raise Error(text.strip() or "attnc: importing %s failed" % path, st)
    try:
        return ctypes.string_at(out.value).decode()
    finally:
        _libc.free(out)


# ---- blocks, caches, sequences -------------------------------------------------------


_DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "q8_0": 3, "q4_0": 4}
_DTYPE_COUNT = 5


def save_tensors(path, tensors, dtype="f32"):
    """Writes a dict name -> array as a safetensors file (atomically), each
    stored as dtype: f32, f16, bf16 (rounded to nearest even), or q8_0 /
    q4_0 (2-D and wider: rows quantized in ggml's blocks)."""
    if dtype not in _DTYPES:
        raise Error("attnc: dtype '%s': expected one of %s" % (dtype, ", ".join(_DTYPES)))
    keep, entries = [], []
    for name, value in tensors.items():
        a = np.ascontiguousarray(np.asarray(value, dtype=np.float32))
        if a.ndim < 1 or a.ndim > _ST_MAX_DIMS:
            raise Error("attnc: tensor '%s' has %d dimensions (1 to %d expected)" %
                        (name, a.ndim, _ST_MAX_DIMS))
        t = _StTensor()
        t.name = str(name).encode()
        t.dtype = _DTYPES[dtype]
        t.ndim = a.ndim
        for i, n in enumerate(a.shape):
            t.shape[i] = n
        t.data = a.ctypes.data
        keep.append((a, t.name))
        entries.append(t)
    if not entries:
        raise Error("attnc: no tensors to write")
    arr = (_StTensor * len(entries))(*entries)
    msg = _Msg()
    st = _st_write(os.fspath(path).encode(), arr, len(entries), byref(msg))
    if st != 0:
        _raise(st, msg.text.decode(errors="replace"))


def load_tensors(path):
    """The tensors of a safetensors file as a dict name -> float32 array
    (F32, F16, BF16 and attnc's Q8_0/Q4_0 blocks converted exactly; tensors
    of other dtypes, e.g. integers, are left out)."""
    f, msg = c_void_p(), _Msg()
    st = _st_open(os.fspath(path).encode(), byref(f), byref(msg))
    if st != 0:
        _raise(st, msg.text.decode(errors="replace"))
    try:
        out = {}
        for i in range(_st_count(f)):
            info = _st_get(f, i)
            shape = (c_int64 * _ST_MAX_DIMS)()
            if _st_format(f, info, shape) >= _DTYPE_COUNT:
                continue
            ndim = info.contents.ndim
            a = np.empty(tuple(shape[:ndim]), dtype=np.float32)
            st = _st_read_f32(f, info.contents.name, ndim, shape, a.ctypes.data, byref(msg))
            if st != 0:
                _raise(st, msg.text.decode(errors="replace"))
            out[info.contents.name.decode()] = a
        return out
    finally:
        _st_close(f)


class Block:
    """Kernels and their weights: a checkpoint path (.safetensors, a sharded
    model.safetensors.index.json, .gguf) or a dict name -> array with the
    checkpoint's tensor names (q_proj.weight, ...). prefix: the names'
    prefix in the checkpoint (e.g. model.layers.0.self_attn.); threads:
    kernel threads (0: $ATTN_THREADS, else every CPU); check_finite: refuse
    NaN and infinity in the weights."""

    def __init__(self, kernels, weights, *, prefix=None, threads=0, check_finite=False):
        if not isinstance(kernels, Kernels):
            raise Error("attnc: Block expects Kernels from attnc.compile, not %s" %
                        type(kernels).__name__)
        self.kernels = kernels
        self._b = None
        opt = _block_options_default()
        opt.n_threads = int(threads)
        b = c_void_p()
        st = _block_new(kernels._table, byref(opt), byref(b))
        if st != 0:
            msg = _Msg()
            _kernels_check(kernels._table, byref(msg))
            _raise(st, msg.text.decode(errors="replace"))
        self._b = b.value
        flags = _LOAD_CHECK_FINITE if check_finite else 0
        pre = prefix.encode() if prefix else None
        if isinstance(weights, dict):
            with tempfile.TemporaryDirectory(prefix="attnc-") as d:
                path = os.path.join(d, "weights.safetensors")
                save_tensors(path, weights)
                st = _block_load(self._b, path.encode(), pre, flags)
                message = _block_error(self._b).decode(errors="replace").replace(path, "<dict>")
        else:
            st = _block_load(self._b, os.fspath(weights).encode(), pre, flags)
            message = _block_error(self._b).decode(errors="replace")
        if st != 0:
            self.close()
            _raise(st, message)

    @property
    def d_model(self):
        return self.kernels.d_model

    def cache(self, max_tokens):
        """A paged KV cache with room for max_tokens tokens over all its
        sequences (rounded up to whole cache blocks)."""
        return Cache(self, max_tokens)

    def _ready(self, cache, what):
        """Refuses a closed block, freed kernels or another block's cache."""
        if self._b is None:
            raise Error("attnc: this block was closed")
        if not self.kernels._jit:
            raise Error("attnc: this block's kernels were freed")
        if not isinstance(cache, Cache) or cache.block is not self:
            raise Error("attnc: %s needs a cache made by this block (block.cache(n))" % what)

    def forward(self, cache, seqs, xs):
        """Appends new tokens to sequences and returns their outputs.

        seqs, xs: one Seq and one array [tokens, d_model] (or [d_model] for
        one token), or lists of them (one call for all; a sequence at most
        once). Arrays are float32 (float16 and others are converted); the
        outputs are float32 of the same shapes. On error nothing changed."""
        self._ready(cache, "forward")
        single = isinstance(seqs, Seq)
        if single:
            seqs, xs = [seqs], [xs]
        seqs, xs = list(seqs), list(xs)
        if len(seqs) != len(xs):
            raise Error("attnc: %d sequences but %d inputs" % (len(seqs), len(xs)))
        D = self.d_model
        rows, vectors = [], []
        for i, (s, x) in enumerate(zip(seqs, xs)):
            if not isinstance(s, Seq) or s.cache is not cache:
                raise Error("attnc: sequence %d does not belong to this cache" % i)
            a = np.asarray(x)
            vectors.append(a.ndim == 1)
            if a.ndim == 1:
                a = a.reshape(1, -1)
            if a.ndim != 2 or a.shape[1] != D:
                raise Error("attnc: input %d has shape %s; expected [tokens, %d]" %
                            (i, tuple(np.shape(x)), D))
            rows.append(a)
        x = np.ascontiguousarray(np.concatenate(rows) if rows else np.zeros((0, D)),
                                 dtype=np.float32)
        y = np.empty_like(x)
        n = len(seqs)
        ids = (c_int32 * max(1, n))(*[s._id for s in seqs])
        counts = (c_int32 * max(1, n))(*[r.shape[0] for r in rows])
        cache._check(_forward(self._b, cache._c, n, ids, counts, x.ctypes.data, y.ctypes.data))
        outs, at = [], 0
        for r, vec in zip(rows, vectors):
            o = y[at:at + r.shape[0]]
            outs.append(o.reshape(-1) if vec else o)
            at += r.shape[0]
        return outs[0] if single else outs

    def forward_tree(self, cache, seq, parents, x):
        """Speculative decoding: the outputs [n, d_model] of n draft tokens x
        [n, d_model] whose parents form a tree (parents[i] < i, or -1 for a
        child of the sequence's last token): each sees the sequence and its
        ancestors. The draft waits in the cache until seq.accept(keep)."""
        self._ready(cache, "forward_tree")
        if not isinstance(seq, Seq) or seq.cache is not cache:
            raise Error("attnc: the sequence does not belong to this cache")
        a = np.ascontiguousarray(x, dtype=np.float32)
        par = [int(p) for p in parents]
        if a.ndim != 2 or a.shape[1] != self.d_model or a.shape[0] != len(par):
            raise Error("attnc: x has shape %s; expected [%d, %d] (one row per parent)" %
                        (tuple(np.shape(x)), len(par), self.d_model))
        y = np.empty_like(a)
        arr = (c_int32 * max(1, len(par)))(*par)
        cache._check(
            _forward_tree(self._b, cache._c, seq.id, len(par), arr, a.ctypes.data, y.ctypes.data))
        return y

    def close(self):
        """Frees the block now (its caches must be gone)."""
        if self._b is not None:
            _block_free(self._b)
            self._b = None

    def __del__(self):
        self.close()


class Cache:
    """A block's paged KV cache, holding any number of sequences."""

    def __init__(self, block, max_tokens):
        if block._b is None:
            raise Error("attnc: this block was closed")
        self.block = block
        self._c = None
        c = c_void_p()
        st = _cache_new(block._b, int(max_tokens), byref(c))
        if st != 0:
            _raise(st, "attnc: a cache of %d tokens could not be made (%s)" %
                   (max_tokens, _status_str(st).decode()))
        self._c = c.value

    def _check(self, st):
        if st != 0:
            _raise(st, _cache_error(self._c).decode(errors="replace"))

    def new_seq(self):
        """A new, empty sequence."""
        s = c_int32()
        self._check(_seq_new(self._c, byref(s)))
        return Seq(self, s.value)

    @staticmethod
    def _keys(keys):
        try:
            ks = [int(k) for k in keys]
        except TypeError:
            raise Error("attnc: keys must be a sequence of integers, got %s" %
                        type(keys).__name__) from None
        for k in ks:
            if not 0 <= k < 1 << 64:
                raise Error("attnc: key %d is not an unsigned 64-bit integer" % k)
        return len(ks), (ctypes.c_uint64 * max(1, len(ks)))(*ks)

    def publish(self, seq, keys):
        """Publishes seq's first len(keys) full blocks: keys[i] (an unsigned
        64-bit integer) names the content of blocks 0..i, chained by the
        caller, e.g. a hash of keys[i-1] and block i's token ids."""
        if seq.cache is not self:
            raise Error("attnc: sequence %d belongs to another cache" % seq.id)
        n, arr = self._keys(keys)
        self._check(_cache_publish(self._c, seq.id, n, arr))

    def from_prefix(self, keys):
        """A new sequence holding the longest published chain keys starts
        with (blocks shared), and how many tokens it holds: (Seq, n_tokens).
        Feed it the tokens after those."""
        n, arr = self._keys(keys)
        s, got = c_int32(), c_int64()
        self._check(_seq_from_prefix(self._c, n, arr, byref(s), byref(got)))
        return Seq(self, s.value), got.value

    def stats(self):
        """Blocks of the pool (total, used by sequences, free or idle), tokens
        per block, live sequences, blocks published now and evicted in all."""
        s = _cache_stats(self._c)
        return {n: getattr(s, n) for n, _ in _CacheStats._fields_}

    def close(self):
        if self._c is not None:
            _cache_free(self._c)
            self._c = None

    def __del__(self):
        self.close()


class Seq:
    """One sequence of a cache: its tokens so far."""

    def __init__(self, cache, sid):
        self.cache = cache
        self._id = sid

    @property
    def id(self):
        return self._id

    def fork(self):
        """A new sequence holding this one's tokens (blocks shared, copy on write)."""
        d = c_int32()
        self.cache._check(_seq_fork(self.cache._c, self._id, byref(d)))
        return Seq(self.cache, d.value)

    def truncate(self, n_tokens):
        """Rolls the sequence back to its first n_tokens tokens."""
        self.cache._check(_seq_truncate(self.cache._c, self._id, int(n_tokens)))

    def set_memory(self, memory):
        """Cross-attention: the memory every later forward of this sequence
        attends to, an array [rows, memory_dim] (float32; others are
        converted), projected to K and V once. Only before the sequence's
        first forward (or after truncating it to 0); a fork shares it."""
        if not self.cache.block.kernels._jit:
            raise Error("attnc: this block's kernels were freed")
        mdim = self.cache.block.kernels.memory_dim
        if mdim == 0:
            raise Error("attnc: %s is self-attention; set_memory is for cross_attention specs" %
                        self.cache.block.kernels.name)
        a = np.ascontiguousarray(memory, dtype=np.float32)
        if a.ndim != 2 or a.shape[1] != mdim:
            raise Error("attnc: memory has shape %s; expected [rows, %d]" %
                        (tuple(np.shape(memory)), mdim))
        self.cache._check(_seq_set_memory(self.cache._c, self._id, a.shape[0], a.ctypes.data))

    def set_input(self, name, values, first=0):
        """Values of the spec's input `name` (its `inputs:`): for a token
        input, an int32 array (or a list, or one int) for positions first,
        first + 1, ...; for a sequence input, one int (first 0). Integers
        outside int32 are refused, not wrapped."""
        a = np.asarray(values)
        if a.ndim > 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
            raise Error("attnc: set_input %s: values must be an int or a 1-D array of ints, "
                        "got %s of shape %s" % (name, a.dtype, a.shape))
        if a.size and (a.min() < -2**31 or a.max() >= 2**31):
            raise Error("attnc: set_input %s: a value is outside int32" % name)
        a = np.ascontiguousarray(a.reshape(-1), dtype=np.int32)
        self.cache._check(_seq_set_input(self.cache._c, self._id, str(name).encode(), int(first),
                                         a.size, a.ctypes.data if a.size else None))

    def accept(self, keep):
        """Keeps the draft tokens keep (indices into the last forward_tree's
        tokens, a path from a root, in order; [] keeps none) as the
        sequence's next tokens and drops the rest of the draft."""
        k = [int(i) for i in keep]
        arr = (c_int32 * max(1, len(k)))(*k)
        self.cache._check(_seq_accept(self.cache._c, self._id, len(k), arr))

    def free(self):
        """Releases the sequence and its blocks."""
        self.cache._check(_seq_free(self.cache._c, self._id))

    def __len__(self):
        n = _seq_len(self.cache._c, self._id)
        if n < 0:
            raise Error("attnc: sequence %d is unknown or freed" % self._id)
        return n

    def __repr__(self):
        n = _seq_len(self.cache._c, self._id)
        return "<attnc.Seq %d: %s>" % (self._id, "%d tokens" % n if n >= 0 else "freed")
